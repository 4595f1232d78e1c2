"""Templates for the row patterns: passes along a dimension, and two passes over chunks.

:class:`~codevolve.problems.kernelbench.rows.Rowwise` (softmax, log-softmax, reductions,
normalisations) gets two kernels sharing their statistics code: ``rows_kernel``, one program per
row, when rows are contiguous (no dimension of size > 1 after ``dim``); ``cols_kernel``, a tile of
(reduced index, column) per program, when ``dim`` is strided. Softmax is online (a running max
and the sum of exp relative to it), so a row is read once for its statistics and once for the
output.

:class:`~codevolve.problems.kernelbench.rows.TwoPass` (LayerNorm over trailing dims, the
Frobenius norm) gets ``chunk_stats_kernel``, the mean and squared deviations of each chunk of a
row, combined in forward by Chan's formula (exact where ``sum(x^2) - n mean^2`` would cancel),
then ``apply_kernel``, one elementwise pass.
"""

from __future__ import annotations

from codevolve.problems.kernelbench.forward import Forward
from codevolve.problems.kernelbench.rows import Rowwise, TwoPass
from codevolve.problems.kernelbench.template_text import (
    WARPS,
    Template,
    between,
    fallback,
    helpers,
    indent,
    module_text,
    param_args,
    param_names,
    render,
    tunable,
)
from codevolve.problems.kernelbench.tree import Node

# --- rows: softmax, reductions, normalisations along a dimension -------------------------------


def rowwise_template(p: Rowwise, forward: Forward) -> Template:
    """The row kernels for ``p``, launched along its dimension; a 0-d, empty or non-float input
    falls back to torch."""
    kernels = helpers(*p.stats, p.scale) + _row_kernel(p, cols=False) + _row_kernel(p, cols=True)
    reduced = p.kind == "reduce"
    shape = (
        [
            "shape = list(a0.shape)",
            "shape[d] = 1" if p.keepdim else "del shape[d]",
            "out = torch.empty(shape, dtype=a0.dtype, device=a0.device)",
        ]
        if reduced
        else ["out = torch.empty_like(a0)"]
    )
    params = param_args(p.params)
    x = p.tensor
    body = [
        f"if (not {x}.is_floating_point() or {x}.ndim == 0 or {x}.numel() == 0",
        f"        or not isinstance({p.dim}, int)):  # one dimension only; a tuple is torch's",
        f"    {fallback(forward)}",
        f"a0 = {p.tensor}.contiguous()",
        f"d = ({p.dim}) % a0.ndim",
        "R = a0.shape[d]",
        "inner = math.prod(a0.shape[d + 1 :])",
        "outer = a0.numel() // (R * inner)",
        *shape,
        "if inner == 1:  # rows are contiguous: one program per row",
        "    block = min(ROW_BLOCK, max(16, triton.next_power_of_2(R)))",
        f"    rows_kernel[(outer,)](a0, out, {params}R, BLOCK=block, num_warps=ROW_WARPS)",
        "else:  # the dimension is strided: a tile of columns per program",
        "    block_r = min(COL_BLOCK_R, max(16, triton.next_power_of_2(R)))",
        "    block_i = min(COL_BLOCK_I, max(16, triton.next_power_of_2(inner)))",
        "    cols_kernel[(outer * triton.cdiv(inner, block_i),)](",
        f"        a0, out, {params}R, inner, BLOCK_R=block_r, BLOCK_I=block_i, num_warps=COL_WARPS",
        "    )",
        "return out",
    ]
    tunables = [
        tunable("ROW_BLOCK", 4096, between(256, 16384)),
        tunable("ROW_WARPS", 8, WARPS),
        tunable("COL_BLOCK_R", 16, between(16, 128)),
        tunable("COL_BLOCK_I", 128, between(16, 512)),
        tunable("COL_WARPS", 4, WARPS),
    ]
    what = p.reducer if reduced else p.kind
    module = module_text("rowwise", f"{what} along a dimension", tunables, kernels)
    return Template("rowwise", module, indent(body, 8))


