"""Triton text for the fused kernels of a Level-2 chain (:class:`~codevolve.problems.kernelbench.
chain_values.Kernel`), and the Python launcher forward calls for each.

An elementwise kernel (no reduction) walks the main tensor flat: one load of each element, the
whole tail in fp32 registers, one store (into main itself when it is a temporary nothing else
reads). A kernel with reductions views main as ``[outer, R, inner]``, ``R`` the reduced run of
axes: ``fused<k>_rows`` (one program per row) when the run is innermost, ``fused<k>_cols`` (a
``[BLOCK_R, BLOCK_I]`` tile of (reduced index, inner position) per program) when it is not (a
channel reduction of a convolution's output). Statistics are computed in passes over the row,
one per level of nesting (a softmax's log-sum-exp is one online pass); a result of main's shape
takes one more pass, a reduced one is written from the statistics.

Operands broadcast onto the value's shape as torch broadcasts them: the launcher's
``broadcast_index`` gives, for each, the ``(div, mod)`` with which the flat index of the value
finds the operand's element (``MODE`` 0: element for element, 1: one value, 2:
``(flat // div) % mod``), and ``None`` for an operand that does not broadcast so (a wider one,
a gap in its dimensions, another dtype or device): the launcher returns None and forward falls
back to the parent's.
"""

from __future__ import annotations

from collections.abc import Callable

from codevolve.problems.kernelbench.chain_values import Kernel, leaves
from codevolve.problems.kernelbench.template_text import (
    WARPS,
    between,
    indent,
    render,
    tunable,
)
from codevolve.problems.kernelbench.tree import Input, Node, Stat

SHARED = '''
def broadcast_index(t, shape, like):
    """(t, div, mod, mode): t's element for flat index i of shape is t.flatten()[(i // div)
    % mod], as torch broadcasts t onto shape; None where it does not broadcast so."""
    if not isinstance(t, torch.Tensor) or t.dtype != like.dtype or t.device != like.device:
        return None
    if t.ndim > len(shape):
        return None
    dims = (1,) * (len(shape) - t.ndim) + tuple(t.shape)
    if any(d != 1 and d != s for d, s in zip(dims, shape)):
        return None
    varying = [i for i, d in enumerate(dims) if d != 1]
    if not varying:
        return t.contiguous(), 1, 1, 1
    lo, hi = varying[0], varying[-1] + 1
    if any(dims[i] != shape[i] for i in range(lo, hi)):
        return None  # broadcast inside the run: not one (div, mod)
    div, mod = math.prod(shape[hi:]), math.prod(shape[lo:hi])
    return t.contiguous(), div, mod, 0 if div == 1 and mod == math.prod(shape) else 2


def layout_mode(found, row_div, mid_div, mid_mod, col_mod):
    """found's mode narrowed to the kernel's layout (flat = (row * M + mid) * C + col):
    3 reads row % mod, 4 the middle index, 5 the column: no division per element."""
    t, div, mod, mode = found
    if mode == 2 and div == row_div:
        mode = 3
    elif mode == 2 and div == mid_div and mod == mid_mod:
        mode = 4
    elif mode == 2 and div == 1 and mod == col_mod:
        mode = 5
    return t, div, mod, mode


@triton.jit
def operand_offset(flat, row, mid, col, div, mod, MODE: tl.constexpr):
    # where a broadcast operand holds its value for each flat index of the output
    offs = flat
    if MODE == 1:
        offs = flat * 0
    if MODE == 2:
        offs = (flat // div) % mod
    if MODE == 3:
        offs = flat * 0 + row % mod
    if MODE == 4:
        offs = flat * 0 + mid
    if MODE == 5:
        offs = flat * 0 + col
    return offs
'''


def kernel_text(k: int, kernel: Kernel) -> tuple[list[str], str]:
    """The tunable lines and the module text (kernels and launcher) of kernel ``k``."""
    if not kernel.reductions:
        return _elementwise(k, kernel)
    return _reducing(k, kernel)


