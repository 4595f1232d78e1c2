"""Templates for the losses computed row by row: cross-entropy and the triplet margin loss.

Each kernel runs one program per row, reads the row once in ``BLOCK``-sized chunks with fp32
accumulators, and stores that row's loss (fp32); forward then sums the few per-row losses in
torch, a deterministic order, and divides for a mean. Rows are as many as the batch, so the
per-row vector is small next to the inputs (a 32768 x 4096 cross-entropy reads 512 MB of logits
and sums 128 KB of losses).

- :class:`~codevolve.problems.kernelbench.losses.CrossEntropy`: an online logsumexp (a running
  max per lane and the sum of exp relative to it, as the softmax template keeps them), then
  ``logsumexp - logit[target]``. A row whose target is ``ignore_index`` stores 0 and is not
  counted in the mean; a target out of range stores NaN where torch raises (the kernel never
  reads outside its row). Eager reads the logits and writes a log-softmax as large before
  picking one value per row: one pass instead of two and a write.
- :class:`~codevolve.problems.kernelbench.losses.TripletMargin`: both squared distances
  ``sum((a - p + eps)^2)`` and ``sum((a - n + eps)^2)`` accumulated in the same pass over the
  three rows, then ``max(margin + d_pos - d_neg, 0)``. Eager makes a difference tensor, adds eps
  and takes a norm, twice.

Inputs the kernels do not take fall back to the parent's forward: non-float logits or inputs,
targets that are not int64 class indices of the batch's shape (class probabilities), logits that
are not 2-D, triplet inputs of different shapes or dtypes or not 1-D/2-D, tensors on different
devices, an empty batch, a margin that is not positive (torch raises for it).
"""

from __future__ import annotations

from codevolve.problems.kernelbench.forward import Forward
from codevolve.problems.kernelbench.losses import CrossEntropy, TripletMargin
from codevolve.problems.kernelbench.template_text import (
    WARPS,
    Template,
    between,
    fallback,
    indent,
    module_text,
    tunable,
)

_CROSS_ENTROPY_KERNEL = """
@triton.jit
def cross_entropy_kernel(x_ptr, t_ptr, loss_ptr, C, ignore_index, BLOCK: tl.constexpr):
    # one program per row: an online logsumexp over the row in blocks; masked lanes hold a
    # finite sentinel so that exp(m - m_new) never sees inf - inf
    row = tl.program_id(0).to(tl.int64)
    base = row * C
    m = tl.full([BLOCK], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, C, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < C
        v = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        v = tl.where(mask, v, -3.0e38)
        m_new = tl.maximum(m, v)
        s = s * tl.exp(m - m_new) + tl.exp(v - m_new)
        m = m_new
    big = tl.max(m, axis=0)
    lse = big + tl.log(tl.sum(s * tl.exp(m - big), axis=0))
    t = tl.load(t_ptr + row)
    counted = t != ignore_index
    valid = (t >= 0) & (t < C)
    picked = tl.load(x_ptr + base + t, mask=counted & valid, other=0.0).to(tl.float32)
    loss = tl.where(valid, lse - picked, float("nan"))
    tl.store(loss_ptr + row, tl.where(counted, loss, 0.0))
"""

_TRIPLET_KERNEL = """
@triton.jit
def triplet_margin_kernel(a_ptr, p_ptr, n_ptr, loss_ptr, D, margin, eps, BLOCK: tl.constexpr):
    # one program per row: the three rows read once, both squared distances accumulated
    # together; torch's pairwise distance adds eps to the difference, lanes past D add nothing
    row = tl.program_id(0).to(tl.int64)
    base = row * D
    acc_p = tl.zeros([BLOCK], dtype=tl.float32)
    acc_n = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, D, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < D
        a = tl.load(a_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        p = tl.load(p_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        n = tl.load(n_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        dp = tl.where(mask, a - p + eps, 0.0)
        dn = tl.where(mask, a - n + eps, 0.0)
        acc_p += dp * dp
        acc_n += dn * dn
    d_pos = tl.sqrt(tl.sum(acc_p, axis=0))
    d_neg = tl.sqrt(tl.sum(acc_n, axis=0))
    tl.store(loss_ptr + row, tl.maximum(margin + d_pos - d_neg, 0.0))
"""


