"""The cuDNN template for every convolution module: the settings a practitioner tries first.

No kernel of its own: the convolution stays cuDNN's (``torch.nn.functional.convNd`` or
``conv_transposeNd`` with the module's weight, bias and settings), run the way a practitioner
would tune it:

- ``CUDNN_BENCHMARK = 1``: ``torch.backends.cudnn.benchmark = True`` at the program's top. cuDNN
  then times its algorithms on each input shape's first call and keeps the fastest; by default it
  picks one by heuristics. The switch is the candidate's own process's (the one a source rule
  allows, core/kernel_rules.py): the reference never sees it, and the precision stays the
  judge's (no TF32: kb_precision.py).
- ``CHANNELS_LAST = 1`` (2-D and 3-D): the weight converted once, at the end of ``__init__``, to
  the channels-last layout (NHWC, or NDHWC), and the input converted on each call; cuDNN's
  channels-last kernels then run, and the output comes back channels-last: the same values and
  shape with other strides, which the judge accepts (it compares values). Converting the input
  is one more pass over it: the timing decides whether the layout pays for it.

A padding mode other than zeros calls the module itself (it pads first).
"""

from __future__ import annotations

from codevolve.problems.kernelbench.convs import Conv
from codevolve.problems.kernelbench.forward import Forward
from codevolve.problems.kernelbench.template_text import Template, indent, module_text, tunable

_FORMATS = {2: "torch.channels_last", 3: "torch.channels_last_3d"}
_SWITCH = """
# cuDNN's algorithm search, in this program's own process: each input shape's first call times
# the algorithms and keeps the fastest (fp32 stays fp32: the judge switches TF32 off)
torch.backends.cudnn.benchmark = bool(CUDNN_BENCHMARK)
"""


def cudnn_template(p: Conv, forward: Forward) -> Template:
    """The module's convolution through cuDNN with its algorithm search and, for 2-D and 3-D
    convolutions, the channels-last layout."""
    del forward  # every input goes to cuDNN: nothing falls back
    x, n = p.tensor, p.dims
    layout = _FORMATS.get(n)
    conv = f"torch.nn.functional.conv{'_transpose' if p.transposed else ''}{n}d"
    settings = (
        "conv.stride, conv.padding, conv.output_padding, conv.groups, conv.dilation"
        if p.transposed
        else "conv.stride, conv.padding, conv.dilation, conv.groups"
    )
    body = [f"conv = self.{p.module}", f"xs = {x}"]
    if layout:
        body += [
            f"if CHANNELS_LAST and xs.ndim == {n + 2}:",
            f"    xs = xs.contiguous(memory_format={layout})",
        ]
    body += [
        "if conv.padding_mode != 'zeros':  # the module pads first",
        "    return conv(xs)",
        f"return {conv}(xs, conv.weight, conv.bias, {settings})",
    ]
    tunables = [tunable("CUDNN_BENCHMARK", 1, (0, 1))]
    init = ""
    if layout:
        tunables.append(tunable("CHANNELS_LAST", 1, (0, 1)))
        init = indent(
            [
                "if CHANNELS_LAST:  # the weight in the channels-last layout, converted once",
                f"    self.{p.module}.to(memory_format={layout})",
            ],
            8,
        )
    what = "cuDNN's algorithm search" + (" and the channels-last layout" if layout else "")
    module = module_text("conv_cudnn", what, tunables, _SWITCH)
    return Template("conv_cudnn", module, indent(body, 8), init)
