"""The ``model`` move: a whole convolutional model behind cuDNN's settings (model_cudnn.py).

Where it applies (a program that builds convolution modules and whose forward no pattern
recognises) and where it does not; its child keeps the rules, converts the weights once and the
inputs per call, and computes what the parent computes with its batch norms in training mode,
as KernelBench builds and the judge runs them (on the CPU here; the judge on the CPU in
tests/cli/test_kernelbench_model.py). A ``.view`` of a channels-last activation raises: why the
layout's starting value is drawn.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from codevolve.problems.kernelbench.model_cudnn import read_conv_net
from codevolve.problems.kernelbench.template_text import MARKER
from tests.unit.problems.kernelbench.test_kb_mutations import MUTATIONS, child, load, prompt

torch = pytest.importorskip("torch")

SEEDS = range(12)
HEAD = '''"""KernelBench problem {name}: ModelNew must compute what the reference Model computes."""

import torch
import torch.nn as nn
import torch.nn.functional as F

# EVOLVE-BLOCK-START
'''
TAIL = "# EVOLVE-BLOCK-END\n"
# A residual net: convolutions in a helper class and an nn.Sequential, batch norms in training
# mode, a pooling, a concatenation along the channels and a flatten before the linear layer.
RESNET = """class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


class ModelNew(nn.Module):
    def __init__(self, c: int = 4, classes: int = 5):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(Block(c), Block(c))
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(2 * c, classes)

    def forward(self, x):
        x = self.pool(self.blocks(self.stem(x)))
        x = torch.cat([x, x * 0.5], dim=1)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
"""
# LeNet-5's flatten: a view of an activation whose spatial size is not 1
VIEW = """class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 3, 3)
        self.conv2 = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 5 * 5, 6)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv2(torch.relu(self.conv1(x)))), 2)
        return self.fc(x.view(-1, 4 * 5 * 5))
"""
VOLUME = """class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv3d(2, 3, 3, padding=1)
        self.b = nn.Conv3d(3, 3, 1)

    def forward(self, x, scale: float = 2.0):
        return self.b(torch.relu(self.a(x))) * scale
"""
MIXED = """class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(2, 3, 3)
        self.b = nn.Conv2d(1, 1, 1)

    def forward(self, x):
        return self.b(self.a(x).unsqueeze(1))
"""
MLP = """class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x):
        return self.net(x)
