"""Triton kernels for recognised patterns, generated as source text for a ``ModelNew``.

:func:`templates_for` gives a pattern's :class:`~codevolve.problems.kernelbench.template_text.
Template` (a convolution's several, one per way to compute it): module-level text (its marker
line, tunable constants and ``@triton.jit`` kernels) and the body of a new ``forward`` that
launches them. The forward falls back to the parent's own
forward, kept as ``forward_torch``, for inputs the kernels do not take (other dtypes, mismatched
shapes, a scan over a non-last dimension, class-probability targets): that path is the
reference's own computation, so a template is never wrong by construction, only slower there.

This module holds the one-pass templates over flat memory: elementwise chains, losses (one
partial sum per block, then one small sum in torch) and scans (one program per row, the running
total carried between blocks). The row templates are in
:mod:`codevolve.problems.kernelbench.row_templates`, cross-entropy and the triplet margin loss
(one loss per row, then one small sum) in
:mod:`codevolve.problems.kernelbench.row_loss_templates`, the matrix product in
:mod:`codevolve.problems.kernelbench.matmul_template`, pooling in
:mod:`codevolve.problems.kernelbench.pool_template`, convolutions in
:mod:`codevolve.problems.kernelbench.conv_triton_template` (implicit GEMM, depthwise),
:mod:`codevolve.problems.kernelbench.conv_unfold_template` (a product over unfolded patches)
and :mod:`codevolve.problems.kernelbench.conv_cudnn_template` (cuDNN's settings), the text they
share in
:mod:`codevolve.problems.kernelbench.template_text`.

Kernels load any float dtype, compute in fp32 and store the output's dtype. Offsets are int64
wherever a tensor may pass 2**31 elements (KernelBench inputs reach several GB).

Limits, as built: a scan template scans the last dimension (another falls back to torch); the
triangular product skips the K blocks that are zero when the inputs are triangular, as those
problems' ``get_inputs`` make them (tunable ``SKIP_ZERO_K = 0`` computes the whole product).
Where a template can honestly beat eager on an H200: chains of several ops, the norms and the
losses, cross-entropy and triplet margin included (one or two passes over memory instead of one
per op), the exclusive cumsum (no cat copy) and the triangular products (a sixth of the flops).
A single op (ReLU, sigmoid, softmax, a sum) is one memory-bound pass in eager too: a tie at best.
A plain fp32 product in ``ieee`` precision (FMA, no tensor cores) should lose to cuBLAS; the
evolution decides, the template only starts it.
"""

from __future__ import annotations

from codevolve.problems.kernelbench.conv_cudnn_template import cudnn_template
from codevolve.problems.kernelbench.conv_triton_template import depthwise_template, gemm_template
from codevolve.problems.kernelbench.conv_unfold_template import unfold_template
from codevolve.problems.kernelbench.convs import Conv
from codevolve.problems.kernelbench.elementwise import Elementwise
from codevolve.problems.kernelbench.forward import Forward
from codevolve.problems.kernelbench.losses import CrossEntropy, Loss, TripletMargin
from codevolve.problems.kernelbench.matmul_template import matmul_template
from codevolve.problems.kernelbench.patterns import Pattern
from codevolve.problems.kernelbench.pool_template import pool_template
from codevolve.problems.kernelbench.pools import Pool
from codevolve.problems.kernelbench.row_loss_templates import (
    cross_entropy_template,
    triplet_margin_template,
)
from codevolve.problems.kernelbench.row_templates import rowwise_template, two_pass_template
from codevolve.problems.kernelbench.rows import Rowwise, TwoPass
from codevolve.problems.kernelbench.scans import Scan
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


def templates_for(pattern: Pattern, forward: Forward) -> tuple[Template, ...]:
    """The templates computing ``pattern`` for a forward with ``forward``'s signature: one for
    most patterns; for a convolution the ways it can be computed (:func:`conv_templates`)."""
    if isinstance(pattern, Conv):
        return conv_templates(pattern, forward)
    return (_template_for(pattern, forward),)


def conv_templates(p: Conv, forward: Forward) -> tuple[Template, ...]:
    """A 1-D or 2-D convolution: the Triton kernel its groups call for (both where the call
    leaves them to the init inputs), the product over unfolded patches where groups may be 1,
    and cuDNN's settings; 3-D and transposed ones: cuDNN's settings only."""
    if p.transposed or p.dims == 3:
        return (cudnn_template(p, forward),)
    gemm = p.groups in ("one", "any")
    depthwise = p.groups in ("depthwise", "any")
    return (
        *([gemm_template(p, forward)] if gemm else []),
        *([depthwise_template(p, forward)] if depthwise else []),
        cudnn_template(p, forward),
        *([unfold_template(p, forward)] if gemm else []),
    )


