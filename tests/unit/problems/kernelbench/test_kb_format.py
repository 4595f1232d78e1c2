"""The KernelBench problem format: reading a file, its initial program, the stored spec."""

from __future__ import annotations

import ast

import pytest

from codevolve.core.evolve_block import layout
from codevolve.problems.kernelbench.format import KernelProblemError, read_problem
from codevolve.problems.kernelbench.spec import (
    JudgeSettings,
    make_spec,
    spec_files,
    spec_of_files,
)
from codevolve.problems.openevolve import BundleError, make_bundle, problem_of

SCAN = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """A reverse cumulative sum along a dimension."""

    def __init__(self, dim):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)

batch_size = 8
input_shape = (300,)
dim = 1

def get_inputs():
    return [torch.rand(batch_size, *input_shape)]

def get_init_inputs():
    return [dim]
'''

HELPER = """import math
import torch
import torch.nn as nn

def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu(x)

def get_inputs():
    return [torch.rand(4, 16)]

def get_init_inputs():
    return []
"""


def test_initial_program_is_the_reference_class_renamed_inside_the_block() -> None:
    problem = read_problem(SCAN, name="91_reverse_cumsum")
    assert problem.number == 91
    assert problem.init_args == ("dim",)
    assert problem.forward_args == ("x",)
    program = problem.initial_program
    tree = ast.parse(program)
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes == ["ModelNew"]
    assert "super().__init__()" in program and "super(Model" not in program
    assert "batch_size = 8" in program  # module constants come along, outside the block
    found = layout(program)
    assert found.marked
    (region,) = found.regions
    editable = program[region.start : region.end]
    assert "class ModelNew" in editable
    assert "torch.cumsum(x.flip(self.dim)" in editable
    assert "batch_size" not in editable
    assert "def get_inputs" not in program  # the judge owns the inputs


def test_helpers_and_imports_the_class_uses_come_along() -> None:
    program = read_problem(HELPER, name="88_gelu").initial_program
    assert "import math" in program
    assert "def gelu(x):" in program


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (SCAN.replace("def get_inputs", "def inputs"), "get_inputs"),
        (SCAN.replace("def get_init_inputs", "def init"), "get_init_inputs"),
        (SCAN.replace("class Model(", "class Net("), "class Model"),
        (SCAN.replace("    def forward(self, x)", "    def call(self, x)"), "no forward()"),
        ("def broken(:\n", "does not parse"),
    ],
)
def test_a_file_not_in_the_format_is_refused_naming_the_file(source: str, message: str) -> None:
    with pytest.raises(KernelProblemError, match=message) as caught:
        read_problem(source, name="7_bad")
    assert str(caught.value).startswith("7_bad")


def test_a_reference_that_breaks_the_rules_is_refused() -> None:
    hostile = SCAN.replace("import torch\n", "import torch\nimport os\n", 1)
    with pytest.raises(KernelProblemError, match="7_bad"):
        read_problem(hostile, name="7_bad")


def test_spec_round_trips_through_a_bundle_and_builds_the_problem() -> None:
    settings = JudgeSettings(seeds=2, trials=5, forbid=("aten.mm",), baselines=("eager",))
    spec = make_spec(SCAN, name="91_reverse_cumsum", settings=settings)
    bundle = make_bundle(spec_files(spec))
    assert spec_of_files(bundle.files) == spec
    problem = problem_of(bundle)
    assert problem.name == bundle.name
    assert problem.initial_program == spec.initial_program
    assert [stage.name for stage in problem.stages] == ["static", "judge"]
    assert "aten.mm" in problem.description


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"seeds": 0}, "seeds"),
        ({"trials": 2}, "trials"),
        ({"baselines": ("compile",)}, "baselines"),
        ({"forbid": ("mm",)}, "forbid"),
        ({"tolerance": 2.0}, "tolerance"),
    ],
)
def test_judge_settings_refuse_unusable_values(fields: dict[str, object], message: str) -> None:
    with pytest.raises(KernelProblemError, match=message):
        JudgeSettings(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kernelbench.json": b"{}"}, "kernelbench.json"),
        ({"reference.py": b"import os\n"}, "reference|Model|os"),
        ({"initial_program.py": b"class ModelNew: pass\n"}, "initial_program.py"),
    ],
)
def test_a_kernel_bundle_that_does_not_hold_together_is_refused(
    change: dict[str, bytes], message: str
) -> None:
    files = spec_files(make_spec(SCAN, name="91_reverse_cumsum"))
    with pytest.raises(BundleError, match=message):
        make_bundle({**files, **change})
