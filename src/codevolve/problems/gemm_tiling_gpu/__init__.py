"""gemm-tiling-gpu: the gemm-tiling task judged on a real GPU (problem.py says how).

The plug-in: the problem, the device jobs its GPU stage asks for (the Triton GEMM timed with
each config, and its configs compiled ahead) and gemm-tiling's export as a guarded module, with
the device the figures were measured on.
"""

from __future__ import annotations

from codevolve.core.export import Exported, Exporter, ExportRecords
from codevolve.core.plugin import DeviceJob, ProblemPlugin
from codevolve.core.problem import Problem

NAME = "gemm-tiling-gpu"
JOBS = f"{__name__}.device.gemm_jobs"  # the trusted GEMM bench (device/gemm_bench.py)


def _problem() -> Problem:
    from codevolve.problems.gemm_tiling_gpu.problem import gemm_tiling_gpu_problem

    return gemm_tiling_gpu_problem()


async def _export(records: ExportRecords, file: str) -> Exported:
    from codevolve.problems.gemm_tiling.export import export_measured

    return await export_measured(records, file)


PLUGIN = ProblemPlugin(
    name=NAME,
    problem=_problem,
    device_jobs=(
        DeviceJob("gemm.measure", f"{JOBS}:measure_job"),
        DeviceJob("gemm.precompile", f"{JOBS}:precompile_job"),
    ),
    exporters=(Exporter("module", _export, default_file="gemm_config.py"),),
)
