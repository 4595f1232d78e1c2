"""KernelBench results: one row per problem's job, and ``fast_p`` over a set of them.

A problem's solution is its job's best program, with the speedup confirmed on independent
samples (the job's ``best_score``). ``fast_p`` is KernelBench's metric: the share of problems whose
solution is correct and more than ``p`` times faster than the baseline; it is reported against
PyTorch eager (as KernelBench does) and against ``torch.compile`` where that was timed.

The initial program is the reference's own code, correct by construction and as fast as eager up
to noise. So that noise is never counted as a speedup, a solution whose source is still the
initial program counts for ``fast_0`` (it is correct) and for no ``p >= 1``; the report says how
many problems kept it.

A reference that ``torch.compile`` cannot compile has no compile baseline (its row's
``compile_note`` says why). Against compile it stays in the denominator and counts as not faster:
for ``fast_0`` when correct, for no ``p >= 1`` (nothing was there to beat), so a set's
fast_p against compile never rises by leaving out the problems compile fails on. The summary
counts them (``compile_failed``) and adds the seconds spent compiling the baselines.

The plug-in's results page (``/kernelbench`` in the dashboard, ``/api/v1/kernelbench``) and
``codevolve kernelbench`` show these rows; the services read each job's records for them
(core/results.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from codevolve.core.results import JobResults, Row
from codevolve.problems.kernelbench.defaults import FAST_P as PAGE_FAST_P
from codevolve.problems.kernelbench.spec import SPEC_FILE, spec_of_files
from codevolve.problems.kernelbench.stages import COMPILE_NOTE

FAST_P = tuple(float(p) for p in PAGE_FAST_P)  # 0, 1, 1.5, 2


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One problem's result."""

    problem: str  # the file's stem, e.g. "19_ReLU"
    job_id: str
    state: str
    proposals: int
    correct: bool  # a best program exists (every evaluated program passed the judge)
    is_reference: bool  # the best is still the initial program (the reference's own code)
    speedup_eager: float | None  # confirmed t_eager / t_best
    speedup_compile: float | None  # t_compile / t_best, when compile was timed
    best_ms: float | None
    eager_ms: float | None
    compile_ms: float | None
    uses_triton: bool
    best_program_id: str | None
    best_source: str | None = None  # the best program's source (the report carries it)
    compile_seconds: float | None = None  # wall seconds its device process spent compiling it
    compile_cached: bool = False  # that compile came from Inductor's cache
    compile_failed: bool = False  # torch.compile of the reference failed: no compile baseline
    compile_note: str = ""  # "compile baseline failed: <one line>"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> KernelRow:
        """The row a page or a report holds (:meth:`as_dict`)."""
        return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})


async def kernel_row(records: JobResults) -> KernelRow | None:
    """The row of a KernelBench job; None for a job of another kind of problem."""
    files = await records.bundle_files()
    if files is None or SPEC_FILE not in files:
        return None
    spec = spec_of_files(files)
    job = records.job
    best = await records.best_program()
    proposals = await records.proposals()
    metrics = dict(best.metrics) if best is not None else {}
    compile_ms = metrics.get("compile_ms")
    compile_note = "" if best is None else best.artifacts.get(COMPILE_NOTE, "")
    speedup = job.best_score if best is not None else None
    speedup_compile = None
    if speedup is not None and compile_ms and metrics.get("eager_ms"):
        # the confirmed speedup over eager, carried over to compile by the same run's times
        speedup_compile = speedup * float(compile_ms) / float(metrics["eager_ms"])
    return KernelRow(
        problem=spec.name,
        job_id=job.id,
        state=job.state.value,
        proposals=proposals,
        correct=best is not None,
        is_reference=best is not None and best.source == spec.initial_program,
        speedup_eager=speedup,
        speedup_compile=speedup_compile,
        best_ms=metrics.get("candidate_ms"),
        eager_ms=metrics.get("eager_ms"),
        compile_ms=compile_ms,
        uses_triton=best is not None and "triton.jit" in best.source,
        best_program_id=job.best_program_id,
        best_source=None if best is None else best.source,
        compile_seconds=metrics.get("compile_seconds"),
        compile_cached=metrics.get("compile_cache_hit") == 1.0,
        compile_failed=bool(compile_note),
        compile_note=compile_note,
    )


def fast_p(
    rows: list[KernelRow], p: float, *, against: str = "eager", unsolved: int = 0
) -> float | None:
    """KernelBench's fast_p over ``rows`` and ``unsolved`` more problems (files that could not be
    searched: they count as failures) against ``eager`` or ``compile`` (None: no problems, or
    compile was never asked for). A problem without a compile baseline (compile not timed, or
    failed on its reference) counts against compile as not faster."""
    if not rows and not unsolved:
        return None
    if against == "compile" and not any(
        r.speedup_compile is not None or r.compile_failed for r in rows
    ):
        return None
    hits = 0
    for row in rows:
        speedup = row.speedup_eager if against == "eager" else row.speedup_compile
        if not row.correct:
            continue
        if p == 0 or (not row.is_reference and speedup is not None and speedup > p):
            hits += 1
    return hits / (len(rows) + unsolved)


def summary(rows: list[KernelRow], *, unsolved: int = 0) -> dict[str, Any]:
    """The set's figures: fast_p for each p against eager and compile, and the counts;
    ``unsolved`` problems (not searchable) count in every denominator. ``compile_seconds``: the
    seconds spent compiling the rows' compile baselines (None: none was compiled)."""
    seconds = [r.compile_seconds for r in rows if r.compile_seconds is not None]
    return {
        "problems": len(rows) + unsolved,
        "correct": sum(r.correct for r in rows),
        "kept_reference": sum(r.is_reference for r in rows),
        "compile_failed": sum(r.compile_failed for r in rows),
        "compile_cached": sum(r.compile_cached for r in rows),
        "compile_seconds": round(sum(seconds), 1) if seconds else None,
        "fast_p_eager": {str(p): fast_p(rows, p, unsolved=unsolved) for p in FAST_P},
        "fast_p_compile": {
            str(p): fast_p(rows, p, against="compile", unsolved=unsolved) for p in FAST_P
        },
    }


async def page_row(records: JobResults) -> Row | None:
    """The results page's row of a job (:class:`KernelRow` as a mapping)."""
    row = await kernel_row(records)
    return None if row is None else row.as_dict()


def page_summary(rows: Sequence[Row], unsolved: int) -> dict[str, Any]:
    """The results page's figures (:func:`summary`) over its rows."""
    return summary([KernelRow.of(row) for row in rows], unsolved=unsolved)
