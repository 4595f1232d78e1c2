"""A sum over a linear layer's features, computed without the matrix product.

``sum_j (a_j * (x @ W.T + b)_j + c_j)`` over the output features j of ``nn.Linear`` (or
``torch.matmul(x, W.T)``) is ``x @ (a @ W) + sum_j (a_j * b_j + c_j)``: a matrix-vector product
instead of the matrix product (KernelBench Level-2 problems that sum, or average, a Linear's
output after scalar or per-feature arithmetic: 14, 18, 51). :func:`matvec` finds such a kernel
in a chain: its one statistic a sum over the features of a map affine in the product
(:func:`affine`: ``a`` and ``c`` numbers or per-feature tensors), the product read by nothing
else. The statistic becomes ``feature_sum(...)`` in forward, and what the kernel computes after
it, a kernel of its own over the small result (none when that is the sum itself).

The sums are reordered, in fp32 sums of 64 terms added in float64: about the exact sums, so that
the difference from the reference is the reference's own fp32 rounding; the judge's tolerance
decides (problem 14, with ``randn`` weights, misses it
on a few rows even with the exact sums). ``feature_sum`` returns None, and forward falls back to
the parent's, for an input that is not a matrix or a factor that is not one number or one value
per feature.
"""

from __future__ import annotations

import dataclasses

from codevolve.problems.kernelbench.chain_steps import Launch, Let, Step
from codevolve.problems.kernelbench.chain_values import (
    Kernel,
    Operand,
    compact,
    leaves,
    simplify,
    substitute,
)
from codevolve.problems.kernelbench.tree import Const, Count, Input, Node, Op, Param, Stat, op

FEATURE_SUM = '''
def per_feature(v, n, like):
    """A number or a per-feature tensor as n values; None for anything else."""
    v = torch.as_tensor(v, dtype=like.dtype, device=like.device)
    if v.numel() == 1:
        return v.reshape(1).expand(n)
    if v.ndim >= 1 and v.shape[-1] == n and v.numel() == n:
        return v.reshape(n)
    return None


def chunk_size(length):
    return 64 if length % 64 == 0 else length


def weighted_rows(a, weight):
    """a @ weight: rows summed 64 at a time in the weight's dtype, those sums in float64."""
    n, k = weight.shape
    c = chunk_size(n)
    return torch.matmul(a.view(n // c, 1, c), weight.view(n // c, c, k)).double().sum(0).view(k)


def row_dots(x, v):
    """x @ v: products summed 64 at a time in x's dtype, those sums in float64."""
    m, k = x.shape
    c = chunk_size(k)
    parts = torch.matmul(x.view(m, k // c, c).transpose(0, 1), v.view(k // c, c, 1))
    return parts.double().sum(0).view(m)


def feature_sum(x, weight, bias, alpha, beta, mean, keep):
    """sum_j alpha_j * (x @ weight.T + bias)_j + beta_j over the features j, as
    x @ (alpha @ weight) + sum_j (alpha_j * bias_j + beta_j): no matrix product (divided by the
    feature count for a mean; the feature dimension kept with keep); None for inputs it does
    not take. Sums of 64 terms in fp32 added in float64: about the exact sums, at fp32 cost."""
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.dtype != weight.dtype:
        return None
    n = weight.shape[0]
    a, c = per_feature(alpha, n, weight), per_feature(beta, n, weight)
    if a is None or c is None:
        return None
    constant = c.double().sum()
    if bias is not None:
        constant = constant + (a.double() * bias.double()).sum()
    summed = weighted_rows(a.contiguous(), weight.contiguous())
    total = row_dots(x.contiguous(), summed.to(x.dtype))
    total = total + constant
    total = (total / n if mean else total).to(x.dtype)
    return total.unsqueeze(1) if keep else total
'''


