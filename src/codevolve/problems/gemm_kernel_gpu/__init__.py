"""gemm-kernel-gpu: evolve the Triton GEMM kernel itself (problem.py says the task).

The plug-in: the problem, the device job its GPU stages ask for (a candidate's kernel module
loaded, checked and timed against cuBLAS) and its export as a module with ``matmul(a, w)`` and
its own test.
"""

from __future__ import annotations

from codevolve.core.export import Exported, Exporter, ExportRecords
from codevolve.core.plugin import DeviceJob, ProblemPlugin
from codevolve.core.problem import Problem

NAME = "gemm-kernel-gpu"


def _problem() -> Problem:
    from codevolve.problems.gemm_kernel_gpu.problem import gemm_kernel_gpu_problem

    return gemm_kernel_gpu_problem()


async def _export(records: ExportRecords, file: str) -> Exported:
    from codevolve.problems.gemm_kernel_gpu.export import export_triton

    return await export_triton(records, file)


PLUGIN = ProblemPlugin(
    name=NAME,
    problem=_problem,
    device_jobs=(DeviceJob("kernel.measure", f"{__name__}.device.kernel_jobs:measure_job"),),
    exporters=(Exporter("triton", _export, default_file="gemm_kernel.py"),),
)
