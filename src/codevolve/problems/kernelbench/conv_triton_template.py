"""Triton templates for 1-D and 2-D convolutions: an implicit-GEMM kernel and a depthwise one.

``conv_gemm`` (``groups == 1``) computes the convolution as a matrix product without writing
the unfolded patches: rows are output pixels (batch, row, column), columns output channels, and
the K axis is a patch's (input channel, kernel row, kernel column), in the weight's own order.
Each program owns a ``BLOCK_M x BLOCK_N`` tile of the output; its K loop gathers a
``BLOCK_M x BLOCK_K`` block of patches straight from the NCHW input (the stride, padding and
dilation turn a (pixel, k) pair into an input position; positions in the padding load zeros)
and a ``BLOCK_K x BLOCK_N`` block of the weight, and multiplies them with ``tl.dot`` into an
fp32 accumulator. The bias is added once, after the loop. Tiles are visited in groups of
``GROUP_M`` rows for L2 reuse, as the matrix-product template does.

fp32 inputs must not be rounded to TF32 (the judge holds fp32 to 1e-4, and computes its
reference without TF32: kb_precision.py). ``FP32_TF32X3 = 1`` multiplies them as 3xTF32 on the
tensor cores (about fp32's accuracy; the judge decides), ``0`` in ``ieee`` precision with FMAs.
cuDNN's own fp32 convolutions then run without the tensor cores: this is where an implicit GEMM
on them can beat eager.

``conv_depthwise`` (``groups`` equal to the input channels; several output channels per input
channel allowed) is a direct kernel: one program per block of one output plane's pixels, the
kernel window unrolled at compile time (sizes, strides, padding and dilation are constants of
the kernel), one fp32 multiply-add per tap; there is no product to give to the tensor cores.

A 1-D convolution is the 2-D one over a height of 1. Everything else falls back to the module
when forward runs: other groups, string padding, padding modes other than zeros, another dtype
than the weight's, an unbatched input, sizes whose offsets within one sample would pass 2**31.
"""

from __future__ import annotations

from codevolve.problems.kernelbench.convs import Conv
from codevolve.problems.kernelbench.forward import Forward
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

_GEMM_KERNEL = """
@triton.jit
def conv_gemm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, C, H, W, OC, OH, OW, M, K,
                     KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                     PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                     HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # the output as an M x OC product (M = batch x OH x OW pixels); tiles in groups of GROUP_M
    # rows for L2 reuse
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(OC, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output pixels
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output channels
    ow = rm % OW
    oh = (rm // OW) % OH
    n = (rm // OW // OH).to(tl.int64)  # the sample: 64-bit offsets across samples
    ih0 = oh * SH - PH
    iw0 = ow * SW - PW
    x_rows = x_ptr + n * C * H * W  # each pixel's sample; within a sample offsets are 32-bit
    w_cols = w_ptr + rn * K  # the weight as an OC x K matrix, K in (channel, kh, kw) order
    live_m = rm < M
    live_n = rn < OC
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        c = rk // (KH * KW)
        kh = (rk // KW) % KH
        kw = rk % KW
        ih = ih0[:, None] + kh[None, :] * DH
        iw = iw0[:, None] + kw[None, :] * DW
        inside = (live_m[:, None] & (rk[None, :] < K) & (ih >= 0) & (ih < H)
                  & (iw >= 0) & (iw < W))
        a = tl.load(x_rows[:, None] + (c[None, :] * H + ih) * W + iw, mask=inside, other=0.0)
        b = tl.load(w_cols[None, :] + rk[:, None], mask=(rk[:, None] < K) & live_n[None, :],
                    other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=live_n, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + n[:, None] * OC * OH * OW + rn[None, :] * (OH * OW) + (oh * OW + ow)[:, None]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=live_m[:, None] & live_n[None, :])
"""

_DEPTHWISE_KERNEL = """
@triton.jit
def conv_depthwise_kernel(x_ptr, w_ptr, b_ptr, out_ptr, C, H, W, OC, OH, OW, MULT,
                          KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr,
                          SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                          DH: tl.constexpr, DW: tl.constexpr, HAS_BIAS: tl.constexpr,
                          BLOCK: tl.constexpr):
    # program axis 0: an output plane (sample, output channel), 64-bit offsets; axis 1: a block
    # of its pixels. Output channel oc reads input channel oc // MULT.
    plane = tl.program_id(0).to(tl.int64)
    oc = plane % OC
    n = plane // OC
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = offs < OH * OW
    ow = offs % OW
    oh = offs // OW
    x_plane = x_ptr + (n * C + oc // MULT) * H * W
    w_taps = w_ptr + oc * (KH * KW)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * SH - PH + kh * DH
        in_h = live & (ih >= 0) & (ih < H)
        for kw in tl.static_range(KW):
            iw = ow * SW - PW + kw * DW
            inside = in_h & (iw >= 0) & (iw < W)
            tap = tl.load(w_taps + kh * KW + kw).to(tl.float32)
            acc += tl.load(x_plane + ih * W + iw, mask=inside, other=0.0).to(tl.float32) * tap
    if HAS_BIAS:
        acc += tl.load(b_ptr + oc).to(tl.float32)
    tl.store(out_ptr + plane * OH * OW + offs, acc.to(out_ptr.dtype.element_ty), mask=live)
"""