def _template_for(pattern: Pattern, forward: Forward) -> Template:
    if isinstance(pattern, Elementwise):
        return _elementwise(pattern, forward)
    if isinstance(pattern, Rowwise):
        return rowwise_template(pattern, forward)
    if isinstance(pattern, TwoPass):
        return two_pass_template(pattern, forward)
    if isinstance(pattern, Loss):
        return _loss(pattern, forward)
    if isinstance(pattern, CrossEntropy):
        return cross_entropy_template(pattern, forward)
    if isinstance(pattern, TripletMargin):
        return triplet_margin_template(pattern, forward)
    if isinstance(pattern, Scan):
        return _scan(pattern, forward)
    if isinstance(pattern, Pool):
        return pool_template(pattern, forward)
    assert not isinstance(pattern, Conv)  # templates_for's
    return matmul_template(pattern, forward)


# --- elementwise -------------------------------------------------------------------------------


def _elementwise(p: Elementwise, forward: Forward) -> Template:
    count = len(p.tensors)
    loads = [f"    x{i} = tl.load(in{i} + offs, mask=mask).to(tl.float32)" for i in range(count)]
    ins = "".join(f"in{i}, " for i in range(count))
    kernel = f"""{helpers(p.expr)}

@triton.jit
def elementwise_kernel({ins}out, {param_names(p.params)}n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
{chr(10).join(loads)}
    y = {render(p.expr, lambda i: f"x{i}")}
    tl.store(out + offs, y.to(out.dtype.element_ty), mask=mask)
"""
    first = p.tensors[0]
    same = " or ".join(
        f"{t}.shape != {first}.shape or {t}.dtype != {first}.dtype" for t in p.tensors[1:]
    )
    guard = f"not {first}.is_floating_point() or {first}.numel() == 0" + (
        f" or {same}" if same else ""
    )
    body = [
        f"if {guard}:",
        f"    {fallback(forward)}",
        *[f"a{i} = {t}.contiguous()" for i, t in enumerate(p.tensors)],
        "out = torch.empty_like(a0)",
        "n = a0.numel()",
        "elementwise_kernel[(triton.cdiv(n, BLOCK),)](",
        f"    {''.join(f'a{i}, ' for i in range(count))}out, {param_args(p.params)}n, "
        "BLOCK=BLOCK, num_warps=NUM_WARPS",
        ")",
        "return out",
    ]
    tunables = [tunable("BLOCK", 2048, between(256, 16384)), tunable("NUM_WARPS", 8, WARPS)]
    module = module_text("elementwise", "one fused pass over the elements", tunables, kernel)
    return Template("elementwise", module, indent(body, 8))


# --- losses: a scalar mean or sum -------------------------------------------------------------


def _loss(p: Loss, forward: Forward) -> Template:
    pair = len(p.tensors) == 2
    second = "    x1 = tl.load(in1 + cols, mask=mask, other=0.0).to(tl.float32)\n" if pair else ""
    kernel = f"""{helpers(p.expr)}

@triton.jit
def loss_kernel(in0, {"in1, " if pair else ""}partial, {param_names(p.params)}inner, blocks,
                BLOCK: tl.constexpr):
    # one partial sum per block; the second input is indexed by column: it is either the same
    # shape (one row) or broadcast over the first's leading dimensions
    pid = tl.program_id(0).to(tl.int64)
    row = pid // blocks
    cols = (pid % blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inner
    x0 = tl.load(in0 + row * inner + cols, mask=mask, other=0.0).to(tl.float32)
{second}    y = tl.where(mask, {render(p.expr, lambda i: f"x{i}")}, 0.0)
    tl.store(partial + pid, tl.sum(y, axis=0))
"""
    a, b = p.tensors[0], p.tensors[-1]
    if pair:
        checks = [
            f"if not ({a}.is_floating_point() and {b}.is_floating_point()) or {a}.numel() == 0:",
            f"    {fallback(forward)}",
            f"if {b}.shape == {a}.shape:",
            f"    inner = {a}.numel()",
            f"elif {b}.shape == {a}.shape[{a}.ndim - {b}.ndim :]:  # broadcast over leading dims",
            f"    inner = {b}.numel()",
            "else:",
            f"    {fallback(forward)}",
        ]
    else:
        checks = [
            f"if not {a}.is_floating_point() or {a}.numel() == 0:",
            f"    {fallback(forward)}",
            f"inner = {a}.numel()",
        ]
    divisor = {"numel": f" / {a}.numel()", "batch": f" / {a}.shape[0]", "one": ""}[p.divisor]
    dtype = f"torch.result_type({a}, {b})" if pair else f"{a}.dtype"
    body = [
        *checks,
        f"a0 = {a}.contiguous()",
        *([f"a1 = {b}.contiguous()"] if pair else []),
        "blocks = triton.cdiv(inner, BLOCK)",
        "grid = (a0.numel() // inner) * blocks",
        "partial = torch.empty(grid, dtype=torch.float32, device=a0.device)",
        f"loss_kernel[(grid,)](a0, {'a1, ' if pair else ''}partial, {param_args(p.params)}inner, "
        "blocks, BLOCK=BLOCK, num_warps=NUM_WARPS)",
        "# the partial sums are few (one per block): torch adds them in a deterministic order",
        f"return (partial.sum(){divisor}).to({dtype})",
    ]
    tunables = [tunable("BLOCK", 4096, between(512, 16384)), tunable("NUM_WARPS", 8, WARPS)]
    module = module_text("loss", "per-block partial sums, then one small sum", tunables, kernel)
    return Template("loss", module, indent(body, 8))


