"""The source rules of KernelBench-format problems: what reading refuses, with its line."""

from __future__ import annotations

import pytest

from codevolve.core.kernel_rules import check_model_new, check_reference

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

INITIAL = '''"""KernelBench problem 95_cumsum: ModelNew must compute what Model computes, faster."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
input_shape = (4000,)
dim = 1

# EVOLVE-BLOCK-START
class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)
# EVOLVE-BLOCK-END
'''

TRITON = """import math
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton import language as lang


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, lang.cast(x, tl.float32) * 2, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, scale, *, input=None):
        super(ModelNew, self).__init__()
        self._scale = scale
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, input):
        y = torch.empty_like(input)
        n = input.numel()
        _double[(triton.cdiv(n, 1024),)](input, y, n, BLOCK=1024)
        pick = lambda t: t * self._scale
        return pick(y) + math.pi * 0
"""


def _candidate(body: str, *, header: str = HEADER) -> str:
    """A ModelNew whose forward runs ``body`` (indented by the caller's lines)."""
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    return header + f"class ModelNew(nn.Module):\n    def forward(self, x):\n{lines}"


@pytest.mark.parametrize("source", [INITIAL, TRITON], ids=["initial", "triton"])
def test_the_initial_program_and_a_triton_rewrite_pass(source: str) -> None:
    assert check_model_new(source) == ""


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        # Reaching the reference: calling it is not a kernel.
        (_candidate("return Model(1)(x)"), "line 6: the name 'Model'"),
        (HEADER + "class ModelNew(Model):\n    def forward(self, x):\n        return 1\n", "Model"),
        # A fallback path: a kernel that fails must fail.
        (_candidate("try:\n    return x\nexcept Exception:\n    return x"), "line 6: a try"),
        # Work off the timed stream, graphs that replay old work.
        (_candidate("s = torch.cuda.Stream()\nreturn x"), "'Stream'"),
        (_candidate("with torch.cuda.stream(None):\n    return x"), "'stream'"),
        (_candidate("torch.cuda.synchronize()\nreturn x"), "'synchronize'"),
        (_candidate("g = torch.cuda.CUDAGraph()\nreturn x"), "'CUDAGraph'"),
        # Predicting the inputs: seeding, saving or reading the RNG.
        (_candidate("torch.manual_seed(0)\nreturn torch.rand(4)"), "'manual_seed'"),
        (_candidate("return x * torch.initial_seed()"), "'initial_seed'"),
        (_candidate("g = torch.Generator()\nreturn x"), "'Generator'"),
        ("from torch import manual_seed\n" + _candidate("return x"), "line 1: imports"),
        # Monkeypatching the library the reference calls.
        (HEADER + "torch.cumsum = lambda x, dim: x\n" + _candidate("return x"), "'cumsum' of"),
        (_candidate("t = torch\nt.cumsum = None\nreturn x"), "'cumsum' of something"),
        (_candidate("self.f.cumsum = None\nreturn x"), "'cumsum' of something"),
        # ...through a method called with a module as its self.
        (
            HEADER + "class ModelNew(nn.Module):\n    def put(self, f):\n        self.cumsum = f\n"
            "    def forward(self, x):\n        ModelNew.put(torch, None)\n        return x\n",
            "line 8: uses the class ModelNew as a value",
        ),
        (
            HEADER + "class ModelNew(nn.Module):\n    def forward(self, x):\n        self = torch\n"
            "        self.cumsum = None\n        return x\n",
            "rebinds 'self'",
        ),
        (
            HEADER + "class ModelNew(nn.Module):\n    @staticmethod\n    def put(obj):\n"
            "        obj.cumsum = None\n    def forward(self, x):\n        return x\n",
            "line 7: assigns the attribute 'cumsum'",
        ),
        # Escapes out of the namespace.
        (_candidate("return x.__class__"), "'__class__'"),
        (_candidate("return getattr(x, 'T')"), "'getattr'"),
        (_candidate("return torch.os.getcwd()"), "'os'"),
        (_candidate("return F.np.zeros(1)"), "'np'"),
        (_candidate("return torch._C._get_tracing_state()"), "'_C'"),
        (_candidate("return torch.load('weights.pt')"), "'load'"),
        (_candidate("return eval('x')"), "'eval'"),
        (_candidate("return x._base"), "private"),
        (_candidate("f = lambda self: self._x\nreturn f(torch)"), "'_x': private"),
        ("import os\n" + _candidate("return x"), "import of 'os' is not allowed"),
        ("from . import helper\n" + _candidate("return x"), "not allowed"),
        ("from torch import *\n" + _candidate("return x"), "import *"),
        (HEADER + "import triton.language as tl\ntl = torch\n" + _candidate("return x"), "'tl'"),
        # Hooks, global switches, compiled code.
        (_candidate("self.register_forward_hook(None)\nreturn x"), "hooks"),
        (_candidate("torch.backends.cuda.matmul.allow_tf32 = True\nreturn x"), "'backends'"),
        (_candidate("torch.backends.cudnn.allow_tf32 = True\nreturn x"), "'backends'"),
        (_candidate("torch.backends.cudnn.deterministic = False\nreturn x"), "'backends'"),
        (_candidate("torch.backends.cudnn.benchmark += 1\nreturn x"), "'backends'"),
        (_candidate("b = torch.backends.cudnn.benchmark\nreturn x"), "'backends'"),
        (
            _candidate(
                "torch.backends.cudnn.benchmark = torch.backends.cudnn.allow_tf32\nreturn x"
            ),
            "'backends'",
        ),
        (_candidate("nn.backends.cudnn.benchmark = True\nreturn x"), "'backends'"),
        (_candidate("torch.set_default_dtype(torch.float16)\nreturn x"), "'set_default_dtype'"),
        (_candidate("return torch.compile(F.relu)(x)"), "'compile'"),
        (_candidate("return torch.jit.script(F.relu)(x)"), "'jit'"),
        # State kept across calls, generators, coroutines.
        (_candidate("global cache\nreturn x"), "a global statement"),
        (_candidate("yield x"), "yield"),
        (_candidate("match x:\n    case _:\n        return x"), "a match statement"),
        # The entry point.
        (HEADER + "class Other(nn.Module):\n    def forward(self, x):\n        return 1\n", "no"),
        (HEADER + "class ModelNew(nn.Module):\n    def call(self, x):\n        return 1\n", "no f"),
        ("def broken(:\n", "does not parse"),
    ],
)
def test_what_a_candidate_cannot_do(source: str, reason: str) -> None:
    problem = check_model_new(source)
    assert reason in problem, problem
    assert "\n" not in problem