def affine(node: Node) -> tuple[Node, Node] | None:
    """``node`` as ``alpha * Input(0) + beta`` (neither reading Input(0) nor a statistic)."""
    if node == Input(0):
        return Const(1.0), Const(0.0)
    if isinstance(node, Const | Param) or (isinstance(node, Input) and node.slot > 0):
        return Const(0.0), node
    if not isinstance(node, Op) or node.name not in ("add", "sub", "mul", "div", "neg"):
        return None
    parts = [affine(a) for a in node.args]
    if any(p is None for p in parts):
        return None
    pairs = [p for p in parts if p is not None]
    if node.name == "neg":
        return op("neg", pairs[0][0]), op("neg", pairs[0][1])
    (a1, b1), (a2, b2) = pairs
    if node.name in ("add", "sub"):
        return op(node.name, a1, a2), op(node.name, b1, b2)
    zero = Const(0.0)
    if node.name == "mul" and a1 == zero:
        return op("mul", b1, a2), op("mul", b1, b2)
    if node.name == "mul" and a2 == zero:
        return op("mul", a1, b2), op("mul", b1, b2)
    if node.name == "div" and a2 == zero:
        return op("div", a1, b2), op("div", b1, b2)
    return None


def matvec(steps: list[Step], index: int, readers: list[int]) -> bool:
    """Rewrite the kernel at ``steps[index]`` (and the product it reads) into a feature sum,
    where it is one; True when it was."""
    launch = steps[index]
    assert isinstance(launch, Launch)
    kernel = launch.kernel
    producer = next((i for i, step in enumerate(steps) if step.target == kernel.main), None)
    made = steps[producer] if producer is not None else None
    if not (isinstance(made, Let) and made.weight and readers == [index]):
        return False
    if kernel.rank != 2 or kernel.axes != (1,) or kernel.full or len(kernel.reductions) != 1:
        return False
    (reduction,) = kernel.reductions
    parts = affine(reduction.value)
    if reduction.kind != "sum" or parts is None:
        return False
    if any(isinstance(n, Input) and n.slot == 0 for n in leaves(kernel.out)):
        return False
    averaged = substitute(kernel.out, op("div", Stat(0), Count()), Input(0))
    mean = averaged != kernel.out and Stat(0) not in leaves(averaged)
    after = averaged if mean else substitute(kernel.out, Stat(0), Input(0))
    if any(isinstance(n, Stat | Count) for n in leaves(after)):
        return False
    alpha, beta = (_torch(simplify(part), kernel) for part in parts)
    bias = f"self.{made.module}.bias" if made.module else "None"
    keep = kernel.present == (0, 1)
    name = launch.target if after == Input(0) else f"{launch.target}_sum"
    total = f"feature_sum({made.arg}, {made.weight}, {bias}, {alpha}, {beta}, "
    total += f"mean={mean}, keep={keep})"
    assert producer is not None
    del steps[producer]  # the product: nothing else reads it
    index -= 1
    steps[index] = Let(f"{name} = {total}", name, frozenset({made.arg}), checked=True)
    if after != Input(0):
        rest = compact(
            dataclasses.replace(
                kernel,
                main=name,
                rank=len(kernel.present),
                operands=tuple(Operand(o.source) for o in kernel.operands),
                axes=(),
                reductions=(),
                out=after,
                present=tuple(range(len(kernel.present))),
                full=True,
            )
        )
        steps.insert(index + 1, Launch(launch.target, rest))
    return True


def _torch(node: Node, kernel: Kernel) -> str:
    """An affine factor as a torch expression of forward (numbers and per-feature tensors)."""
    if isinstance(node, Const):
        return repr(node.value)
    if isinstance(node, Param):
        return f"({kernel.params[node.slot]})"
    if isinstance(node, Input):
        return f"({kernel.operands[node.slot - 1].source})"
    assert isinstance(node, Op)
    args = [_torch(a, kernel) for a in node.args]
    if node.name == "neg":
        return f"(-{args[0]})"
    infix = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[node.name]
    return f"({args[0]} {infix} {args[1]})"
