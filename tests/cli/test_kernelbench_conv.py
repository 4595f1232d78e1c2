"""A convolution problem judged on the CPU (``--gpus cpu``: the real judge, its runners, Triton's
interpreter): the implicit-GEMM template the simulated proposer makes passes, and the same
kernel with its padding off by one fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from codevolve.problems.kernelbench.format import read_problem
from tests.cli.conftest import codevolve

# stride 2, padding 1, dilation 2, a bias; groups left to the init inputs as KernelBench writes it
CONV_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A 2-D convolution: stride 2, padding 1, dilation 2, with a bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding, dilation=dilation, groups=groups, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.rand(2, 5, 19, 23)]


def get_init_inputs():
    return [5, 12, 3, 2, 1, 2]
'''
JUDGE = ("--gpus", "cpu", "--baselines", "eager", "--judge-seeds", "1", "--judge-trials", "3")


@pytest.mark.slow
def test_the_implicit_gemm_template_passes_the_judge_and_a_padding_off_by_one_fails(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from tests.unit.problems.kernelbench.test_kb_convs import GEMM, conv_child

    problem = tmp_path / "1_conv_s2_p1_d2.py"
    problem.write_text(CONV_PROBLEM)
    initial = read_problem(CONV_PROBLEM, name=problem.stem).initial_program
    gemm = conv_child(initial, GEMM)
    right = tmp_path / "gemm.py"
    right.write_text(gemm)
    outcome = codevolve(
        "evaluate", "--kernel-problem", str(problem), "--program", str(right), *JUDGE, timeout=300
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    assert "  stage judge: passed " in outcome.stdout
    shifted = gemm.replace("PH=pad[0], PW=pad[1]", "PH=pad[0] + 1, PW=pad[1] + 1")
    assert shifted != gemm
    wrong = tmp_path / "gemm_padding_off_by_one.py"
    wrong.write_text(shifted)
    outcome = codevolve(
        "evaluate", "--kernel-problem", str(problem), "--program", str(wrong), *JUDGE, timeout=300
    )
    assert outcome.returncode == 1
    assert "stage judge: failed  wrong result: kernelbench: output:" in outcome.stdout