def test_cudnn_benchmark_is_the_one_switch_a_candidate_may_set() -> None:
    # It picks cuDNN's algorithm in the candidate's own process; the precision is the judge's.
    at_top = (
        HEADER + "torch.backends.cudnn.benchmark = True\n" + _candidate("return x")[len(HEADER) :]
    )
    assert check_model_new(at_top) == ""
    assert check_model_new(_candidate("torch.backends.cudnn.benchmark = bool(1)\nreturn x")) == ""
    aliased = "import torch as t\nimport torch.nn as nn\nt.backends.cudnn.benchmark = True\n"
    assert check_model_new(aliased + _candidate("return x", header="")) == ""
    both = _candidate(
        "torch.backends.cudnn.benchmark = torch.backends.cudnn.enabled = True\nreturn x"
    )
    assert "'backends'" in check_model_new(both)


def test_a_parameter_named_like_a_builtin_is_a_local_but_its_default_is_not() -> None:
    header = HEADER + "class ModelNew(nn.Module):\n"
    assert check_model_new(header + "    def forward(self, input):\n        return input\n") == ""
    bad = header + "    def forward(self, x, g=getattr):\n        return g(x, 'T')\n"
    assert "'getattr'" in check_model_new(bad)


REFERENCE = """import torch
import torch.nn as nn
import numpy as np


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=1)


def get_inputs():
    return [torch.rand(4, 8)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (REFERENCE, ""),
        ("import os\n" + REFERENCE, "line 1: the reference imports 'os'"),
        (REFERENCE.replace("class Model(", "class Other("), "no class Model"),
        (REFERENCE.replace("def forward", "def run"), "no forward"),
        (REFERENCE.replace("def get_init_inputs", "def init"), "'get_init_inputs'"),
        (REFERENCE + "data = open('x')\n", "uses 'open'"),
        ("def broken(:\n", "does not parse"),
    ],
)
def test_the_reference_guard_catches_accidents(source: str, reason: str) -> None:
    problem = check_reference(source)
    assert (reason in problem) if reason else problem == "", problem
