"""cuDNN's settings for a whole convolutional model: the ``model`` proposal.

A whole model (KernelBench Level 3: ResNet, VGG, DenseNet, MobileNet, EfficientNet, ...) is no
pattern a template computes, but a practitioner's first step on a convolutional net is the same
as on one convolution (:mod:`codevolve.problems.kernelbench.conv_cudnn_template`), applied to
the model as a whole:

- ``CUDNN_BENCHMARK = 1``: ``torch.backends.cudnn.benchmark = True`` at the program's top, in
  the candidate's own process (the one switch the source rules allow): cuDNN times its
  algorithms on each input shape's first call and keeps the fastest for every convolution of
  the model.
- ``CHANNELS_LAST`` (models whose convolutions are all 2-D, or all 3-D): every 4-D (5-D)
  weight and buffer converted once, at the end of ``__init__``, by ``self.to(memory_format=..)``,
  and each input of that rank converted on each call; the convolutions, batch norms and
  poolings then run cuDNN's channels-last kernels. Values stay those of the same operators (the
  judge compares values, not strides), but a ``.view`` of a channels-last activation whose
  spatial size is not 1 raises (LeNet-5's ``x.view(-1, 16*5*5)``), so the proposal draws the
  starting value: half its children start with the layout, half without; ``tune`` flips it.

The model's forward is kept whole as ``forward_torch``; the new forward converts the inputs and
calls it. Nothing else changes: no operator is replaced, so the child computes what the parent
computes up to the algorithm cuDNN picks, in fp32 without TF32 (the judge's kb_precision.py).

Not proposed: folding each batch norm into the convolution before it. KernelBench builds its
models in training mode and the judge runs them so: a batch norm there normalises by the
batch's own statistics, which no weight computed ahead of time reproduces.

Applies to a program that builds any ``Conv1d/2d/3d`` or ``ConvTranspose1d/2d/3d`` module (in
``ModelNew`` or a helper class or function of the EVOLVE block) and whose forward is not itself
a pattern :mod:`codevolve.problems.kernelbench.patterns` recognises (a single convolution gets
:mod:`~codevolve.problems.kernelbench.conv_cudnn_template` instead).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from codevolve.problems.kernelbench.forward import Forward, callee
from codevolve.problems.kernelbench.template_text import (
    Template,
    fallback,
    indent,
    module_text,
    tunable,
)

NAME = "model_cudnn"
_CONV_DIMS = {
    f"Conv{transposed}{dims}d": dims for dims in (1, 2, 3) for transposed in ("", "Transpose")
}
_FORMATS = {2: "torch.channels_last", 3: "torch.channels_last_3d"}
_SWITCH = """
# cuDNN's algorithm search for every convolution of the model, in this program's own process
# (fp32 stays fp32: the judge switches TF32 off)
torch.backends.cudnn.benchmark = bool(CUDNN_BENCHMARK)
"""


@dataclass(frozen=True, slots=True)
class ConvNet:
    """The convolution modules a program builds, as its source writes them."""

    convs: int  # constructor calls of convolution modules in the source (not instances)
    layout_dims: int | None  # 2 or 3 when every one is 2-D (3-D): the layout to use; else None


def read_conv_net(tree: ast.Module) -> ConvNet | None:
    """The convolution modules ``tree`` builds anywhere (ModelNew, helper classes, helper
    functions); None where it builds none."""
    dims = [
        _CONV_DIMS[callee(node)]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and callee(node) in _CONV_DIMS
    ]
    if not dims:
        return None
    return ConvNet(convs=len(dims), layout_dims=dims[0] if len(set(dims)) == 1 else None)


def model_template(net: ConvNet, forward: Forward, *, channels_last: bool) -> Template:
    """The model's forward behind cuDNN's algorithm search and, where ``net`` has a layout, the
    channels-last layout (``channels_last``: the starting value of ``CHANNELS_LAST``)."""
    layout = _FORMATS.get(net.layout_dims or 0)
    tunables = [tunable("CUDNN_BENCHMARK", 1, (0, 1))]
    body: list[str] = []
    init = ""
    if layout is not None:
        assert net.layout_dims is not None
        rank = net.layout_dims + 2
        tunables.append(tunable("CHANNELS_LAST", int(channels_last), (0, 1)))
        for x in forward.inputs:
            body += [
                f"if CHANNELS_LAST and isinstance({x}, torch.Tensor) and {x}.ndim == {rank}:",
                f"    {x} = {x}.contiguous(memory_format={layout})",
            ]
        init = indent(
            [
                "if CHANNELS_LAST:  # every weight and buffer of that rank, converted once",
                f"    self.to(memory_format={layout})",
            ],
            8,
        )
    body.append(fallback(forward))  # the model's own forward, on the converted inputs
    what = "cuDNN's algorithm search" + (" and the channels-last layout" if layout else "")
    module = module_text(NAME, f"{what}, for the whole model", tunables, _SWITCH)
    return Template(NAME, module, indent(body, 8), init)
