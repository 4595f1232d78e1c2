"""The trusted tiled bf16 matmul kernel, ``y = x @ W.T``, launched with a candidate's config.

One program (CTA) computes a ``BLOCK_M x BLOCK_N`` tile of y, looping over K in ``BLOCK_K``
steps; Triton pipelines the loop over ``num_stages`` shared-memory buffers. Tiles are launched
in ``GROUP_M``-swizzled order: ``GROUP_M`` consecutive M-tiles share each N-tile while it is hot
in L2. Accumulation is fp32; the output is rounded to bf16 once.

Imported only where torch and Triton exist (the device process).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


# M is not specialised: M = 1 would otherwise compile a second variant of every config, and M only
# feeds the masks.
@triton.jit(do_not_specialize=["M"])  # type: ignore[untyped-decorator]
def _matmul_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    stride_yn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Swizzle: walk GROUP_M M-tiles down a column of N-tiles before moving right.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % group_rows
    tile_n = (pid % per_group) // group_rows

    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Loads wrap out-of-range rows onto valid ones (their results are masked at the store), so
    # the K loop needs no row mask.
    rows_in = rows % M
    cols_in = cols % N
    ks = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows_in[:, None] * stride_xm + ks[None, :] * stride_xk
    w_ptrs = w_ptr + ks[:, None] * stride_wk + cols_in[None, :] * stride_wn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            x = tl.load(x_ptrs)
            w = tl.load(w_ptrs)
        else:
            left = K - step * BLOCK_K
            x = tl.load(x_ptrs, mask=ks[None, :] < left, other=0.0)
            w = tl.load(w_ptrs, mask=ks[:, None] < left, other=0.0)
        acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    y_ptrs = y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(tl.bfloat16), mask=(rows[:, None] < M) & (cols[None, :] < N))


Config = tuple[int, int, int, int, int, int]  # block_m, block_n, block_k, warps, stages, group_m


def matmul(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, config: Config) -> None:
    """``y[:] = x @ w.T`` with the given tile config. x [M, K], w [N, K], y [M, N], all bf16."""
    block_m, block_n, block_k, warps, stages, group_m = config
    m, k = x.shape
    n = w.shape[0]
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    _matmul_kernel[grid](
        x,
        w,
        y,
        m,
        n,
        k,
        x.stride(0),
        x.stride(1),
        w.stride(0),
        w.stride(1),
        y.stride(0),
        y.stride(1),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GROUP_M=group_m,
        EVEN_K=k % block_k == 0,
        num_warps=warps,
        num_stages=stages,
    )


def compile_only(config: Config, *, k: int = 4096) -> None:
    """Compile (or load from Triton's disk cache) the kernel of ``config`` and load it onto the
    device without launching it: resource errors (shared memory) surface here, not mid-timing."""
    block_m, block_n, block_k, warps, stages, group_m = config
    x = torch.empty((16, k), dtype=torch.bfloat16, device="cuda")
    w = torch.empty((128, k), dtype=torch.bfloat16, device="cuda")
    y = torch.empty((16, 128), dtype=torch.bfloat16, device="cuda")
    compiled = _matmul_kernel.warmup(
        x,
        w,
        y,
        16,
        128,
        k,
        x.stride(0),
        x.stride(1),
        w.stride(0),
        w.stride(1),
        y.stride(0),
        y.stride(1),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GROUP_M=group_m,
        EVEN_K=True,
        num_warps=warps,
        num_stages=stages,
        grid=(1,),
    )
    load = getattr(compiled, "_init_handles", None)  # Triton loads lazily, at the first launch
    if load is not None:
        load()