def cross_entropy_template(p: CrossEntropy, forward: Forward) -> Template:
    """One program per row of the logits, then the sum (and count) of the rows' losses."""
    x, t = p.logits, p.target
    reduce = (
        ["return (total / (t0 != IGNORE_INDEX).sum()).to(a0.dtype)  # rows not ignored"]
        if p.mean
        else ["return total.to(a0.dtype)"]
    )
    body = [
        f"if (not {x}.is_floating_point() or {x}.ndim != 2 or {x}.shape[0] == 0",
        f"        or {x}.shape[1] == 0 or {t}.dtype != torch.int64",
        f"        or tuple({t}.shape) != tuple({x}.shape[:1]) or {t}.device != {x}.device):",
        f"    {fallback(forward)}",
        f"a0 = {x}.contiguous()",
        f"t0 = {t}.contiguous()",
        "rows, C = a0.shape",
        "losses = torch.empty(rows, dtype=torch.float32, device=a0.device)",
        "block = min(BLOCK, max(16, triton.next_power_of_2(C)))",
        "cross_entropy_kernel[(rows,)](",
        "    a0, t0, losses, C, IGNORE_INDEX, BLOCK=block, num_warps=NUM_WARPS",
        ")",
        "total = losses.sum()  # one loss per row: a small sum, in a deterministic order",
        *reduce,
    ]
    tunables = [tunable("BLOCK", 4096, between(256, 16384)), tunable("NUM_WARPS", 8, WARPS)]
    what = "online logsumexp per row, minus the target's logit"
    ignore = f"IGNORE_INDEX = {p.ignore_index}  # cross_entropy's ignore_index: rows not counted\n"
    kernels = ignore + _CROSS_ENTROPY_KERNEL
    module = module_text("cross_entropy", what, tunables, kernels)
    return Template("cross_entropy", module, indent(body, 8))


def triplet_margin_template(p: TripletMargin, forward: Forward) -> Template:
    """One program per row of the three inputs, then the sum (or mean) of the rows' losses."""
    a, pos, neg = p.tensors
    body = [
        f"margin = float({p.margin})",
        f"if (not {a}.is_floating_point() or {a}.ndim not in (1, 2) or {a}.numel() == 0",
        "        or margin <= 0",
        f"        or any((t.shape, t.dtype, t.device) != ({a}.shape, {a}.dtype, {a}.device)",
        f"               for t in ({pos}, {neg}))):",
        f"    {fallback(forward)}",
        *[f"a{i} = {name}.contiguous()" for i, name in enumerate(p.tensors)],
        "D = a0.shape[-1]",
        "rows = a0.numel() // D",
        "losses = torch.empty(rows, dtype=torch.float32, device=a0.device)",
        "block = min(BLOCK, max(16, triton.next_power_of_2(D)))",
        "triplet_margin_kernel[(rows,)](",
        f"    a0, a1, a2, losses, D, margin, {p.eps!r}, BLOCK=block, num_warps=NUM_WARPS",
        ")",
        "total = losses.sum()  # one loss per row: a small sum, in a deterministic order",
        f"return {'(total / rows)' if p.mean else 'total'}.to(a0.dtype)",
    ]
    tunables = [tunable("BLOCK", 2048, between(256, 16384)), tunable("NUM_WARPS", 8, WARPS)]
    what = "both row distances in one pass, then the hinge"
    module = module_text("triplet_margin", what, tunables, _TRIPLET_KERNEL)
    return Template("triplet_margin", module, indent(body, 8))