def call(k: int, kernel: Kernel) -> str:
    """The launcher's call in forward."""
    args = [kernel.main, *(o.source for o in kernel.operands), *kernel.params]
    return f"fused{k}({', '.join(args)})"


# --- shared pieces ---------------------------------------------------------------------------


def names(kernel: Kernel) -> tuple[str, str, str]:
    """The launcher's parameters, the kernel's operand parameters and their MODE constexprs."""
    count = len(kernel.operands)
    names = ["x", *(f"o{i}" for i in range(1, count + 1))]
    params = ", ".join(names + [f"p{j}" for j in range(len(kernel.params))])
    operand_args = "".join(f"o{i}_ptr, d{i}, m{i}, " for i in range(1, count + 1))
    modes = "".join(f", MODE{i}: tl.constexpr" for i in range(1, count + 1))
    return params, operand_args, modes


def _reduced(kernel: Kernel, slot: int) -> bool:
    return slot > 0 and kernel.operands[slot - 1].present is not None


def _value(kernel: Kernel) -> Callable[[int], str]:
    """The name of each slot's fp32 value in a kernel: ``x<slot>`` at main's shape,
    ``r<slot>`` at the reduced one."""

    def name(slot: int) -> str:
        return f"r{slot}" if _reduced(kernel, slot) else f"x{slot}"

    return name


def loads(kernel: Kernel, nodes: list[Node], mask: str, index: str) -> list[str]:
    """Loads of main and the full-level operands ``nodes`` read, at ``flat`` (``index``: the
    kernel's row, middle and column indices, for :func:`operand_offset`)."""
    slots = sorted({n.slot for node in nodes for n in leaves(node) if isinstance(n, Input)})
    lines = []
    for slot in slots:
        if slot == 0:
            lines.append(f"x0 = tl.load(x_ptr + flat, mask={mask}, other=0.0).to(tl.float32)")
        elif not _reduced(kernel, slot):
            lines.append(
                f"x{slot} = tl.load(o{slot}_ptr + operand_offset(flat, {index}, d{slot}, "
                f"m{slot}, MODE{slot}), mask={mask}, other=0.0).to(tl.float32)"
            )
    return lines


def _reduced_loads(kernel: Kernel, mask: str | None, index: str) -> list[str]:
    """Loads of the reduced-level operands, at the output's index ``rflat``."""
    lines = []
    for slot, operand in enumerate(kernel.operands, start=1):
        if operand.present is not None:
            where = f"o{slot}_ptr + operand_offset(rflat, {index}, d{slot}, m{slot}, MODE{slot})"
            masked = f", mask={mask}, other=0.0" if mask else ""
            lines.append(f"r{slot} = tl.load({where}{masked}).to(tl.float32)")
    return lines


def operand_prep(kernel: Kernel) -> list[str]:
    """The launcher's checks of its operands (``shape``: main's, ``kept``: the reduced)."""
    lines = []
    for slot, operand in enumerate(kernel.operands, start=1):
        present = operand.present
        shape = "shape" if present is None else f"tuple(kept[d] for d in {present})"
        lines.append(f"a{slot} = broadcast_index(o{slot}, {shape}, x)")
    if kernel.operands:
        missing = " or ".join(f"a{s} is None" for s in range(1, len(kernel.operands) + 1))
        lines += [f"if {missing}:", "    return None"]
    return lines


def launch_args(kernel: Kernel, prefix: str = "a") -> tuple[str, str]:
    """The launch's operand and parameter arguments, and its MODE keywords (the operands as
    ``<prefix><slot>``)."""
    count = len(kernel.operands)
    args = "".join(f"*{prefix}{i}[:3], " for i in range(1, count + 1))
    args += "".join(f"float(p{j}), " for j in range(len(kernel.params)))
    modes = "".join(f", MODE{i}={prefix}{i}[3]" for i in range(1, count + 1))
    return args, modes


