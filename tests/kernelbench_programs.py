"""KernelBench texts that several test folders use: a problem file and a Triton solution.

``SWISH`` is a problem file as users pass it (``25_Swish.py``); ``TRITON_RELU`` a ``ModelNew``
computing ReLU with a Triton kernel, for a ReLU reference.
"""

from __future__ import annotations

SWISH = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)

def get_inputs():
    return [torch.rand(32, 512)]

def get_init_inputs():
    return []
"""

TRITON_RELU = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _relu[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y
"""
