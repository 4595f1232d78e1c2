"""``codevolve export JOB --format module`` for gemm-tiling and gemm-tiling-gpu jobs: the best
``choose_config`` as a standalone module, behind a launch guard, with its own test.

The module (template: tiling_module.txt) is the program as it was measured, verbatim, then the
guard: a public ``choose_config`` that checks every answer of the evolved rule at run time (the
config space, registers per thread, shared memory, warps per tile) and answers the expert rule's
config where it cannot launch or the rule raises, counted in ``FALLBACKS`` and logged. The legality
checks of the search are finite (a proof for literal-only programs, else a sweep of about 164,000
inputs), and a rule deployed on shapes no check asked must still launch. Then
``test_choose_config``, which asks the evolved rule, unguarded, every M of the legality sweep's
dense range on every projection and the sweep's edge sizes off the 128 grid.

The module needs only the standard library, so the space, the limits and the shapes are written
into it from the problem's own definitions (space.py, shapes.py, sweep.py); a test checks that its
expert rule is the problem's.
"""

from __future__ import annotations

import functools
import textwrap
from importlib import resources
from pathlib import PurePath
from string import Template

from codevolve.core.export import BestProgram, Exported, ExportRecords, ExportRefused
from codevolve.core.module_names import module_names
from codevolve.core.problem import legality_summary
from codevolve.problems.gemm_tiling import space
from codevolve.problems.gemm_tiling.shapes import PROJECTIONS
from codevolve.problems.gemm_tiling.static_check import CONFIG_TYPE, ENTRY_POINT
from codevolve.problems.gemm_tiling.sweep import DENSE_MAX_M, EDGE_PAIRS, ODD_DENSE_MAX_M

DEFAULT_FILE = "gemm_config.py"
TEST_FUNCTION = "test_choose_config"
EVOLVED = "evolved_choose_config"
# Names the module binds after the program: a program binding one would be shadowed or break it.
APPENDIX_NAMES = frozenset(
    {
        "logging",
        "Counter",
        EVOLVED,
        "CONFIG_SPACE",
        "MAX_REGISTERS_PER_THREAD",
        "REGISTER_OVERHEAD",
        "MAX_SHARED_MEMORY_PER_BLOCK",
        "MIN_ACCUMULATOR_PER_WARP",
        "FALLBACKS",
        "_log",
        "launch_problem",
        "expert_config",
        "_fall_back",
        "PROJECTIONS",
        "OFF_GRID",
        TEST_FUNCTION,
    }
)
MODEL_DEVICE = "codevolve's analytical H100 cost model"
FIELD_INDENT = 13  # the docstring's "legality:    " column


@functools.cache
def _template() -> Template:
    return Template(resources.files(__package__).joinpath("tiling_module.txt").read_text())


async def export_modelled(records: ExportRecords, file: str) -> Exported:
    """The module of a job whose figures come from the cost model (gemm-tiling), to be saved as
    ``file``."""
    return Exported(tiling_module(await records.best(), module=PurePath(file).stem))


async def export_measured(records: ExportRecords, file: str) -> Exported:
    """The module of a job whose figures were measured on a GPU (gemm-tiling-gpu)."""
    best = await records.best()
    return Exported(tiling_module(best, module=PurePath(file).stem, device=best.device))


def tiling_module(best: BestProgram, *, module: str, device: str = MODEL_DEVICE) -> str:
    """The module text (see the module docstring); ExportRefused for a program it cannot hold."""
    tree = best.tree()
    names = module_names(tree)
    missing = [name for name in (ENTRY_POINT, CONFIG_TYPE) if name not in names]
    if missing:
        raise ExportRefused(f"{best.where} defines no {' or '.join(missing)}")
    clash = sorted(names & APPENDIX_NAMES)
    if clash:
        raise ExportRefused(
            f"{best.where} binds {', '.join(clash)}, which the exported module defines"
        )
    legality = legality_summary(best.program)
    text = _template().substitute(
        problem=best.job.config.problem,
        job_id=best.job.id,
        program_id=best.program.id,
        score=f"{best.score:.4f}",
        device=device,
        legality=_wrapped("not recorded" if legality is None else legality["text"]),
        module=module,
        program=best.program.source.rstrip("\n") + "\n",
        config_space=repr(tuple(zip(space.FIELDS, space.VALUE_SETS, strict=True))),
        max_registers=space.MAX_REGISTERS_PER_THREAD,
        register_overhead=space.REGISTER_OVERHEAD,
        max_shared_memory=space.MAX_SHARED_MEMORY_PER_BLOCK,
        min_accumulator=space.MIN_ACCUMULATOR_PER_WARP,
        projections=repr(tuple((p.n, p.k) for p in PROJECTIONS)),
        edge_pairs=repr(EDGE_PAIRS),
        dense_m=DENSE_MAX_M,
        edge_m=ODD_DENSE_MAX_M,
    )
    try:  # e.g. a `from __future__` import of the program, which must open the module
        compile(text, f"{module}.py", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ExportRefused(
            f"{best.where} cannot be placed in a module after its docstring: {exc.msg} "
            f"(line {exc.lineno} of the module)"
        ) from exc
    return text


def _wrapped(text: str) -> str:
    """``text`` as the docstring's field: lines of at most 96 characters, continued under it."""
    lines = textwrap.wrap(text, width=96 - FIELD_INDENT)
    return ("\n" + " " * FIELD_INDENT).join(lines)