def _row_kernel(p: Rowwise, *, cols: bool) -> str:
    """One kernel: ``rows_kernel`` walks a contiguous row in 1-D blocks, ``cols_kernel`` a
    [BLOCK_R, BLOCK_I] tile of (reduced index, column); the statistics code is shared."""
    shape = "BLOCK_R, BLOCK_I" if cols else "BLOCK"
    keep = ", keep_dims=True" if cols else ""
    params = param_names(p.params)
    if cols:
        head = [
            f"def cols_kernel(x_ptr, out_ptr, {params}R, inner, BLOCK_R: tl.constexpr, "
            "BLOCK_I: tl.constexpr):",
            "    pid = tl.program_id(0).to(tl.int64)",
            "    blocks = tl.cdiv(inner, BLOCK_I)",
            "    o = pid // blocks",
            "    cols = (pid % blocks) * BLOCK_I + tl.arange(0, BLOCK_I)",
            "    cmask = cols < inner",
            "    base = o * R * inner",
        ]
        loop = [
            "    for start in range(0, R, BLOCK_R):",
            "        r = (start + tl.arange(0, BLOCK_R)).to(tl.int64)",
            "        mask = (r < R)[:, None] & cmask[None, :]",
            "        offs = base + r[:, None] * inner + cols[None, :]",
            "        v = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)",
        ]
        store = (
            "    tl.store(out_ptr + o * inner + cols[None, :], {}.to(out_ptr.dtype.element_ty), "
            "mask=cmask[None, :])"
        )
    else:
        head = [
            f"def rows_kernel(x_ptr, out_ptr, {params}R, BLOCK: tl.constexpr):",
            "    base = tl.program_id(0).to(tl.int64) * R",
        ]
        loop = [
            "    for start in range(0, R, BLOCK):",
            "        r = start + tl.arange(0, BLOCK)",
            "        mask = r < R",
            "        offs = base + r",
            "        v = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)",
        ]
        store = "    tl.store(out_ptr + tl.program_id(0), {}.to(out_ptr.dtype.element_ty))"
    init, accumulate, finish, output = _row_steps(p, shape, keep)
    lines = ["", "", "@triton.jit", *head, *init, *loop, *accumulate, *finish]
    if output is None:
        lines.append(store.format("total"))
    else:
        lines += [*loop, f"        y = {output}", _store_rows()]
    return "\n".join(lines) + "\n"


def _store_rows() -> str:
    return "        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)"


def _row_steps(
    p: Rowwise, shape: str, keep: str
) -> tuple[list[str], list[str], list[str], str | None]:
    """Initial accumulators, the accumulation (inside the loop), the statistics after it, and
    the output per element (None for a reduction, whose output is ``total``)."""

    def value(node: Node) -> str:
        return render(node, lambda slot: "v")

    if p.kind in ("softmax", "log_softmax"):
        # online softmax: a running max per lane and the sum of exp relative to it; masked lanes
        # hold a finite sentinel so that exp(m - m_new) never sees inf - inf
        init = [
            f"    m = tl.full([{shape}], -3.0e38, tl.float32)",
            f"    s = tl.zeros([{shape}], dtype=tl.float32)",
        ]
        accumulate = [
            "        v = tl.where(mask, v, -3.0e38)",
            "        m_new = tl.maximum(m, v)",
            "        s = s * tl.exp(m - m_new) + tl.exp(v - m_new)",
            "        m = m_new",
        ]
        finish = [
            f"    big = tl.max(m, axis=0{keep})",
            f"    total = tl.sum(s * tl.exp(m - big), axis=0{keep})",
        ]
        if p.kind == "softmax":
            return init, accumulate, finish, "tl.exp(v - big) / total"
        return init, accumulate, [*finish, "    shift = big + tl.log(total)"], "v - shift"
    if p.kind == "reduce":
        mapped = value(p.stats[0])
        if p.reducer in ("max", "min"):
            fill = '-float("inf")' if p.reducer == "max" else 'float("inf")'
            pick = "tl.maximum" if p.reducer == "max" else "tl.minimum"
            init = [f"    acc = tl.full([{shape}], {fill}, tl.float32)"]
            accumulate = [f"        acc = {pick}(acc, tl.where(mask, {mapped}, {fill}))"]
            finish = [f"    total = tl.{p.reducer}(acc, axis=0{keep})"]
            return init, accumulate, finish, None
        init = [f"    acc = tl.zeros([{shape}], dtype=tl.float32)"]
        accumulate = [f"        acc += tl.where(mask, {mapped}, 0.0)"]
        finish = [f"    total = tl.sum(acc, axis=0{keep})"]
        if p.reducer == "mean":
            finish.append("    total = total / R")
        return init, accumulate, finish, None
    assert p.kind == "normalize" and p.scale is not None
    init = [f"    a{i} = tl.zeros([{shape}], dtype=tl.float32)" for i in range(len(p.stats))]
    accumulate = [
        f"        a{i} += tl.where(mask, {value(stat)}, 0.0)" for i, stat in enumerate(p.stats)
    ]
    finish = [f"    S{i} = tl.sum(a{i}, axis=0{keep})" for i in range(len(p.stats))]
    finish.append(f"    g = {render(p.scale, lambda slot: 'v')}")
    return init, accumulate, finish, "v / g" if p.divide else "v * g"


