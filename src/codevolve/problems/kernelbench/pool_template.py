"""The template for max and average pooling over the last 1-3 dimensions.

One program per block of one plane's outputs (the last dimension fastest, so neighbouring
outputs read neighbouring inputs; positions within a plane in 32 bits, whose division is cheap);
the window is unrolled at compile time (its sizes, strides, padding and dilation are constants of
the kernel, read from the module when forward runs). A 1-D or 2-D
pooling is the 3-D kernel with leading sides of 1.

Max pooling writes only the maxima: eager's CUDA max pooling also computes and writes an int64
index per output (8 bytes beside a 4-byte fp32 value) even when the indices are not returned,
which is where this template can beat it. Average pooling takes the window's sum over
``k_d * k_h * k_w`` (``count_include_pad=True`` without ``ceil_mode``: every window then lies
inside the padded input); other settings fall back to torch.
"""

from __future__ import annotations

from codevolve.problems.kernelbench.forward import Forward
from codevolve.problems.kernelbench.pools import Pool
from codevolve.problems.kernelbench.template_text import (
    WARPS,
    Template,
    between,
    fallback,
    indent,
    module_text,
    tunable,
)

_POOL_KERNEL = """
@triton.jit
def pool_kernel(x_ptr, out_ptr, D, H, W, OD, OH, OW,
                KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                IS_MAX: tl.constexpr, BLOCK: tl.constexpr):
    # program axis 0: the plane (batch x channel), 64-bit offsets; axis 1: a block of that
    # plane's outputs, whose positions fit 32 bits (cheap division)
    plane = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = offs < OD * OH * OW
    ow = offs % OW
    rest = offs // OW
    oh = rest % OH
    od = rest // OH
    x_plane = x_ptr + plane * D * H * W
    if IS_MAX:
        acc = tl.full([BLOCK], float("-inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
    for kd in tl.static_range(KD):
        i_d = od * SD - PD + kd * DD
        in_d = live & (i_d >= 0) & (i_d < D)
        for kh in tl.static_range(KH):
            i_h = oh * SH - PH + kh * DH
            in_h = in_d & (i_h >= 0) & (i_h < H)
            for kw in tl.static_range(KW):
                i_w = ow * SW - PW + kw * DW
                inside = in_h & (i_w >= 0) & (i_w < W)
                at = x_plane + (i_d * H + i_h) * W + i_w
                if IS_MAX:
                    v = tl.load(at, mask=inside, other=float("-inf")).to(tl.float32)
                    acc = tl.maximum(acc, v)
                else:
                    acc += tl.load(at, mask=inside, other=0.0).to(tl.float32)
    if not IS_MAX:
        acc = acc / (KD * KH * KW)
    out_plane = out_ptr + plane * OD * OH * OW
    tl.store(out_plane + offs, acc.to(out_ptr.dtype.element_ty), mask=live)
"""


def pool_template(p: Pool, forward: Forward) -> Template:
    """The pooling kernel for ``p``; settings it does not compute fall back to torch."""
    x = p.tensor
    n = p.dims
    if p.kind == "max":
        refused = "pool.return_indices or pool.ceil_mode"
        dilation = "pool.dilation"
    else:
        refused = "pool.ceil_mode or not pool.count_include_pad"
        if n > 1:  # AvgPool1d has no divisor_override
            refused += " or pool.divisor_override"
        dilation = "1"
    body = [
        f"pool = self.{p.module}",
        f"# each setting an int or a tuple of {n}, as the module keeps it",
        f"k, s, pad, dil = [(v,) * {n} if isinstance(v, int) else tuple(v) for v in (",
        f"    pool.kernel_size, pool.stride or pool.kernel_size, pool.padding, {dilation})]",
        f"if (not {x}.is_floating_point() or {x}.ndim not in ({n + 1}, {n + 2})",
        f"        or {x}.numel() == 0 or {refused}",
        f"        or not all(len(t) == {n} for t in (k, s, pad, dil))):",
        f"    {fallback(forward)}",
        f"a0 = {x}.contiguous()",
        f"spatial = tuple(a0.shape[-{n}:])",
        "out_sides = tuple((size + 2 * q - d * (kk - 1) - 1) // st + 1",
        "                  for size, kk, st, q, d in zip(spatial, k, s, pad, dil))",
        "blocks = triton.cdiv(math.prod(out_sides), BLOCK)",
        "# positions within a plane are 32-bit; the grid's second axis takes 65535 blocks",
        "if min(out_sides) <= 0 or math.prod(spatial) >= 2**31 or blocks > 65535:",
        f"    {fallback(forward)}",
        f"out = torch.empty((*a0.shape[:-{n}], *out_sides), dtype=a0.dtype, device=a0.device)",
        f"lead = (1,) * {3 - n}  # a 1-D or 2-D pooling as the 3-D kernel",
        "D, H, W = lead + spatial",
        "OD, OH, OW = lead + out_sides",
        "KD, KH, KW = lead + k",
        "SD, SH, SW = lead + s",
        "PD, PH, PW = (0,) * len(lead) + pad",
        "DD, DH, DW = lead + dil",
        "planes = a0.numel() // math.prod(spatial)",
        "pool_kernel[(planes, blocks)](",
        "    a0, out, D, H, W, OD, OH, OW, KD=KD, KH=KH, KW=KW, SD=SD, SH=SH, SW=SW,",
        f"    PD=PD, PH=PH, PW=PW, DD=DD, DH=DH, DW=DW, IS_MAX={p.kind == 'max'}, BLOCK=BLOCK,",
        "    num_warps=NUM_WARPS,",
        ")",
        "return out",
    ]
    tunables = [tunable("BLOCK", 1024, between(128, 4096)), tunable("NUM_WARPS", 4, WARPS)]
    what = f"{p.kind} pooling over {n} dimension{'s' if n > 1 else ''}"
    module = module_text("pool", what, tunables, _POOL_KERNEL)
    return Template("pool", module, indent(body, 8))
