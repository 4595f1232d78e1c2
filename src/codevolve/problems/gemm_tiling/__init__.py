"""gemm-tiling: evolve the tile configuration of a bf16 GEMM (problem.py says the task).

The plug-in: the problem, its per-shape report (``codevolve evaluate --shapes``) and its export
as a module whose ``choose_config`` sits behind a launch guard. Each part imports its module when
called, so that reading the plug-in costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from codevolve.core.export import Exported, Exporter, ExportRecords
from codevolve.core.plugin import CaseReport, ProblemPlugin
from codevolve.core.problem import Candidate, JSONValue, Problem

NAME = "gemm-tiling"


def _problem() -> Problem:
    from codevolve.problems.gemm_tiling.problem import gemm_tiling_problem

    return gemm_tiling_problem()


def _parse(data: JSONValue) -> Sequence[Any]:
    from codevolve.problems.gemm_tiling.report import parse_shapes

    return parse_shapes(data)


def _report(candidate: Candidate, shapes: Sequence[Any] | None) -> Mapping[str, Any]:
    from codevolve.problems.gemm_tiling.report import shape_report

    return shape_report(candidate, shapes)


def _lines(result: Mapping[str, Any]) -> Sequence[str]:
    from codevolve.problems.gemm_tiling.report import summary_lines

    return summary_lines(result)


async def _export(records: ExportRecords, file: str) -> Exported:
    from codevolve.problems.gemm_tiling.export import export_modelled

    return await export_modelled(records, file)


PLUGIN = ProblemPlugin(
    name=NAME,
    problem=_problem,
    case_report=CaseReport(
        parse=_parse,
        report=_report,
        lines=_lines,
        expects="a list of [M, N, K]",
        example="[[16, 4096, 4096]]",
    ),
    exporters=(Exporter("module", _export, default_file="gemm_config.py"),),
)
