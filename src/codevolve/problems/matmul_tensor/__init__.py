"""matmul-tensor: evolve a search for low-rank decompositions of matmul tensors (problem.py).

The plug-in: the problem, and its export of the best verified decomposition of every size.
"""

from __future__ import annotations

from codevolve.core.export import Exported, Exporter, ExportRecords
from codevolve.core.plugin import ProblemPlugin
from codevolve.core.problem import Problem

NAME = "matmul-tensor"


def _problem() -> Problem:
    from codevolve.problems.matmul_tensor.problem import matmul_tensor_problem

    return matmul_tensor_problem()


async def _export(records: ExportRecords, file: str) -> Exported:
    from codevolve.problems.matmul_tensor.export import export_decompositions

    return await export_decompositions(records, file)


PLUGIN = ProblemPlugin(
    name=NAME,
    problem=_problem,
    exporters=(Exporter("decompositions", _export, json=True),),
)
