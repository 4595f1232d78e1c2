"""A whole convolutional model judged on the CPU (``--gpus cpu``: the real judge and its
runners): the ``model`` child (cuDNN's settings and the channels-last layout) of a residual net
with batch norms in training mode passes, and the channels-last child of a net that views an
activation fails with torch's one-line error, not a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from codevolve.problems.kernelbench.format import read_problem
from tests.cli.conftest import codevolve

RESNET = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c):
        super(Block, self).__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


class Model(nn.Module):
    """A small residual net: batch norms in training mode, as KernelBench builds its models."""

    def __init__(self, c, classes):
        super(Model, self).__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(Block(c), Block(c))
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(2 * c, classes)

    def forward(self, x):
        x = self.pool(self.blocks(self.stem(x)))
        x = torch.cat([x, x * 0.5], dim=1)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def get_inputs():
    return [torch.rand(4, 3, 20, 16)]


def get_init_inputs():
    return [6, 5]
'''
LENET = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LeNet-5's flatten: a view of an activation whose spatial size is not 1."""

    def __init__(self, classes):
        super(Model, self).__init__()
        self.conv1 = nn.Conv2d(1, 3, 3)
        self.conv2 = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 5 * 5, classes)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv2(torch.relu(self.conv1(x)))), 2)
        return self.fc(x.view(-1, 4 * 5 * 5))


def get_inputs():
    return [torch.rand(4, 1, 14, 14)]


def get_init_inputs():
    return [6]
'''
JUDGE = ("--gpus", "cpu", "--baselines", "eager", "--judge-seeds", "1", "--judge-trials", "3")


def judged(tmp_path: Path, name: str, problem_source: str) -> str:
    """``codevolve evaluate`` of the problem's channels-last ``model`` child: its output."""
    from tests.unit.problems.kernelbench.test_kb_model_cudnn import model_child

    problem = tmp_path / f"1_{name}.py"
    problem.write_text(problem_source)
    initial = read_problem(problem_source, name=problem.stem).initial_program
    program = tmp_path / f"{name}_model_cudnn.py"
    program.write_text(model_child(initial, channels_last=1))
    outcome = codevolve(
        "evaluate", "--kernel-problem", str(problem), "--program", str(program), *JUDGE, timeout=300
    )
    return f"{outcome.returncode}\n{outcome.stdout}{outcome.stderr}"


@pytest.mark.slow
def test_the_model_child_of_a_residual_net_passes_the_judge(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    output = judged(tmp_path, "resnet", RESNET)
    assert output.startswith("0\n"), output
    assert "  stage judge: passed " in output


@pytest.mark.slow
def test_a_channels_last_view_fails_the_judge_with_torchs_error(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    output = judged(tmp_path, "lenet", LENET)
    assert output.startswith("1\n"), output
    assert "stage judge: failed" in output and "view size is not compatible" in output