def _prologue(p: Conv, forward: Forward, refused: str) -> list[str]:
    """The checks and geometry both kernels share: the input and weight as 2-D (NCHW), the
    settings as pairs, the output's sides. ``refused``: the kernel's own fallback condition."""
    x, n = p.tensor, p.dims
    lead = "" if n == 2 else "(1,) + "  # a 1-D convolution over a height of 1
    pad_lead = "" if n == 2 else "(0,) + "
    return [
        f"conv = self.{p.module}",
        f"if ({x}.ndim != {n + 2} or not {x}.is_floating_point() or {x}.dtype != conv.weight.dtype",
        f"        or {x}.numel() == 0 or conv.padding_mode != 'zeros'",
        f"        or isinstance(conv.padding, str) or {refused}):",
        f"    {fallback(forward)}",
        f"x4 = {x}.contiguous()" if n == 2 else f"x4 = {x}.unsqueeze(2).contiguous()",
        "w4 = conv.weight.contiguous()" if n == 2 else "w4 = conv.weight.unsqueeze(2).contiguous()",
        f"k, s = {lead}tuple(conv.kernel_size), {lead}tuple(conv.stride)",
        f"pad, dil = {pad_lead}tuple(conv.padding), {lead}tuple(conv.dilation)",
        "batch, c_in, h, w = x4.shape",
        "c_out = w4.shape[0]",
        "oh = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // s[0] + 1",
        "ow = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // s[1] + 1",
    ]


def _launch_settings() -> list[str]:
    return [
        "    KH=k[0], KW=k[1], SH=s[0], SW=s[1], PH=pad[0], PW=pad[1], DH=dil[0], DW=dil[1],",
        "    HAS_BIAS=conv.bias is not None,",
    ]


def _result(p: Conv) -> str:
    return "return out" if p.dims == 2 else "return out.squeeze(2)"


def gemm_template(p: Conv, forward: Forward) -> Template:
    """The implicit-GEMM kernel for ``p`` (``groups == 1``); anything else falls back."""
    body = [
        *_prologue(p, forward, "conv.groups != 1"),
        "m, kk = batch * oh * ow, c_in * k[0] * k[1]",
        "# offsets within one sample, the pixel count and the weight are 32-bit in the kernel",
        "if (oh <= 0 or ow <= 0 or w4.shape[1] != c_in",
        "        or max(c_in * h * w, c_out * oh * ow, m, w4.numel()) >= 2**31):",
        f"    {fallback(forward)}",
        "out = torch.empty((batch, c_out, oh, ow), dtype=x4.dtype, device=x4.device)",
        "bias = conv.bias if conv.bias is not None else w4  # not read without a bias",
        "# no tile wider than its side (tl.dot takes 16 at least)",
        "bm = min(BLOCK_M, max(16, triton.next_power_of_2(m)))",
        "bn = min(BLOCK_N, max(16, triton.next_power_of_2(c_out)))",
        "bk = min(BLOCK_K, max(16, triton.next_power_of_2(kk)))",
        "grid = (triton.cdiv(m, bm) * triton.cdiv(c_out, bn),)",
        "conv_gemm_kernel[grid](",
        "    x4, w4, bias, out, c_in, h, w, c_out, oh, ow, m, kk,",
        *_launch_settings(),
        "    # fp32 must not round its inputs to tf32: 3xTF32 or ieee (the module's docstring)",
        '    PRECISION=("tf32x3" if FP32_TF32X3 else "ieee")',
        '    if x4.dtype == torch.float32 else "tf32",',
        "    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M,",
        "    num_warps=NUM_WARPS, num_stages=NUM_STAGES,",
        ")",
        _result(p),
    ]
    tunables = [
        tunable("BLOCK_M", 128, between(16, 256)),
        tunable("BLOCK_N", 64, between(16, 256)),
        tunable("BLOCK_K", 32, between(16, 128)),
        tunable("GROUP_M", 8, (1, 2, 4, 8, 16)),
        tunable("NUM_WARPS", 4, WARPS),
        tunable("NUM_STAGES", 3, STAGES),
        tunable("FP32_TF32X3", 1, (0, 1)),
    ]
    what = f"{p.dims}-D convolution as an implicit GEMM"
    module = module_text("conv_gemm", what, tunables, _GEMM_KERNEL)
    return Template("conv_gemm", module, indent(body, 8))


def depthwise_template(p: Conv, forward: Forward) -> Template:
    """The direct depthwise kernel for ``p`` (``groups`` = input channels); else falls back."""
    body = [
        *_prologue(p, forward, f"conv.groups != {p.tensor}.shape[1]"),
        "blocks = triton.cdiv(oh * ow, BLOCK)",
        "# one plane's offsets are 32-bit; the grid's second axis takes 65535 blocks",
        "if (oh <= 0 or ow <= 0 or w4.shape[1] != 1 or c_out % c_in != 0",
        "        or max(h * w, oh * ow) >= 2**31 or blocks > 65535):",
        f"    {fallback(forward)}",
        "out = torch.empty((batch, c_out, oh, ow), dtype=x4.dtype, device=x4.device)",
        "bias = conv.bias if conv.bias is not None else w4  # not read without a bias",
        "conv_depthwise_kernel[(batch * c_out, blocks)](",
        "    x4, w4, bias, out, c_in, h, w, c_out, oh, ow, c_out // c_in,",
        *_launch_settings(),
        "    BLOCK=BLOCK, num_warps=NUM_WARPS,",
        ")",
        _result(p),
    ]
    tunables = [tunable("BLOCK", 512, between(64, 4096)), tunable("NUM_WARPS", 4, WARPS)]
    what = f"depthwise {p.dims}-D convolution, one plane's block per program"
    module = module_text("conv_depthwise", what, tunables, _DEPTHWISE_KERNEL)
    return Template("conv_depthwise", module, indent(body, 8))