# --- scans ------------------------------------------------------------------------------------


def _scan(p: Scan, forward: Forward) -> Template:
    index = "R - 1 - k" if p.reverse else "k"
    mask_load = (
        "        v = v * tl.load(m_ptr + base + idx, mask=mask, other=0).to(tl.float32)\n"
        if p.mask
        else ""
    )
    if p.product:  # padding of 1.0: the block's last running product is the whole block's
        first, pad, scan, result = "1.0", "1.0", "tl.cumprod(v, axis=0)", "carry * c"
        step = "carry *= tl.sum(tl.where(tl.arange(0, BLOCK) == BLOCK - 1, c, 0.0), axis=0)"
    else:
        first, pad, scan = "0.0", "0.0", "tl.cumsum(v, axis=0)"
        result = "carry + c - v" if p.exclusive else "carry + c"
        step = "carry += tl.sum(v, axis=0)"
    kernel = f"""
@triton.jit
def scan_kernel(x_ptr, {"m_ptr, " if p.mask else ""}out_ptr, R, OUT_R, BLOCK: tl.constexpr):
    # one program per row; blocks of the row in order, the running total carried between them
    row = tl.program_id(0).to(tl.int64)
    base = row * R
    out_base = row * OUT_R  # rows of out may be longer than x's (a shifted copy)
    carry = tl.sum(tl.zeros([BLOCK], dtype=tl.float32), axis=0) + {first}
    for start in range(0, R, BLOCK):
        k = start + tl.arange(0, BLOCK)
        mask = k < R
        idx = {index}
        v = tl.load(x_ptr + base + idx, mask=mask, other={pad}).to(tl.float32)
{mask_load}        c = {scan}
        tl.store(out_ptr + out_base + idx, ({result}).to(out_ptr.dtype.element_ty), mask=mask)
        {step}
"""
    x = p.tensor
    guard = f"not {x}.is_floating_point() or {x}.ndim == 0 or {x}.numel() == 0"
    guard += f" or ({p.dim}) % {x}.ndim != {x}.ndim - 1"
    if p.mask:
        guard += f" or {p.mask}.shape != {x}.shape"
    if p.drop_last_row:
        # cumsum(cat((zeros, x), -1)[:-1], -1): rows of x but the last, each a zero then its
        # inclusive cumsum
        guard += f" or {x}.ndim < 2 or {x}.shape[0] < 2"
        rows, target, out_r = f"{x}[:-1]", "out[..., 1:]", "R + 1"
        make_out = [
            "out = torch.empty((*a0.shape[:-1], R + 1), dtype=a0.dtype, device=a0.device)",
            "out[..., 0] = 0",
        ]
    else:
        rows, target, out_r = x, "out", "R"
        make_out = ["out = torch.empty_like(a0)"]
    body = [
        f"if {guard}:  # the kernel scans the last, contiguous dimension",
        f"    {fallback(forward)}",
        f"a0 = {rows}.contiguous()",
        *([f"m0 = {p.mask}.contiguous()"] if p.mask else []),
        "R = a0.shape[-1]",
        *make_out,
        "block = min(BLOCK, max(16, triton.next_power_of_2(R)))",
        f"scan_kernel[(a0.numel() // R,)](a0, {'m0, ' if p.mask else ''}{target}, R, {out_r}, "
        "BLOCK=block, num_warps=NUM_WARPS)",
        "return out",
    ]
    tunables = [tunable("BLOCK", 2048, between(256, 16384)), tunable("NUM_WARPS", 8, WARPS)]
    what = ("reverse " if p.reverse else "") + ("exclusive " if p.exclusive else "")
    what += "row-dropping exclusive " if p.drop_last_row else ""
    what += "cumprod" if p.product else "cumsum"
    module = module_text("scan", what + (" of x * mask" if p.mask else ""), tunables, kernel)
    return Template("scan", module, indent(body, 8))