def layouts(kernel: Kernel, full: str, reduced: str) -> list[str]:
    """Each operand's mode narrowed to a kernel's layout: ``full`` and ``reduced`` are the
    ``layout_mode`` arguments for operands at main's shape and at the reduced one."""
    lines = []
    for slot, operand in enumerate(kernel.operands, start=1):
        given = full if operand.present is None else reduced
        lines.append(f"b{slot} = layout_mode(a{slot}, {given})")
    return lines


def _head(kernel: Kernel) -> list[str]:
    rank = f" or x.ndim != {kernel.rank}" if kernel.rank is not None else ""
    return [
        f"if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0{rank}:",
        "    return None",
        "x = x.contiguous()",
        "shape = tuple(x.shape)",
    ]


def _launcher(k: int, kernel: Kernel, body: list[str], what: str) -> str:
    params, _, _ = names(kernel)
    return f'def fused{k}({params}):\n    """{what}; None for inputs it does not take."""\n' + (
        indent(body, 4) + "\n"
    )


# --- elementwise ------------------------------------------------------------------------------


def _elementwise(k: int, kernel: Kernel) -> tuple[list[str], str]:
    _, operand_args, modes = names(kernel)
    loaded = loads(kernel, [kernel.out], "mask", "row, 0, col")
    jit = f"""
@triton.jit
def fused{k}_kernel(x_ptr, out_ptr, {operand_args}{_param_names(kernel)}L, blocks,
{" " * (len(f"fused{k}_kernel") + 5)}BLOCK: tl.constexpr{modes}):
    # main as rows of L elements, BLOCK of one row per program
    pid = tl.program_id(0).to(tl.int64)
    row = pid // blocks
    col = (pid % blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = col < L
    flat = row * L + col
{indent(loaded, 4)}
    y = {render(kernel.out, _value(kernel))}
    tl.store(out_ptr + flat, y.to(out_ptr.dtype.element_ty), mask=mask)
"""
    args, mode_kw = launch_args(kernel, "b")
    out = "x" if kernel.in_place else "torch.empty_like(x)"
    found = "".join(f"a{s}, " for s in range(1, len(kernel.operands) + 1))
    body = [
        *_head(kernel),
        *operand_prep(kernel),
        f"out = {out}",
        "n = x.numel()",
        "# rows as long as the first broadcast operand's run: it is read once per row",
        f"runs = [a[1] if a[1] > 1 else a[2] for a in ({found}) if a[3] == 2]",
        "L = runs[0] if runs and runs[0] >= 256 else n",
        *layouts(kernel, "L, 0, 0, L", "L, 0, 0, L"),
        f"blocks = triton.cdiv(L, F{k}_BLOCK)",
        f"fused{k}_kernel[(n // L * blocks,)](",
        f"    x, out, {args}L, blocks, BLOCK=F{k}_BLOCK{mode_kw}, num_warps=F{k}_WARPS",
        ")",
        "return out",
    ]
    tunables = [
        tunable(f"F{k}_BLOCK", 1024, between(256, 8192)),
        tunable(f"F{k}_WARPS", 4, WARPS),
    ]
    what = f"{kernel.ops} operations in one pass over the elements"
    return tunables, jit + "\n\n" + _launcher(k, kernel, body, what)


def _param_names(kernel: Kernel) -> str:
    return "".join(f"p{j}, " for j in range(len(kernel.params)))


# --- reductions -------------------------------------------------------------------------------


def _depths(kernel: Kernel) -> list[int]:
    """The pass each statistic is computed in (1 + the deepest statistic it reads)."""
    depths: list[int] = []
    for reduction in kernel.reductions:
        reads = [n.index for n in leaves(reduction.value) if isinstance(n, Stat)]
        depths.append(1 + max((depths[i] for i in reads), default=0))
    return depths


