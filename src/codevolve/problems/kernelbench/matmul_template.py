"""The template for matrix products: one tiled ``tl.dot`` kernel, batched, optionally triangular.

Tiles are visited in groups of ``GROUP_M`` rows for L2 reuse; program axis 1 is the batch (a
batch of matrices times one matrix is one tall product). Under ``triu``/``tril`` the tiles wholly
outside the triangle store zeros, and with ``SKIP_ZERO_K = 1`` the K loop skips the blocks that
are zero when the inputs are triangular, as those problems' ``get_inputs`` make them
(``SKIP_ZERO_K = 0`` computes the whole product and keeps the triangle).

fp32 inputs must not be rounded to tf32 (10 mantissa bits miss the judge's 1e-4 tolerance). With
``FP32_TF32X3 = 1`` they are multiplied as 3xTF32 on the tensor cores: each input split into a
tf32 high part and a tf32 remainder, and the three products that matter summed in fp32 (about
fp32's accuracy; the judge decides). ``FP32_TF32X3 = 0`` multiplies in ``ieee`` precision with
FMAs. Other dtypes use the tensor cores as they are.

A tile side never exceeds the next power of two of its matrix side (at least 16, ``tl.dot``'s
least), so a product with one narrow side (a matrix times a vector, a tall skinny matrix) does not
compute a 128-wide tile for one column. When the tiles are too few to fill the GPU (a large K over
a small output), the K loop is split across ``SPLIT_K`` programs per tile, each adding its partial
sum into an fp32 output with ``tl.atomic_add`` (the order of those additions varies from run to
run; the judge's tolerance decides). ``SPLIT_K = 0`` picks the split from the shape: enough
programs for about two per SM, each with at least eight K blocks.
"""

from __future__ import annotations

from codevolve.problems.kernelbench.forward import Forward
from codevolve.problems.kernelbench.matmul import Matmul
from codevolve.problems.kernelbench.template_text import (
    STAGES,
    WARPS,
    Template,
    between,
    fallback,
    indent,
    module_text,
    tunable,
)

_MATMUL_KERNEL = """
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn,
                  s_cb, s_cm, s_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, TRIANGLE: tl.constexpr,
                  SKIP_ZERO_K: tl.constexpr, PRECISION: tl.constexpr, SPLIT: tl.constexpr):
    # tiles in groups of GROUP_M rows for L2 reuse; program axis 1 is the batch, axis 2 the
    # part of the K loop (SPLIT parts, added into c atomically)
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    k_lo = 0
    k_hi = K
    if TRIANGLE == 1:  # triu: tiles wholly below the diagonal are zeros
        live = pid_m * BLOCK_M < (pid_n + 1) * BLOCK_N
        if SKIP_ZERO_K:  # upper-triangular inputs: A[i, k] = 0 for k < i, B[k, j] = 0 for k > j
            k_lo = pid_m * BLOCK_M
            k_hi = tl.minimum(K, (pid_n + 1) * BLOCK_N)
        k_hi = tl.where(live, k_hi, k_lo)
    if TRIANGLE == 2:  # tril: tiles wholly above the diagonal are zeros
        live = pid_n * BLOCK_N < (pid_m + 1) * BLOCK_M
        if SKIP_ZERO_K:  # lower-triangular inputs: A[i, k] = 0 for k > i, B[k, j] = 0 for k < j
            k_lo = pid_n * BLOCK_N
            k_hi = tl.minimum(K, (pid_m + 1) * BLOCK_M)
        k_hi = tl.where(live, k_hi, k_lo)
    a_base = a_ptr + batch * s_ab + rm[:, None] * s_am
    b_base = b_ptr + batch * s_bb + rn[None, :] * s_bn
    k_lo = (k_lo // BLOCK_K) * BLOCK_K
    if SPLIT > 1:  # this program's share of the K blocks
        share = tl.cdiv(tl.cdiv(k_hi - k_lo, BLOCK_K), SPLIT) * BLOCK_K
        k_lo = k_lo + tl.program_id(2) * share
        k_hi = tl.minimum(k_hi, k_lo + share)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_base + rk[None, :] * s_ak, mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.0)
        b = tl.load(b_base + rk[:, None] * s_bk, mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if TRIANGLE == 1:
        acc = tl.where(rn[None, :] >= rm[:, None], acc, 0.0)
    if TRIANGLE == 2:
        acc = tl.where(rn[None, :] <= rm[:, None], acc, 0.0)
    c = c_ptr + batch * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn
    if SPLIT > 1:
        tl.atomic_add(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
    else:
        tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
"""