"""
SINGLE_CONV = """class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x)
"""


def program(name: str, body: str) -> str:
    return HEAD.format(name=name) + body + TAIL


def model_child(parent: str, *, channels_last: int) -> str:
    """The ``model`` child of ``parent`` starting with ``CHANNELS_LAST = channels_last``."""
    for seed in SEEDS:
        built = child("model", parent, seed)
        if f"CHANNELS_LAST = {channels_last}  #" in built:
            return built
    raise AssertionError(f"no child with CHANNELS_LAST = {channels_last}")


def built_pair(parent: str, source: str, tmp_path: Path, tag: str) -> tuple[Any, Any]:
    """Parent and child built from one seed, as the judge builds reference and candidate."""
    torch.manual_seed(0)
    reference = load(parent, tmp_path, f"parent_{tag}").ModelNew()
    torch.manual_seed(0)
    candidate = load(source, tmp_path, f"child_{tag}").ModelNew()
    return reference, candidate


def test_a_whole_conv_net_gets_the_model_proposal_and_only_it() -> None:
    parent = program("resnet", RESNET)
    assert MUTATIONS["template"].propose(prompt(parent), np.random.default_rng(0)) is None
    source = child("model", parent)
    assert f"{MARKER} model_cudnn (" in source
    assert "torch.backends.cudnn.benchmark = bool(CUDNN_BENCHMARK)" in source
    # the forward is kept whole; the new one converts the input and calls it
    assert "    def forward_torch(self, x):" in source
    assert "x = x.contiguous(memory_format=torch.channels_last)" in source
    # a child holds its template: only tune moves it further
    assert MUTATIONS["model"].propose(prompt(source), np.random.default_rng(0)) is None
    tunable = re.compile(r"^(CUDNN_BENCHMARK|CHANNELS_LAST) = (\d)  # tune: 0\|1$", re.MULTILINE)
    before = dict(tunable.findall(source))
    moved = set()
    for seed in SEEDS:
        after = dict(tunable.findall(child("tune", source, seed)))
        changed = [name for name in before if after[name] != before[name]]
        assert len(changed) == 1
        moved.add(changed[0])
    assert moved == {"CUDNN_BENCHMARK", "CHANNELS_LAST"}


@pytest.mark.parametrize(
    ("name", "body"),
    [("mlp", MLP), ("single_conv", SINGLE_CONV)],
)
def test_no_model_proposal_without_convolutions_or_for_a_single_convolution(
    name: str, body: str
) -> None:
    """An MLP builds no convolution; a single convolution is a pattern ``template`` takes."""
    parent = program(name, body)
    assert MUTATIONS["model"].propose(prompt(parent), np.random.default_rng(0)) is None
    templated = MUTATIONS["template"].propose(prompt(parent), np.random.default_rng(0))
    assert (templated is not None) == (name == "single_conv")


def test_the_layout_follows_the_convolutions_dimensions(tmp_path: Path) -> None:
    parent = program("volume", VOLUME)
    volume = model_child(parent, channels_last=1)
    assert "torch.channels_last_3d" in volume and "x.ndim == 5" in volume
    reference, candidate = built_pair(parent, volume, tmp_path, "volume")
    assert candidate.a.weight.is_contiguous(memory_format=torch.channels_last_3d)
    x = torch.randn(2, 2, 5, 6, 7)
    torch.testing.assert_close(candidate(x, 3.0), reference(x, 3.0), atol=1e-5, rtol=1e-5)
    mixed = child("model", program("mixed", MIXED))
    assert "CHANNELS_LAST" not in mixed and "CUDNN_BENCHMARK = 1" in mixed
    net = read_conv_net(ast.parse(program("mixed", MIXED)))
    assert net is not None and net.convs == 2 and net.layout_dims is None


def test_the_layout_starting_value_is_drawn() -> None:
    parent = program("resnet", RESNET)
    starts = {
        re.search(r"^CHANNELS_LAST = (\d)", child("model", parent, seed), re.MULTILINE)[1]  # type: ignore[index]
        for seed in SEEDS
    }
    assert starts == {"0", "1"}


def test_the_child_computes_what_the_parent_computes_in_training_mode(tmp_path: Path) -> None:
    parent = program("resnet", RESNET)
    source = model_child(parent, channels_last=1)
    reference, candidate = built_pair(parent, source, tmp_path, "layout")
    assert reference.training and candidate.training  # batch norms use the batch's statistics
    weight = candidate.blocks[0].conv.weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    torch.testing.assert_close(weight, reference.blocks[0].conv.weight, atol=0, rtol=0)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(3, 3, 16, 12) * (1.0 if seed < 2 else 100.0)
        with torch.no_grad():
            got, want = candidate(x.clone()), reference(x.clone())
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=1e-4 * float(want.abs().max()), rtol=1e-4)
    plain = model_child(parent, channels_last=0)
    _, unconverted = built_pair(parent, plain, tmp_path, "plain")
    assert unconverted.blocks[0].conv.weight.is_contiguous()


def test_a_view_of_a_channels_last_activation_raises_and_the_plain_layout_does_not(
    tmp_path: Path,
) -> None:
    parent = program("lenet", VIEW)
    x = torch.randn(2, 1, 14, 14)
    reference, layout = built_pair(parent, model_child(parent, channels_last=1), tmp_path, "cl")
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        layout(x)
    _, plain = built_pair(parent, model_child(parent, channels_last=0), tmp_path, "plain")
    torch.testing.assert_close(plain(x), reference(x), atol=1e-5, rtol=1e-5)