def _reducing(k: int, kernel: Kernel) -> tuple[list[str], str]:
    _, operand_args, modes = names(kernel)
    params = _param_names(kernel)
    rows = _reduction_kernel(k, kernel, cols=False)
    cols = _reduction_kernel(k, kernel, cols=True)
    head = (
        f"def fused{k}_rows(x_ptr, out_ptr, {operand_args}{params}R, BLOCK: tl.constexpr{modes}):"
    )
    cols_head = (
        f"def fused{k}_cols(x_ptr, out_ptr, {operand_args}{params}R, inner, "
        f"BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr{modes}):"
    )
    jit = f"\n@triton.jit\n{head}\n{rows}\n\n@triton.jit\n{cols_head}\n{cols}"
    lo, hi = kernel.axes[0], kernel.axes[-1] + 1
    args, mode_kw = launch_args(kernel, "b")
    out = "x" if kernel.in_place else "torch.empty(out_shape, dtype=x.dtype, device=x.device)"
    body = [
        *_head(kernel),
        f"outer, R, inner = math.prod(shape[:{lo}]), math.prod(shape[{lo}:{hi}]), "
        f"math.prod(shape[{hi}:])",
        f"kept = tuple(1 if {lo} <= d < {hi} else n for d, n in enumerate(shape))",
        "out_shape = shape"
        if kernel.full
        else f"out_shape = tuple(kept[d] for d in {kernel.present})",
        *operand_prep(kernel),
        f"out = {out}",
        "if inner == 1:  # the reduced run is innermost: one program per row",
        *("    " + line for line in layouts(kernel, "R, 0, 0, R", "0, 0, 0, 0")),
        f"    block = min(F{k}_ROW_BLOCK, max(16, triton.next_power_of_2(R)))",
        f"    fused{k}_rows[(outer,)](",
        f"        x, out, {args}R, BLOCK=block{mode_kw}, num_warps=F{k}_ROW_WARPS",
        "    )",
        "else:  # a tile of (reduced index, inner position) per program",
        *(
            "    " + line
            for line in layouts(kernel, "R * inner, inner, R, inner", "inner, 0, 0, inner")
        ),
        f"    block_r = min(F{k}_COL_BLOCK_R, max(16, triton.next_power_of_2(R)))",
        f"    block_i = min(F{k}_COL_BLOCK_I, max(16, triton.next_power_of_2(inner)))",
        f"    fused{k}_cols[(outer * triton.cdiv(inner, block_i),)](",
        f"        x, out, {args}R, inner, BLOCK_R=block_r, BLOCK_I=block_i{mode_kw},",
        f"        num_warps=F{k}_COL_WARPS,",
        "    )",
        "return out",
    ]
    tunables = [
        tunable(f"F{k}_ROW_BLOCK", 2048, between(256, 16384)),
        tunable(f"F{k}_ROW_WARPS", 8, WARPS),
        tunable(f"F{k}_COL_BLOCK_R", 64, between(16, 256)),
        tunable(f"F{k}_COL_BLOCK_I", 64, between(16, 512)),
        tunable(f"F{k}_COL_WARPS", 4, WARPS),
    ]
    kinds = ", ".join(r.kind for r in kernel.reductions)
    shape = "main's shape" if kernel.full else "the reduced shape"
    what = f"{kernel.ops} operations, {kinds} over axes {kernel.axes}, out in {shape}"
    return tunables, jit + "\n\n" + _launcher(k, kernel, body, what)


