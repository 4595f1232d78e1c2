"""bf16 GEMM y = x @ w.T on an NVIDIA H200, written in Triton: x [M, K], w [N, K], y [M, N].

The harness calls ``matmul(x, w, y, workspace, num_sms)`` with contiguous bf16 tensors and times
it against cuBLAS. Accumulate in fp32, write every element of y once, write nothing else but
``workspace`` (fp32 scratch, at least max(4 * M * N, 2**24) elements, contents undefined: clear
what you read). Only Triton and math may be imported; no torch, no streams, no threads. Everything
between the EVOLVE-BLOCK markers may change: kernels, configs, grids, dispatch by shape.
"""

import triton
import triton.language as tl


def GemmConfig(block_m, block_n, block_k, num_warps, num_stages, group_m):
    """A tile config of the tiled kernel, as a tuple."""
    return (block_m, block_n, block_k, num_warps, num_stages, group_m)


# EVOLVE-BLOCK-START
@triton.jit(do_not_specialize=["M"])
def matmul_kernel(
    x_ptr, w_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
):
    """One program per BLOCK_M x BLOCK_N tile of y; GROUP_M-swizzled tile order."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % group_rows
    tile_n = (pid % per_group) // group_rows
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
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


def launch_tiled(x, w, y, config):
    """The tiled kernel with config (block_m, block_n, block_k, warps, stages, group_m)."""
    block_m, block_n, block_k, warps, stages, group_m = config
    M, K = x.shape
    N = w.shape[0]
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    matmul_kernel[grid](
        x, w, y, M, N, K,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        EVEN_K=K % block_k == 0, num_warps=warps, num_stages=stages,
    )


def choose_config(M, N, K):
    """The tiled kernel's config per shape (gemm-tiling-gpu's best rule, measured on an H200)."""
    if M * N > 16384 and M * N <= 32768:
        return GemmConfig(16, 64, 128, 4, 5, 1)
    if M * N > 16384 and M * N <= 32768 and M > 2:
        return GemmConfig(16, 64, 128, 4, 4, 1)
    if M * N <= 16384 and M <= 2:
        return GemmConfig(16, 64, 128, 4, 5, 1)
    if M * N <= 8192:
        return GemmConfig(64, 64, 128, 4, 5, 1)
    if M * N > 4096 and M * N <= 65536:
        return GemmConfig(16, 64, 128, 4, 5, 1)
    if M * N > 8192 and M * N <= 32768:
        return GemmConfig(16, 64, 64, 4, 5, 1)
    if M * N > 65536 and M * N <= 131072 and (M <= 4):
        return GemmConfig(16, 64, 32, 4, 5, 1)
    if M * N > 32768 and M * N <= 262144:
        return GemmConfig(64, 64, 128, 4, 5, 1)
    if M * N > 131072 and M * N <= 524288 and M <= 512:
        return GemmConfig(64, 64, 128, 4, 5, 1)
    if M * N > 4194304 and M * N <= 8388608:
        return GemmConfig(128, 128, 64, 4, 4, 8)
    if M * N > 4194304 and M * N <= 8388608 and (M > 2048) and (M <= 4096):
        return GemmConfig(128, 128, 64, 4, 4, 4)
    if M * N > 2097152 and M * N <= 8388608:
        return GemmConfig(128, 128, 64, 4, 3, 4)
    if M * N > 32768 and M * N <= 131072:
        return GemmConfig(64, 128, 128, 4, 3, 4)
    if M * N > 1048576 and M * N <= 2097152:
        return GemmConfig(128, 128, 64, 4, 4, 8)
    if M * N > 524288 and M * N <= 1048576:
        return GemmConfig(64, 128, 128, 4, 4, 8)
    if M <= 256:
        return GemmConfig(64, 128, 128, 4, 4, 8)
    return GemmConfig(128, 128, 64, 4, 3, 8)


from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit(do_not_specialize=["M"])
def tma_persistent_kernel(
    x_desc, w_desc, y_desc, M, N, K, programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr,
):
    """Persistent programs over swizzled tiles, TMA loads and stores; FLATTEN lets the compiler
    pipeline across tile boundaries (the next tile's loads overlap this tile's epilogue)."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    steps = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, programs, flatten=FLATTEN):
        first_m = (tile // per_group) * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)
        off_m = (first_m + (tile % per_group) % group_rows) * BLOCK_M
        off_n = ((tile % per_group) // group_rows) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(0, steps):
            x = x_desc.load([off_m, step * BLOCK_K])
            w = w_desc.load([off_n, step * BLOCK_K])
            acc = tl.dot(x, w.T, acc)
        y_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def launch_tma_persistent(
    x, w, y, workspace, num_sms, block_m, block_n, block_k, warps, stages, group_m, flatten
):
    """One program per SM, TMA descriptors; flatten: 1 to pipeline across tiles."""
    M, K = x.shape
    N = w.shape[0]
    x_desc = TensorDescriptor.from_tensor(x, [block_m, block_k])
    w_desc = TensorDescriptor.from_tensor(w, [block_n, block_k])
    y_desc = TensorDescriptor.from_tensor(y, [block_m, block_n])
    programs = min(num_sms, triton.cdiv(M, block_m) * triton.cdiv(N, block_n))
    tma_persistent_kernel[(programs,)](
        x_desc, w_desc, y_desc, M, N, K, programs,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        FLATTEN=flatten == 1, num_warps=warps, num_stages=stages,
    )


@triton.jit(do_not_specialize=["M"])
def split_k_kernel(
    x_ptr, w_ptr, ws_ptr, M, N, K, k_per_split,
    stride_xm, stride_xk, stride_wn, stride_wk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):
    """Split-K, pass 1: program (tile, split) sums its K range into an fp32 partial tile."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rows = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = split * k_per_split + tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + (rows % M)[:, None] * stride_xm + ks[None, :] * stride_xk
    w_ptrs = w_ptr + ks[:, None] * stride_wk + (cols % N)[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, k_per_split // BLOCK_K):
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
    part = ws_ptr + split * M * N + rows[:, None] * N + cols[None, :]
    tl.store(part, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit(do_not_specialize=["M"])
def split_k_reduce_kernel(
    ws_ptr, y_ptr, M, N, stride_ym, stride_yn, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr
):
    """Split-K, pass 2: sum the SPLIT_K partials of each element, round to bf16 once."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + split * M * N + offs, mask=inside, other=0.0)
    y_ptrs = y_ptr + (offs // N) * stride_ym + (offs % N) * stride_yn
    tl.store(y_ptrs, acc.to(tl.bfloat16), mask=inside)


def launch_split_k(x, w, y, workspace, num_sms, block_m, block_n, block_k, warps, stages, split_k):
    """Two-pass split-K: more programs than tiles when M is small (K-long, few output tiles)."""
    M, K = x.shape
    N = w.shape[0]
    while split_k > 1 and split_k * M * N > workspace.numel():
        split_k = split_k // 2
    k_per_split = triton.cdiv(triton.cdiv(K, block_k), split_k) * block_k
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    split_k_kernel[(tiles, split_k)](
        x, w, workspace, M, N, K, k_per_split,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=split_k * k_per_split == K,
        num_warps=warps, num_stages=stages,
    )
    split_k_reduce_kernel[(triton.cdiv(M * N, 1024),)](
        workspace, y, M, N, y.stride(0), y.stride(1), SPLIT_K=split_k, BLOCK=1024, num_warps=4
    )


@triton.jit(do_not_specialize=["M"])
def persistent_kernel(
    x_ptr, w_ptr, y_ptr, M, N, K, programs,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
):
    """Persistent tiles: `programs` programs walk the GROUP_M-swizzled tiles in strides."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    ks = tl.arange(0, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, programs):
        first_m = (tile // per_group) * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)
        rows = (first_m + (tile % per_group) % group_rows) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = ((tile % per_group) // group_rows) * BLOCK_N + tl.arange(0, BLOCK_N)
        x_ptrs = x_ptr + (rows % M)[:, None] * stride_xm + ks[None, :] * stride_xk
        w_ptrs = w_ptr + ks[:, None] * stride_wk + (cols % N)[None, :] * stride_wn
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


def launch_persistent(x, w, y, workspace, num_sms, block_m, block_n, block_k, warps, stages, group_m):
    """One program per SM (or per tile, if fewer), each looping over tiles."""
    M, K = x.shape
    N = w.shape[0]
    programs = min(num_sms, triton.cdiv(M, block_m) * triton.cdiv(N, block_n))
    persistent_kernel[(programs,)](
        x, w, y, M, N, K, programs,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        EVEN_K=K % block_k == 0, num_warps=warps, num_stages=stages,
    )


def matmul(x, w, y, workspace, num_sms):
    """y = x @ w.T: pick a kernel and its launch for this shape."""
    M, K = x.shape
    N = w.shape[0]
    if M >= 1024 and N == 1280 and K == 8192:
        return launch_tma_persistent(x, w, y, workspace, num_sms, 128, 128, 64, 4, 4, 8, 1)
    if M > 16 and M <= 512 and N == 1280 and K == 8192:
        return launch_split_k(x, w, y, workspace, num_sms, 64, 64, 128, 4, 4, 4)
    if M <= 16 and N == 4096 and K == 4096:
        return launch_split_k(x, w, y, workspace, num_sms, 16, 128, 128, 4, 4, 8)
    if M <= 16 and N == 1280 and K == 8192:
        return launch_split_k(x, w, y, workspace, num_sms, 16, 64, 128, 4, 4, 8)
    if M <= 16 and N == 7168 and K == 8192:
        return launch_persistent(x, w, y, workspace, num_sms, 16, 64, 128, 4, 5, 1)
    if M <= 16 and N == 8192 and K == 1024:
        return launch_persistent(x, w, y, workspace, num_sms, 16, 64, 128, 4, 5, 1)
    if M <= 16:
        return launch_split_k(x, w, y, workspace, num_sms, 16, 128, 128, 4, 4, 4)
    if M >= 1024:
        return launch_tma_persistent(x, w, y, workspace, num_sms, 128, 256, 64, 8, 3, 8, 1)
    return launch_tiled(x, w, y, choose_config(M, N, K))


# EVOLVE-BLOCK-END
