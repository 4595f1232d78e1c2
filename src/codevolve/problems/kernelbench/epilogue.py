"""A linear layer and its elementwise tail as one Triton matrix product (the ``epilogue`` move).

Where a chain's kernel is elementwise and its main tensor is ``nn.Linear``'s result (or
``torch.matmul(x, W.T)``'s) that nothing else reads, :func:`with_epilogue` replaces the two by
one kernel: tiles of ``x @ W.T`` accumulated in fp32 (``GROUP_M`` rows of tiles at a time for L2
reuse), the bias added and the whole tail computed on the accumulator before the one store
(operands broadcast as the fused kernels' are: :mod:`codevolve.problems.kernelbench.
fused_template`). fp32 inputs are multiplied as 3xTF32 on the tensor cores (``L<k>_FP32_TF32X3
= 1``: about fp32's accuracy, the judge decides) or in ``ieee`` FMAs (0); cuBLAS's fp32 product
is the one to beat, and tuning moves the tiles, warps and stages.
"""

from __future__ import annotations

import dataclasses

from codevolve.problems.kernelbench.chain_steps import Chain, Launch, Let, Step
from codevolve.problems.kernelbench.chain_values import Kernel
from codevolve.problems.kernelbench.fused_template import (
    launch_args,
    layouts,
    loads,
    names,
    operand_prep,
)
from codevolve.problems.kernelbench.template_text import (
    STAGES,
    WARPS,
    between,
    indent,
    render,
    tunable,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Epilogue:
    """The chain with the product and its kernel as one step, and that kernel's text."""

    chain: Chain
    tunables: list[str]
    text: str
    kernel: Kernel  # the tail it computes on the product


def with_epilogue(chain: Chain) -> Epilogue | None:
    """The first product-and-elementwise-tail pair of ``chain`` as one Triton kernel; None
    where there is none."""
    steps = list(chain.steps)
    for index, step in enumerate(steps):
        if not isinstance(step, Launch) or step.kernel.reductions:
            continue
        kernel = step.kernel
        producer = next((i for i, s in enumerate(steps) if s.target == kernel.main), None)
        made = steps[producer] if producer is not None else None
        if not isinstance(made, Let) or not made.weight or kernel.rank not in (2, None):
            continue
        if _read_elsewhere(steps, chain.result, kernel.main, index):
            continue
        bias = f"self.{made.module}.bias" if made.module else "None"
        args = [made.arg, made.weight, bias, *(o.source for o in kernel.operands)]
        args += kernel.params
        text = f"{step.target} = linear_fused0({', '.join(args)})"
        steps[index] = Let(text, step.target, frozenset({made.arg}), checked=True)
        assert producer is not None
        del steps[producer]
        tunables, module = _kernel_text(kernel)
        return Epilogue(dataclasses.replace(chain, steps=tuple(steps)), tunables, module, kernel)
    return None


def _read_elsewhere(steps: list[Step], result: str, name: str, index: int) -> bool:
    if result == name:
        return True
    for i, step in enumerate(steps):
        if i == index:
            continue
        if isinstance(step, Let) and name in step.reads:
            return True
        if isinstance(step, Launch):
            kernel = step.kernel
            if name in (kernel.main, *(o.source for o in kernel.operands)):
                return True
    return False


def _kernel_text(kernel: Kernel) -> tuple[list[str], str]:
    _, operand_args, modes = names(kernel)
    params = ", ".join(
        [f"o{i}" for i in range(1, len(kernel.operands) + 1)]
        + [f"p{j}" for j in range(len(kernel.params))]
    )
    scalars = "".join(f"p{j}, " for j in range(len(kernel.params)))
    value_loads = loads(kernel, [kernel.out], "mask", "rm[:, None], 0, rn[None, :]")
    value_loads = [line for line in value_loads if not line.startswith("x0 =")]
    jit = f"""
@triton.jit
def linear_fused0_kernel(a_ptr, w_ptr, bias_ptr, out_ptr, {operand_args}{scalars}M, N, K,
                         s_am, s_ak, s_wn, s_wk, HAS_BIAS: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, PRECISION: tl.constexpr{modes}):
    # tiles in groups of GROUP_M rows for L2 reuse; the tail on the accumulator, then one store
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * s_wn + rk[:, None] * s_wk,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    flat = rm[:, None] * N + rn[None, :]
    x0 = acc
{indent(value_loads, 4)}
    y = {render(kernel.out, lambda slot: f"x{slot}")}
    tl.store(out_ptr + flat, y.to(out_ptr.dtype.element_ty), mask=mask)
"""
    args, mode_kw = launch_args(kernel, "b")
    body = [
        "if (not isinstance(a, torch.Tensor) or a.ndim != 2 or not a.is_floating_point()",
        "        or a.dtype != w.dtype or w.ndim != 2 or a.shape[1] != w.shape[1]",
        "        or (bias is not None and bias.dtype != w.dtype)):",
        "    return None",
        "M, K = a.shape",
        "N = w.shape[0]",
        "x = torch.empty((M, N), dtype=a.dtype, device=a.device)",
        "shape = (M, N)",
        *operand_prep(kernel),
        *layouts(kernel, "N, 0, 0, N", "N, 0, 0, N"),
        "bm = min(L0_BLOCK_M, max(16, triton.next_power_of_2(M)))",
        "bn = min(L0_BLOCK_N, max(16, triton.next_power_of_2(N)))",
        "bk = min(L0_BLOCK_K, max(16, triton.next_power_of_2(K)))",
        "# fp32 must not round its inputs to tf32: 3xTF32 or ieee (the module's docstring)",
        'precision = "tf32x3" if L0_FP32_TF32X3 else "ieee"',
        'precision = precision if a.dtype == torch.float32 else "tf32"',
        "linear_fused0_kernel[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](",
        f"    a, w, bias if bias is not None else w, x, {args}M, N, K,",
        "    a.stride(0), a.stride(1), w.stride(0), w.stride(1), HAS_BIAS=bias is not None,",
        "    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=L0_GROUP_M, PRECISION=precision,",
        f"    num_warps=L0_WARPS, num_stages=L0_STAGES{mode_kw},",
        ")",
        "return x",
    ]
    launcher = (
        f"def linear_fused0(a, w, bias{', ' + params if params else ''}):\n"
        '    """a @ w.T + bias and the tail in one kernel; None for inputs it does not take."""\n'
        + indent(body, 4)
        + "\n"
    )
    tunables = [
        tunable("L0_BLOCK_M", 128, between(16, 256)),
        tunable("L0_BLOCK_N", 128, between(16, 256)),
        tunable("L0_BLOCK_K", 32, between(16, 128)),
        tunable("L0_GROUP_M", 8, (1, 2, 4, 8, 16)),
        tunable("L0_WARPS", 8, WARPS),
        tunable("L0_STAGES", 3, STAGES),
        tunable("L0_FP32_TF32X3", 1, (0, 1)),
    ]
    return tunables, jit + "\n\n" + launcher
