"""The fused forward of a Level-2 chain: library calls as written, each fused tail one kernel.

:func:`plan` makes two choices a kernel engineer makes on a
:class:`~codevolve.problems.kernelbench.chain.Chain`:

- a convolution whose result only a kernel reads runs without its bias
  (``F.conv2d(x, weight, None, ...)`` with the module's settings), and the kernel adds the bias
  per channel: eager adds it in a pass of its own after cuDNN's convolution;
- a kernel whose output has its main tensor's shape writes into main when main is a temporary
  (a library call's new tensor or another kernel's output) that nothing after reads.

:func:`fused_template` renders the planned chain: the kernels and their launchers
(:mod:`codevolve.problems.kernelbench.fused_template`) and a forward that checks the assumed
attribute values, runs the steps, and falls back to the parent's forward (``forward_torch``)
wherever a launcher declines its inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from codevolve.problems.kernelbench.chain_steps import Chain, Launch, Let, Step
from codevolve.problems.kernelbench.chain_values import Kernel, Operand, Reduction, substitute
from codevolve.problems.kernelbench.fused_template import SHARED, call, kernel_text
from codevolve.problems.kernelbench.matvec import FEATURE_SUM, matvec
from codevolve.problems.kernelbench.template_text import (
    Template,
    fallback,
    helpers,
    indent,
    module_text,
)
from codevolve.problems.kernelbench.tree import Input, op

CHANNEL_BIAS = '''
def channel_bias(conv, rank):
    """The convolution's bias as (C, 1, ...), to broadcast over its output (zeros without)."""
    bias = conv.bias
    if bias is None:
        bias = torch.zeros(conv.out_channels, dtype=conv.weight.dtype, device=conv.weight.device)
    return bias.view(-1, *([1] * (rank - 2)))
'''


def plan(chain: Chain, *, products: bool = True) -> Chain:
    """``chain`` with sums over a linear layer's features as matrix-vector products
    (:mod:`codevolve.problems.kernelbench.matvec`; not with ``products`` False), convolution
    biases moved into kernels and kernels writing in place."""
    steps = list(chain.steps)
    guards = list(chain.guards)
    for target in [s.target for s in steps if isinstance(s, Launch) and products]:
        index = next(i for i, s in enumerate(steps) if s.target == target)
        launch = steps[index]
        if isinstance(launch, Launch):
            matvec(steps, index, _readers(steps, chain.result, launch.kernel.main))
    for index, step in enumerate(steps):
        if not isinstance(step, Launch):
            continue
        kernel = step.kernel
        producer = _producer(steps, kernel.main)
        readers = _readers(steps, chain.result, kernel.main)
        made = steps[producer] if producer is not None else None
        foldable = isinstance(made, Let) and made.kind.startswith("Conv") and made.module
        if foldable and readers == [index] and kernel.rank is not None:
            assert isinstance(made, Let) and producer is not None
            steps[producer] = dataclasses.replace(made, text=_unbiased(made), fresh=True)
            kernel = _with_bias(kernel, made.module)
            guards.append(f"self.{made.module}.padding_mode == 'zeros'")
        fresh = producer is not None and _fresh(steps[producer])
        later = [i for i in _readers(steps, chain.result, kernel.main) if i > index]
        inputs = {o.source for o in kernel.operands}
        if kernel.full and fresh and not later and kernel.main not in inputs:
            kernel = dataclasses.replace(kernel, in_place=True)
        steps[index] = Launch(step.target, kernel)
    return dataclasses.replace(chain, steps=tuple(steps), guards=tuple(guards))


def _producer(steps: list[Step], name: str) -> int | None:
    for index, step in enumerate(steps):
        target = step.target
        if target == name:
            return index
    return None


def _fresh(step: Step) -> bool:
    return isinstance(step, Launch) or step.fresh


def _readers(steps: list[Step], result: str, name: str) -> list[int]:
    """The steps reading ``name`` (len(steps) for forward's return)."""
    found = []
    for index, step in enumerate(steps):
        if isinstance(step, Let):
            reads = name in step.reads
        else:
            sources = {step.kernel.main, *(o.source for o in step.kernel.operands)}
            reads = name in sources
        if reads:
            found.append(index)
    if result == name:
        found.append(len(steps))
    return found


def _unbiased(made: Let) -> str:
    """The convolution as the functional call without its bias, with the module's settings."""
    m, n = f"self.{made.module}", made.kind[-2]
    if made.kind.startswith("ConvTranspose"):
        settings = f"{m}.stride, {m}.padding, {m}.output_padding, {m}.groups, {m}.dilation"
        function = f"F.conv_transpose{n}d"
    else:
        settings = f"{m}.stride, {m}.padding, {m}.dilation, {m}.groups"
        function = f"F.conv{n}d"
    return f"{made.target} = {function}({made.arg}, {m}.weight, None, {settings})"


def _with_bias(kernel: Kernel, module: str) -> Kernel:
    """``kernel`` adding the convolution's bias to each element of main as it reads it."""
    operands = (*kernel.operands, Operand(f"channel_bias(self.{module}, {kernel.rank})"))
    biased = op("add", Input(0), Input(len(operands)))
    return dataclasses.replace(
        kernel,
        operands=operands,
        out=substitute(kernel.out, Input(0), biased),
        reductions=tuple(
            Reduction(r.kind, substitute(r.value, Input(0), biased)) for r in kernel.reductions
        ),
    )


def fused_template(
    chain: Chain, tunables: Sequence[str] = (), text: str = "", extra: Kernel | None = None
) -> Template:
    """The module text (kernels, launchers) and forward body of a planned chain, with the
    ``tunables`` and kernel ``text`` of a step it calls beside its fused kernels (computing
    ``extra``'s tail)."""
    tunables = list(tunables)
    texts: list[str] = [text] if text else []
    nodes = [extra.out] if extra is not None else []
    for k, kernel in enumerate(chain.kernels):
        lines, text = kernel_text(k, kernel)
        tunables += lines
        texts.append(text)
        nodes += [kernel.out, *(r.value for r in kernel.reductions)]
    biased = any("channel_bias(" in o.source for k in chain.kernels for o in k.operands)
    summed = any(isinstance(s, Let) and "feature_sum(" in s.text for s in chain.steps)
    shared = SHARED + helpers(*nodes) + (CHANNEL_BIAS if biased else "")
    shared += FEATURE_SUM if summed else ""
    back = fallback(chain.forward)
    body: list[str] = []
    if chain.guards:
        body += [f"if not ({' and '.join(chain.guards)}):", f"    {back}"]
    k = 0
    for step in chain.steps:
        if isinstance(step, Let):
            body += step.text.split("\n")
            if step.checked:
                body += [f"if {step.target} is None:", f"    {back}"]
            continue
        body += [
            f"{step.target} = {call(k, step.kernel)}",
            f"if {step.target} is None:",
            f"    {back}",
        ]
        k += 1
    body.append(f"return {chain.result}")
    count = len(chain.kernels) + bool(text)
    what = f"library calls kept, {count} fused kernel{'s' if count > 1 else ''}"
    module = module_text("fused", what, tunables, shared + "\n\n" + "\n\n".join(texts))
    return Template("fused", module, indent(body, 8))
