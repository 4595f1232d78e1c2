"""The KernelBench problem format: one Python file, read here, never run.

A problem file defines ``class Model(nn.Module)`` (its ``__init__`` takes the values
``get_init_inputs()`` returns, its ``forward`` the values ``get_inputs()`` returns) and the two
functions. A solution is a class ``ModelNew`` with the same constructor and forward that computes
the same outputs faster. The file is the user's own: it is parsed and checked here, stored with the
job, and executed only by the trusted judge in a GPU worker's device process
(``problems/kernelbench/device/kb_judge.py``).

The initial program is the reference's class copied as ``ModelNew`` inside the EVOLVE block, with
the module-level constants, imports and helpers the class uses, so the search starts from exactly
the reference's computation (speedup 1 by construction) and every evolved program is read
against it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from codevolve.core.errors import ConfigError
from codevolve.core.kernel_rules import CANDIDATE_CLASS, INIT_INPUTS, INPUTS, REFERENCE_CLASS
from codevolve.core.pysource import parse_python

MAX_FILE_BYTES = 1 << 20  # a problem file is a page of Python; anything larger is not one
# Imports every initial program starts with (the judge allows exactly these modules and Triton's).
PRELUDE = ("import torch", "import torch.nn as nn", "import torch.nn.functional as F")
_NAME_PREFIX = re.compile(r"^(\d+)_")
_SUPER_CALL = re.compile(r"super\(\s*Model\s*,\s*self\s*\)")


class KernelProblemError(ConfigError):
    """A problem file is not in the KernelBench format; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class KernelProblemFile:
    """A checked KernelBench problem file."""

    name: str  # the file's stem, e.g. "19_ReLU"
    source: str  # the file as the user wrote it
    init_args: tuple[str, ...]  # Model.__init__'s parameters after self
    forward_args: tuple[str, ...]  # Model.forward's parameters after self
    initial_program: str  # ModelNew = the reference's class, in an EVOLVE block

    @property
    def number(self) -> int | None:
        """KernelBench's problem number (the file name's leading digits), or None."""
        found = _NAME_PREFIX.match(self.name)
        return int(found.group(1)) if found else None


def read_problem(source: str, *, name: str) -> KernelProblemFile:
    """Check ``source`` (the file called ``name``) and build its initial program.

    Raises :class:`KernelProblemError` naming ``name`` and what is missing or refused."""
    if len(source.encode()) > MAX_FILE_BYTES:
        raise KernelProblemError(f"{name}: larger than {MAX_FILE_BYTES} bytes; not a problem file")
    try:
        tree = parse_python(source, filename=name)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f", line {line}" if line else ""
        raise KernelProblemError(f"{name}{where}: does not parse: {exc}") from exc
    from codevolve.core.kernel_rules import check_model_new, check_reference

    refused = check_reference(source)
    if refused:
        raise KernelProblemError(f"{name}: {refused}")
    model = _class(tree, name)
    init_args = _parameters(model, "__init__")
    forward_args = _parameters(model, "forward")
    if forward_args is None:
        raise KernelProblemError(f"{name}, line {model.lineno}: class Model defines no forward()")
    program = initial_program(source, tree, model, name=name)
    refused = check_model_new(program)
    if refused:
        raise KernelProblemError(
            f"{name}: its Model, copied as ModelNew, breaks a rule every solution must keep "
            f"({refused}); such a problem cannot be searched"
        )
    return KernelProblemFile(
        name=name,
        source=source,
        init_args=init_args or (),
        forward_args=forward_args,
        initial_program=program,
    )


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    for function in (INPUTS, INIT_INPUTS):
        if function not in defined:
            raise KernelProblemError(f"{name}: defines no {function}() at module level")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == REFERENCE_CLASS:
            return node
    raise KernelProblemError(f"{name}: defines no class {REFERENCE_CLASS} at module level")


def _parameters(model: ast.ClassDef, method: str) -> tuple[str, ...] | None:
    for node in model.body:
        if isinstance(node, ast.FunctionDef) and node.name == method:
            names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)][1:]
            if node.args.vararg is not None:
                names.append("*" + node.args.vararg.arg)
            return tuple(names)
    return None


def initial_program(source: str, tree: ast.Module, model: ast.ClassDef, *, name: str) -> str:
    """The reference's class renamed ``ModelNew``, with what it uses from the module."""
    helpers = _helpers(tree, model)
    used = {n.id for node in (model, *helpers) for n in ast.walk(node) if isinstance(n, ast.Name)}
    imports: list[str] = []
    constants: list[str] = []
    for node in tree.body:
        segment = ast.get_source_segment(source, node) or ""
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound = {(alias.asname or alias.name).split(".")[0] for alias in node.names}
            if bound & used and segment not in PRELUDE:
                imports.append(segment)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _is_constant(node.value):
            constants.append(segment)
    body = _SUPER_CALL.sub("super()", ast.get_source_segment(source, model) or "")
    body = re.sub(r"^class\s+Model\b", f"class {CANDIDATE_CLASS}", body, count=1)
    header = (
        f'"""KernelBench problem {name}: {CANDIDATE_CLASS} must compute what the reference '
        f'{REFERENCE_CLASS} computes, faster."""'
    )
    parts = [header, "\n".join((*PRELUDE, *imports))]
    if constants:
        parts.append("\n".join(constants))
    copied = [ast.get_source_segment(source, node) or "" for node in helpers]
    block = "\n\n\n".join((*copied, body))
    parts.append(f"# EVOLVE-BLOCK-START\n{block}\n# EVOLVE-BLOCK-END")
    return "\n\n".join(parts) + "\n"


def _helpers(tree: ast.Module, model: ast.ClassDef) -> list[ast.FunctionDef | ast.ClassDef]:
    """The module's functions and classes the class uses, directly or through one another, in
    the file's order."""
    defined = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
        and node.name not in (REFERENCE_CLASS, INPUTS, INIT_INPUTS)
    }
    wanted: set[str] = set()
    pending: list[ast.AST] = [model]
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, ast.Name) and node.id in defined and node.id not in wanted:
                wanted.add(node.id)
                pending.append(defined[node.id])
    return [node for node in defined.values() if node.name in wanted]


def _is_constant(value: ast.expr | None) -> bool:
    """A module-level value made of literals and names only (``batch_size = 16``,
    ``input_shape = (4096,)``, ``dim = features * 2``): what the class may read."""
    if value is None:
        return False
    allowed = (
        ast.Constant,
        ast.Tuple,
        ast.List,
        ast.Name,
        ast.Load,
        ast.BinOp,
        ast.UnaryOp,
        ast.operator,
        ast.unaryop,
        ast.Starred,
    )
    return all(isinstance(node, allowed) for node in ast.walk(value))