def matmul_template(p: Matmul, forward: Forward) -> Template:
    """The tiled product for ``p``; other ranks, dtypes or shapes fall back to torch."""
    triangle = {"": 0, "upper": 1, "lower": 2}[p.triangle]
    body = [
        f"a = {p.a}",
        f"b = {p.b}",
        "if (not a.is_floating_point() or a.dtype != b.dtype or b.ndim not in (2, 3)",
        "        or a.ndim not in (2, 3) or (a.ndim == 2 and b.ndim == 3)",
        "        or a.shape[-1] != b.shape[-2]",
        "        or (a.ndim == 3 and b.ndim == 3 and a.shape[0] != b.shape[0])):",
        f"    {fallback(forward)}",
        "lead = a.shape[:-1]",
        "if b.ndim == 2 and a.ndim == 3:  # a batch of matrices times one matrix: one tall product",
        "    a = a.reshape(-1, a.shape[-1])",
        "a3 = a if a.ndim == 3 else a.unsqueeze(0)",
        "b3 = b if b.ndim == 3 else b.unsqueeze(0)",
        "batch, M, K = a3.shape",
        "N = b3.shape[2]",
        "# no tile wider than its matrix side (tl.dot takes 16 at least)",
        "bm = min(BLOCK_M, max(16, triton.next_power_of_2(M)))",
        "bn = min(BLOCK_N, max(16, triton.next_power_of_2(N)))",
        "bk = min(BLOCK_K, max(16, triton.next_power_of_2(K)))",
        "tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)",
        "split = SPLIT_K",
        "if split == 0:  # from the shape: about two programs per SM, at least 8 K blocks each",
        "    sms = 4  # Triton's interpreter on the CPU",
        "    if a.is_cuda:",
        "        sms = torch.cuda.get_device_properties(a.device).multi_processor_count",
        "    split = max(1, min(64, 2 * sms // (tiles * batch), K // (8 * bk)))",
        "split = max(1, min(split, triton.cdiv(K, bk)))",
        "if split > 1:  # parts of the K loop added atomically into an fp32 output",
        "    c3 = torch.zeros((batch, M, N), dtype=torch.float32, device=a.device)",
        "else:",
        "    c3 = torch.empty((batch, M, N), dtype=a.dtype, device=a.device)",
        "grid = (tiles, batch, split)",
        "matmul_kernel[grid](",
        "    a3, b3, c3, M, N, K, a3.stride(0), a3.stride(1), a3.stride(2),",
        "    b3.stride(0) if b.ndim == 3 else 0, b3.stride(1), b3.stride(2),",
        "    c3.stride(0), c3.stride(1), c3.stride(2),",
        "    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M,",
        f"    TRIANGLE={triangle}, SKIP_ZERO_K=bool(SKIP_ZERO_K), SPLIT=split,",
        "    # fp32 must not round its inputs to tf32: 3xTF32 or ieee (the module's docstring)",
        '    PRECISION=("tf32x3" if FP32_TF32X3 else "ieee")',
        '    if a.dtype == torch.float32 else "tf32",',
        "    num_warps=NUM_WARPS, num_stages=NUM_STAGES,",
        ")",
        "c3 = c3.to(a.dtype)",
        "if b.ndim == 3:",
        "    return c3",
        "return c3.reshape(*lead, N)",
    ]
    tunables = [
        tunable("BLOCK_M", 128, between(16, 256)),
        tunable("BLOCK_N", 128, between(16, 256)),
        tunable("BLOCK_K", 32, between(16, 128)),
        tunable("GROUP_M", 8, (1, 2, 4, 8, 16)),
        tunable("NUM_WARPS", 8, WARPS),
        tunable("NUM_STAGES", 3, STAGES),
        tunable("FP32_TF32X3", 1, (0, 1)),
        tunable("SPLIT_K", 0, (0, 1, 2, 4, 8, 16, 32, 64)),
    ]
    if triangle:
        # the problem's inputs are triangular (its get_inputs makes them so): the K loop may skip
        # the zero blocks; 0 computes the whole product and keeps only the triangle
        tunables.append(tunable("SKIP_ZERO_K", 1, (0, 1)))
    else:
        tunables.append("SKIP_ZERO_K = 0")
    what = f"{p.triangle}-triangular product" if p.triangle else "tiled product"
    module = module_text("matmul", what, tunables, _MATMUL_KERNEL)
    return Template("matmul", module, indent(body, 8))