def _reduction_kernel(k: int, kernel: Kernel, *, cols: bool) -> str:
    """The body of the rows (1-D blocks along a contiguous row) or cols (tiles) kernel."""
    del k
    value = _value(kernel)
    keep = ", keep_dims=True" if cols else ""
    shape = "BLOCK_R, BLOCK_I" if cols else "BLOCK"
    if cols:
        lines = [
            "pid = tl.program_id(0).to(tl.int64)",
            "blocks = tl.cdiv(inner, BLOCK_I)",
            "o = pid // blocks",
            "i = (pid % blocks) * BLOCK_I + tl.arange(0, BLOCK_I)",
            "rmask = (i < inner)[None, :]",
            "rflat = (o * inner + i)[None, :]",
            *_reduced_loads(kernel, "rmask", "o, 0, i[None, :]"),
        ]
        loop = [
            "for start in range(0, R, BLOCK_R):",
            "    r = (start + tl.arange(0, BLOCK_R)).to(tl.int64)",
            "    mask = (r < R)[:, None] & rmask",
            "    flat = (o * R + r[:, None]) * inner + i[None, :]",
        ]
    else:
        lines = [
            "o = tl.program_id(0).to(tl.int64)",
            "rflat = o",
            *_reduced_loads(kernel, None, "o, 0, 0"),
        ]
        loop = [
            "for start in range(0, R, BLOCK):",
            "    r = start + tl.arange(0, BLOCK)",
            "    mask = r < R",
            "    flat = o * R + r",
        ]
    index = "o, r[:, None], i[None, :]" if cols else "o, 0, r"
    depths = _depths(kernel)
    for depth in range(1, max(depths) + 1):
        mine = [(i, r) for i, r in enumerate(kernel.reductions) if depths[i] == depth]
        lines += [line for i, r in mine for line in _init(i, r.kind, shape)]
        values = [r.value for _, r in mine]
        lines += loop + ["    " + s for s in loads(kernel, values, "mask", index)]
        for i, reduction in mine:
            computed = render(reduction.value, value)
            lines += ["    " + s for s in _accumulate(i, reduction.kind, computed)]
        lines += [line for i, r in mine for line in _finish(i, r.kind, keep)]
    y = render(kernel.out, value)
    if kernel.full:
        lines += loop + ["    " + s for s in loads(kernel, [kernel.out], "mask", index)]
        lines += [
            f"    y = {y}",
            "    tl.store(out_ptr + flat, y.to(out_ptr.dtype.element_ty), mask=mask)",
        ]
    else:
        store_mask = ", mask=rmask" if cols else ""
        lines += [
            f"y = {y}",
            f"tl.store(out_ptr + rflat, y.to(out_ptr.dtype.element_ty){store_mask})",
        ]
    return indent(lines, 4) + "\n"


def _init(i: int, kind: str, shape: str) -> list[str]:
    if kind == "sum":
        return [f"a{i} = tl.zeros([{shape}], dtype=tl.float32)"]
    if kind in ("max", "min"):
        fill = '-float("inf")' if kind == "max" else 'float("inf")'
        return [f"a{i} = tl.full([{shape}], {fill}, tl.float32)"]
    # log-sum-exp, online: a running max per lane and the sum of exp relative to it; masked
    # lanes hold a finite sentinel so that exp(m - m_new) never sees inf - inf
    return [
        f"m{i} = tl.full([{shape}], -3.0e38, tl.float32)",
        f"a{i} = tl.zeros([{shape}], dtype=tl.float32)",
    ]


def _accumulate(i: int, kind: str, value: str) -> list[str]:
    if kind == "sum":
        return [f"a{i} += tl.where(mask, {value}, 0.0)"]
    if kind in ("max", "min"):
        fill = '-float("inf")' if kind == "max" else 'float("inf")'
        pick = "tl.maximum" if kind == "max" else "tl.minimum"
        return [f"a{i} = {pick}(a{i}, tl.where(mask, {value}, {fill}))"]
    return [
        f"v{i} = tl.where(mask, {value}, -3.0e38)",
        f"n{i} = tl.maximum(m{i}, v{i})",
        f"a{i} = a{i} * tl.exp(m{i} - n{i}) + tl.exp(v{i} - n{i})",
        f"m{i} = n{i}",
    ]


def _finish(i: int, kind: str, keep: str) -> list[str]:
    if kind == "sum":
        return [f"S{i} = tl.sum(a{i}, axis=0{keep})"]
    if kind in ("max", "min"):
        return [f"S{i} = tl.{kind}(a{i}, axis=0{keep})"]
    return [
        f"b{i} = tl.max(m{i}, axis=0{keep})",
        f"S{i} = b{i} + tl.log(tl.sum(a{i} * tl.exp(m{i} - b{i}), axis=0{keep}))",
    ]
