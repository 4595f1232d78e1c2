"""``codevolve export JOB --format module``: a KernelBench job's best ``ModelNew`` with its
reference, checked by its own test.

The module (template: kernelbench_module.txt) is the program as it was measured, verbatim, then
the job's problem file (``reference.py`` of its bundle), then ``test_model_new``, which builds
both models from the same seed and compares their outputs with KernelBench's tolerance (the
problem's ``tolerance`` setting when it has one).

Both sources bind names of their own in one module, and the reference comes second: a reference
name the program also binds would silently replace the program's (an evolved helper replaced by
the reference's original, and the test comparing the reference with itself). Such names are
renamed in the reference (``helper`` -> ``helper_reference``), except a binding both sources
make with the same statement and that reads nothing renamed (``import torch``,
``batch_size = 16``, a helper the program left as it was), which means the same thing twice.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePath
from string import Template

from codevolve.core.export import BestProgram, Exported, ExportRecords, ExportRefused, NotExported
from codevolve.core.kernel_rules import CANDIDATE_CLASS, INIT_INPUTS, INPUTS, REFERENCE_CLASS
from codevolve.core.module_names import bound_names, module_names, rename
from codevolve.core.pysource import parse_python
from codevolve.problems.kernelbench.spec import SPEC_FILE, KernelSpec, spec_of_files

DEFAULT_FILE = "model_new.py"
TEST_FUNCTION = "test_model_new"
SEED = 42  # KernelBench's seed for building both models
SUFFIX = "_reference"
# Statements two sources may share when identical: they bind the same thing in both.
_SHAREABLE = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LITERAL = (
    ast.Constant, ast.Tuple, ast.List, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.operator,
    ast.unaryop,
)  # fmt: skip


@functools.cache
def _template() -> Template:
    return Template(resources.files(__package__).joinpath("kernelbench_module.txt").read_text())


async def export_model(records: ExportRecords, file: str) -> Exported:
    """The module text of the job's best program, to be saved as ``file``; NotExported for a
    job whose files are not a KernelBench problem's."""
    files = await records.bundle_files()
    if files is None or SPEC_FILE not in files:
        raise NotExported(f"job {records.job.id} is not of a KernelBench problem")
    spec = spec_of_files(files)
    return Exported(model_module(spec, await records.best(), file=file))


def model_module(spec: KernelSpec, best: BestProgram, *, file: str) -> str:
    """The module text (see the module docstring); ExportRefused for a program it cannot hold."""
    program = best.program.source
    names = module_names(best.tree())
    if CANDIDATE_CLASS not in names:
        raise ExportRefused(f"{best.where} defines no class {CANDIDATE_CLASS}")
    if TEST_FUNCTION in names:
        raise ExportRefused(
            f"{best.where} binds {TEST_FUNCTION}, which the exported module defines"
        )
    renames = reference_renames(program, spec.reference, reserved=frozenset({TEST_FUNCTION}))
    tolerance = spec.settings.tolerance
    renamed = ""
    if renames:
        pairs = ", ".join(f"{old} -> {new}" for old, new in sorted(renames.items()))
        renamed = f"\n             renamed there, as the program binds them too: {pairs}"
    return _template().substitute(
        name=spec.name,
        job_id=best.job.id,
        program_id=best.program.id,
        score=f"{best.score:.3f}",
        compile=_compile_text(best),
        device=best.device,
        renamed=renamed,
        tolerance_text=_tolerance_text(tolerance),
        file=PurePath(file).name,
        program=program.rstrip("\n") + "\n",
        reference=rename(spec.reference, renames).rstrip("\n") + "\n",
        trials=spec.settings.seeds,
        seed=SEED,
        tolerance=repr(tolerance),
        model=renames.get(REFERENCE_CLASS, REFERENCE_CLASS),
        get_inputs=renames.get(INPUTS, INPUTS),
        get_init_inputs=renames.get(INIT_INPUTS, INIT_INPUTS),
    )


def _compile_text(best: BestProgram) -> str:
    """The speedup over torch.compile, when the run timed it (carried over by its times)."""
    compile_ms = best.program.metrics.get("compile_ms")
    eager_ms = best.program.metrics.get("eager_ms")
    if not compile_ms or not eager_ms:
        return ""
    speedup = best.score * compile_ms / eager_ms
    return f"\n             {speedup:.3f}x torch.compile (carried over by the same run's times)"


def _tolerance_text(tolerance: float | None) -> str:
    if tolerance is None:
        return "KernelBench's: atol = rtol = 1e-4 for fp32 outputs, 1e-2 for fp16 and bf16"
    return f"atol = rtol = {tolerance:g} (the problem's setting)"


@dataclass(frozen=True, slots=True)
class _Binding:
    names: frozenset[str]  # what the reference's statement binds that the program binds too
    reads: frozenset[str]  # names the statement reads
    same: bool  # the program binds those names only with this very statement


def reference_renames(program: str, reference: str, *, reserved: frozenset[str]) -> dict[str, str]:
    """Names of the reference to rename so that neither source reads the other's (see the module
    docstring): ``{old: new}``."""
    taken = module_names(program) | reserved
    in_program: dict[str, set[str]] = {}  # name -> the dumps of the statements binding it
    modules: dict[str, bool] = {}  # name -> bound only by `import a.b` forms (no `as`)
    for statement in parse_python(program).body:
        for name in bound_names(statement):
            in_program.setdefault(name, set()).add(ast.dump(statement))
            modules[name] = modules.get(name, True) and _module_import(statement)
    bindings = []
    for statement in parse_python(reference).body:
        names = frozenset(bound_names(statement) & taken)
        if not names:
            continue
        dump = ast.dump(statement)
        same = _shareable(statement) and all(in_program.get(n, set()) == {dump} for n in names)
        # `import torch` and `import torch.nn` both bind torch to the same module object
        same = same or (_module_import(statement) and all(modules.get(n, False) for n in names))
        reads = frozenset(n.id for n in ast.walk(statement) if isinstance(n, ast.Name))
        bindings.append(_Binding(names=names, reads=reads, same=same))
    renamed = {name for binding in bindings if not binding.same for name in binding.names}
    changed = True
    while changed:  # a shared statement that reads a renamed name means something else here
        changed = False
        for binding in bindings:
            if binding.reads & renamed and not binding.names <= renamed:
                renamed |= binding.names
                changed = True
    used = taken | module_names(reference)
    return {name: _fresh(name + SUFFIX, used) for name in sorted(renamed)}


def _shareable(statement: ast.stmt) -> bool:
    if isinstance(statement, _SHAREABLE):
        return True
    if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
        return all(isinstance(node, _LITERAL) for node in ast.walk(statement.value))
    return False


def _module_import(statement: ast.stmt) -> bool:
    """``import a`` or ``import a.b``, no ``as``: binds the top package, whatever the text."""
    return isinstance(statement, ast.Import) and all(a.asname is None for a in statement.names)


def _fresh(name: str, used: set[str]) -> str:
    candidate, n = name, 2
    while candidate in used:
        candidate, n = f"{name}{n}", n + 1
    used.add(candidate)
    return candidate
