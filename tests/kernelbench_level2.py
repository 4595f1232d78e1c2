"""Level-2-style KernelBench problems for the tests: a heavy operator (Linear, Conv2d,
ConvTranspose2d) and a tail of elementwise operations and reductions, at sizes Triton's
interpreter runs in a second. Written for these tests in KernelBench's format."""

from __future__ import annotations

import textwrap


def problem(
    init: str, forward: str, constants: str, inputs: str, init_inputs: str, args: str = "x"
) -> str:
    """A problem file: ``init`` and ``forward`` are the bodies of Model's methods, ``args``
    forward's parameters."""
    return (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self, {init_inputs}):\n        super(Model, self).__init__()\n"
        + textwrap.indent(textwrap.dedent(init).strip("\n"), "        ")
        + f"\n\n    def forward(self, {args}):\n"
        + textwrap.indent(textwrap.dedent(forward).strip("\n"), "        ")
        + "\n\n\n"
        + textwrap.dedent(constants).strip("\n")
        + f"\n\n\ndef get_inputs():\n    return [{inputs}]\n\n\n"
        + f"def get_init_inputs():\n    return [{init_inputs}]\n"
    )


# Linear, then scale, a per-feature bias, GELU and a clamp: one elementwise kernel
LINEAR_TAIL = problem(
    """
    self.gemm = nn.Linear(in_features, out_features)
    self.bias = nn.Parameter(torch.randn(out_features))
    self.scale = scale
    """,
    """
    x = self.gemm(x)
    x = x * self.scale
    x = x + self.bias
    x = torch.nn.functional.gelu(x)
    return torch.clamp(x, min=-0.5, max=2.0)
    """,
    "batch_size = 16\nin_features = 40\nout_features = 24\nscale = 1.5",
    "torch.rand(batch_size, in_features)",
    "in_features, out_features, scale",
)

# Conv2d, then tanh times a per-channel parameter and the minimum over the channels
CONV_CHANNEL_MIN = problem(
    """
    self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
    self.scale = nn.Parameter(torch.randn(out_channels, 1, 1))
    """,
    """
    x = self.conv(x)
    x = torch.tanh(x) * self.scale
    x = torch.min(x, dim=1, keepdim=True)[0]
    return torch.sigmoid(x) + 0.5
    """,
    "batch_size = 2\nin_channels = 3\nout_channels = 12\nheight = width = 10\nkernel_size = 3",
    "torch.rand(batch_size, in_channels, height, width)",
    "in_channels, out_channels, kernel_size",
)

# Linear, a GroupNorm kept as the library's, a softmax and a log-sum-exp over the features
SOFTMAX_LOGSUMEXP = problem(
    """
    self.linear = nn.Linear(in_features, out_features)
    self.norm = nn.GroupNorm(groups, out_features)
    self.shift = nn.Parameter(torch.randn(out_features))
    """,
    """
    x = self.linear(x)
    x = self.norm(x)
    x = torch.softmax(x * 2.0, dim=1)
    x = x - self.shift
    return torch.logsumexp(x, dim=1, keepdim=True)
    """,
    "batch_size = 8\nin_features = 20\nout_features = 48\ngroups = 4",
    "torch.rand(batch_size, in_features)",
    "in_features, out_features, groups",
)

# ConvTranspose2d, a global average pool, a bias, a log-sum-exp over the channels: two kernels
POOL_THEN_CHANNELS = problem(
    """
    self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size)
    self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))
    """,
    """
    x = self.conv_transpose(x)
    x = torch.mean(x, dim=(2, 3), keepdim=True)
    x = x + self.bias
    x = torch.logsumexp(x, dim=1, keepdim=True) * 10.0
    return x.squeeze(-1).squeeze(-1)
    """,
    "batch_size = 2\nin_channels = 3\nout_channels = 8\nheight = width = 7\nkernel_size = 3",
    "torch.rand(batch_size, in_channels, height, width)",
    "in_channels, out_channels, kernel_size",
)

# the sum of a Linear's features after a division: a matrix-vector product
FEATURE_SUM = problem(
    """
    self.linear = nn.Linear(in_features, out_features)
    self.scaling_factor = scaling_factor
    """,
    """
    x = self.linear(x)
    x = x / 2
    x = torch.sum(x, dim=1, keepdim=True)
    return x * self.scaling_factor
    """,
    "batch_size = 16\nin_features = 40\nout_features = 24\nscaling_factor = 1.5",
    "torch.rand(batch_size, in_features)",
    "in_features, out_features, scaling_factor",
)

# Conv2d, then a per-channel bias, a 0-d parameter and a second input of the output's shape:
# operands read by channel (once per row of the kernel), as one value, and element for element
CONV_OPERANDS = problem(
    """
    self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
    self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))
    self.scale = nn.Parameter(torch.tensor(0.5))
    """,
    """
    x = self.conv(x)
    x = torch.relu(x + self.bias) * self.scale
    return x + y
    """,
    "batch_size = 2\nin_channels = 3\nout_channels = 8\nheight = width = 18\nkernel_size = 3",
    "torch.rand(batch_size, in_channels, height, width), "
    "torch.rand(batch_size, out_channels, height - 2, width - 2)",
    "in_channels, out_channels, kernel_size",
    args="x, y",
)