# --- two passes over chunks: LayerNorm over trailing dims, the Frobenius norm -----------------

_TWO_PASS_KERNELS = """
@triton.jit
def chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, L, chunks, BLOCK: tl.constexpr):
    # per chunk of a row: its mean and the sum of squared deviations from it (Chan's
    # combination in forward keeps the variance exact where sum(x^2) - n mean^2 would cancel)
    pid = tl.program_id(0).to(tl.int64)
    row = pid // chunks
    cols = (pid % chunks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < L
    v = tl.load(x_ptr + row * L + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=0) / tl.sum(mask.to(tl.float32), axis=0)
    d = tl.where(mask, v - mean, 0.0)
    tl.store(mean_ptr + pid, mean)
    tl.store(m2_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def apply_kernel(x_ptr, out_ptr, shift_ptr, scale_ptr, w_ptr, b_ptr, L, chunks,
                 BLOCK: tl.constexpr, AFFINE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    row = pid // chunks
    cols = (pid % chunks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < L
    v = tl.load(x_ptr + row * L + cols, mask=mask, other=0.0).to(tl.float32)
    y = (v - tl.load(shift_ptr + row)) * tl.load(scale_ptr + row)
    if AFFINE:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = y * w + b
    tl.store(out_ptr + row * L + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
"""


def two_pass_template(p: TwoPass, forward: Forward) -> Template:
    """Chunk statistics, then one elementwise pass; an input the LayerNorm does not fit falls
    back to torch."""
    x = p.tensor
    if p.kind == "layernorm":
        module = f"self.{p.module}"
        setup = [
            f"norm = {module}",
            "dims = len(norm.normalized_shape)",
            f"if (not {x}.is_floating_point() or {x}.numel() == 0 or {x}.ndim < dims",
            f"        or tuple({x}.shape[{x}.ndim - dims :]) != tuple(norm.normalized_shape)",
            "        or (norm.weight is None) != (norm.bias is None)):",
            f"    {fallback(forward)}",
            "L = math.prod(norm.normalized_shape)",
            "affine = norm.weight is not None",
        ]
        scale = [
            "shift = mean",
            "scale = torch.rsqrt(m2.sum(1) / L + norm.eps)",
            "w = norm.weight if affine else a0",
            "b = norm.bias if affine else a0",
        ]
    else:
        setup = [
            f"if not {x}.is_floating_point() or {x}.numel() == 0:",
            f"    {fallback(forward)}",
            f"L = {x}.numel()",
            "affine = False",
        ]
        scale = [
            "shift = torch.zeros_like(mean)",
            "scale = torch.rsqrt(m2.sum(1) + L * mean * mean)",
            "w = b = a0",
        ]
    body = [
        *setup,
        f"a0 = {x}.contiguous()",
        "rows = a0.numel() // L",
        "chunks = triton.cdiv(L, STATS_BLOCK)",
        "means = torch.empty(rows * chunks, dtype=torch.float32, device=a0.device)",
        "m2s = torch.empty_like(means)",
        "chunk_stats_kernel[(rows * chunks,)](",
        "    a0, means, m2s, L, chunks, BLOCK=STATS_BLOCK, num_warps=STATS_WARPS",
        ")",
        "means = means.view(rows, chunks)",
        "counts = L - torch.arange(chunks, device=a0.device) * STATS_BLOCK",
        "counts = counts.clamp(max=STATS_BLOCK).to(torch.float32)",
        "mean = (means * counts).sum(1) / L",
        "m2 = m2s.view(rows, chunks) + counts * (means - mean[:, None]) ** 2",
        *scale,
        "out = torch.empty_like(a0)",
        "chunks = triton.cdiv(L, APPLY_BLOCK)",
        "apply_kernel[(rows * chunks,)](",
        "    a0, out, shift, scale, w, b, L, chunks, BLOCK=APPLY_BLOCK, AFFINE=affine, "
        "num_warps=APPLY_WARPS",
        ")",
        "return out",
    ]
    tunables = [
        tunable("STATS_BLOCK", 4096, between(512, 16384)),
        tunable("STATS_WARPS", 8, WARPS),
        tunable("APPLY_BLOCK", 2048, between(256, 16384)),
        tunable("APPLY_WARPS", 8, WARPS),
    ]
    module = module_text(
        "two_pass", f"{p.kind}: chunk statistics, then one pass", tunables, _TWO_PASS_KERNELS
    )
    return Template("two_pass", module, indent(body, 8))
