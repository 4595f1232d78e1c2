"""``codevolve export JOB --format triton``: a gemm-kernel-gpu job's best program as a module a
user drops into a project.

The module (template: triton_module.txt) is the program as it was measured, verbatim, then a
public ``matmul(a, w)`` that allocates y and the fp32 workspace as the trusted harness does
(problems/gemm_kernel_gpu/device/kernel_bench.py) and reads the SM count from the device, then
``test_matmul`` against ``torch.matmul`` with the harness's tolerance. The program's own
``matmul(x, w, y, workspace, num_sms)`` stays reachable as ``matmul_into``. The module needs torch
and Triton, never codevolve, so the harness's figures are written into it (a test checks that
they still agree with the harness's).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import PurePath
from string import Template

from codevolve.core.export import BestProgram, Exported, ExportRecords, ExportRefused
from codevolve.core.module_names import module_names
from codevolve.problems.gemm_kernel_gpu.kernel_source import ENTRY_POINT, entry_function
from codevolve.problems.gemm_kernel_gpu.stages import RAGGED_SHAPES

RTOL = 1.6e-2  # gemm_tiling.gpu_timing.RTOL: torch's bf16 rtol
ATOL_OF_RMS = 2e-2  # gpu_timing.ATOL_OF_RMS: absolute floor, a fraction of the reference's RMS
MIN_WORKSPACE = 1 << 24  # kernel_bench.MIN_WORKSPACE: fp32 elements at least
INTERPRETER_SMS = 4  # any count is correct; a few keeps persistent kernels looping
# Checked by the exported test on a GPU: the harness's ragged shapes, then a decode, a mid and a
# prefill shape of the Llama projections.
GPU_SHAPES = (*RAGGED_SHAPES, (16, 4096, 4096), (256, 1280, 8192), (2048, 6144, 4096))
# In Triton's interpreter (numpy on the CPU): small, M ragged, K off the 64-wide steps.
INTERPRETER_SHAPES = ((1, 64, 128), (37, 48, 96), (100, 80, 160))
APPENDIX_NAMES = frozenset({"torch", "matmul_into", "test_matmul"})  # what the module adds
REGIMES = ("decode", "mid", "prefill")
DEFAULT_FILE = "gemm_kernel.py"


@functools.cache
def _template() -> Template:
    return Template(resources.files(__package__).joinpath("triton_module.txt").read_text())


async def export_triton(records: ExportRecords, file: str) -> Exported:
    """The module text of the job's best program, to be saved as ``file``."""
    return Exported(triton_module(await records.best(), module=PurePath(file).stem))


def triton_module(best: BestProgram, *, module: str) -> str:
    """The module text (see the module docstring); ExportRefused for a program it cannot hold."""
    source = best.program.source
    tree = best.tree()
    if entry_function(tree) is None:
        raise ExportRefused(f"{best.where} defines no {ENTRY_POINT}(x, w, y, workspace, num_sms)")
    clash = sorted(module_names(tree) & APPENDIX_NAMES)
    if clash:
        raise ExportRefused(
            f"{best.where} binds {', '.join(clash)}, which the exported module defines"
        )
    return _template().substitute(
        job_id=best.job.id,
        program_id=best.program.id,
        score=f"{best.score:.4f}",
        regimes=_regimes(best),
        device=best.device,
        module=module,
        program=source.rstrip("\n") + "\n",
        min_workspace=f"2**{MIN_WORKSPACE.bit_length() - 1}",
        interpreter_sms=INTERPRETER_SMS,
        gpu_shapes=repr(GPU_SHAPES),
        interpreter_shapes=repr(INTERPRETER_SHAPES),
        rtol=RTOL,
        atol_of_rms=ATOL_OF_RMS,
    )


def _regimes(best: BestProgram) -> str:
    """The per-regime and held-out figures of the program's own evaluation, when recorded."""
    metrics, heldout = best.program.metrics, best.program.heldout
    parts = [f"{r} {metrics[f'vs_cublas_{r}']:.3f}" for r in REGIMES if f"vs_cublas_{r}" in metrics]
    if "test_vs_cublas" in heldout:
        parts.append(f"held-out test shapes {heldout['test_vs_cublas']:.3f}")
    if not parts:
        return ""
    return "\n             as first measured: " + ", ".join(parts)
