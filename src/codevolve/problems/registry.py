"""Built-in problems by name. Problems are built on request; importing this module does no work."""

from __future__ import annotations

from collections.abc import Callable

from codevolve.core.errors import UnknownProblemError
from codevolve.core.problem import Problem


def _gemm_tiling() -> Problem:
    from codevolve.problems.gemm_tiling.problem import GemmTilingProblem

    return GemmTilingProblem()


def _gemm_tiling_gpu() -> Problem:
    from codevolve.problems.gemm_tiling_gpu.problem import GemmTilingGpuProblem

    return GemmTilingGpuProblem()


def _gemm_kernel_gpu() -> Problem:
    from codevolve.problems.gemm_kernel_gpu.problem import GemmKernelGpuProblem

    return GemmKernelGpuProblem()


def _matmul_tensor() -> Problem:
    from codevolve.problems.matmul_tensor.problem import MatmulTensorProblem

    return MatmulTensorProblem()


_FACTORIES: dict[str, Callable[[], Problem]] = {
    "gemm-tiling": _gemm_tiling,
    "matmul-tensor": _matmul_tensor,
    "gemm-tiling-gpu": _gemm_tiling_gpu,
    "gemm-kernel-gpu": _gemm_kernel_gpu,
}


def problem_names() -> list[str]:
    """Registered problem names, sorted."""
    return sorted(_FACTORIES)


def get_problem(name: str) -> Problem:
    """A fresh instance of the named problem; raises UnknownProblemError listing the known names."""
    factory = _FACTORIES.get(name)
    if factory is None:
        known = ", ".join(problem_names())
        raise UnknownProblemError(f"unknown problem {name!r}; known problems: {known}")
    return factory()
