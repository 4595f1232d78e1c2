"""The Level-2 chain reader and its plan: what is fused, what is kept as written, and why.

Programs are read, never run: these tests look at the steps and kernels the reader makes of
Level-2-style forwards (the judge runs the children in device/test_kb_level2_judge.py)."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from codevolve.core.kernel_rules import check_model_new
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.kernelbench.chain import read_chain
from codevolve.problems.kernelbench.chain_steps import Chain, Launch, Let
from codevolve.problems.kernelbench.chain_values import simplify
from codevolve.problems.kernelbench.format import read_problem
from codevolve.problems.kernelbench.fuse import plan
from codevolve.problems.kernelbench.mutations import kernel_mutations
from codevolve.problems.kernelbench.tree import Const, Input, Op, op
from codevolve.prompt_sampler.search_replace import apply_answer
from tests.kernelbench_level2 import (
    CONV_CHANNEL_MIN,
    FEATURE_SUM,
    LINEAR_TAIL,
    POOL_THEN_CHANNELS,
    SOFTMAX_LOGSUMEXP,
    problem,
)

MUTATIONS = {m.kind: m for m in kernel_mutations()}


def chain_of(reference: str) -> Chain:
    program = read_problem(reference, name="1_Test").initial_program
    chain = read_chain(ast.parse(program))
    assert chain is not None
    return chain


def child(kind: str, reference: str) -> str | None:
    return child_of(kind, read_problem(reference, name="1_Test").initial_program)


def child_of(kind: str, program: str) -> str | None:
    parent = ProgramView(id="parent", source=program, score=1.0)
    prompt = Prompt("job", "kernelbench", 0, 0, parent, (), {}, context="", text="")
    answer = MUTATIONS[kind].propose(prompt, np.random.default_rng(0))
    if answer is None:
        return None
    return apply_answer(program, answer).source  # type: ignore[union-attr]


def lets(chain: Chain) -> list[str]:
    return [s.text for s in chain.steps if isinstance(s, Let)]


def test_a_linear_and_its_elementwise_tail_are_one_kernel_after_the_library_call() -> None:
    chain = chain_of(LINEAR_TAIL)
    assert lets(chain) == ["t_0 = self.gemm(x)"]
    (kernel,) = chain.kernels
    assert (kernel.main, kernel.ops, kernel.rank, kernel.axes) == ("t_0", 4, 2, ())
    assert [o.source for o in kernel.operands] == ["self.bias"]
    assert kernel.params == ("self.scale",)
    assert chain.result == chain.steps[-1].target


def test_a_channel_reduction_reads_its_dimension_and_keeps_it() -> None:
    (kernel,) = chain_of(CONV_CHANNEL_MIN).kernels
    assert kernel.axes == (1,) and not kernel.full and kernel.present == (0, 1, 2, 3)
    assert [r.kind for r in kernel.reductions] == ["min"]
    # the tail after the reduction reads only the statistic
    assert all(not (isinstance(n, Input) and n.slot == 0) for n in _leaves(kernel.out))


def test_softmax_then_logsumexp_are_nested_statistics_of_one_kernel() -> None:
    chain = chain_of(SOFTMAX_LOGSUMEXP)
    assert lets(chain) == ["t_0 = self.linear(x)", "t_1 = self.norm(t_0)"]
    (kernel,) = chain.kernels
    assert [r.kind for r in kernel.reductions] == ["lse", "lse"]
    assert kernel.axes == (1,) and [o.source for o in kernel.operands] == ["self.shift"]


def test_a_reduction_over_other_dimensions_starts_a_second_kernel() -> None:
    chain = chain_of(POOL_THEN_CHANNELS)
    first, second = chain.kernels
    assert first.axes == (2, 3) and [r.kind for r in first.reductions] == ["sum"]
    assert first.operands[0].present == (0, 1, 2, 3)  # the bias, at the pooled shape
    assert second.main == "t_1" and second.axes == (1,) and second.ops == 2


def test_reductions_over_a_dimension_of_size_one_are_the_identity() -> None:
    reference = problem(
        "self.linear = nn.Linear(8, 4)",
        """
        x = self.linear(x)
        x = torch.sum(x, dim=1, keepdim=True)
        x = torch.max(x, dim=1, keepdim=True)[0]
        x = torch.logsumexp(x, dim=1, keepdim=True)
        return torch.softmax(x, dim=1)
        """,
        "batch_size = 2",
        "torch.rand(batch_size, 8)",
        "",
    )
    (kernel,) = chain_of(reference).kernels
    assert [r.kind for r in kernel.reductions] == ["sum"]
    s = _stat(kernel.out)
    assert kernel.out == op("add", op("sub", s, s), Const(1.0))  # softmax over one: x - x + 1


def test_what_the_reader_does_not_fuse_is_kept_as_written() -> None:
    reference = problem(
        """
        self.conv = nn.Conv2d(3, 4, 3)
        self.dropout = nn.Dropout(0.2)
        self.skip = nn.Dropout(0.0)
        """,
        """
        x = self.conv(x)
        b, c, h, w = x.shape
        x = x.view(b, c, -1)
        x = torch.relu(x) * 2.0
        x = self.skip(x)
        x = self.dropout(x)
        return x.view(b, c, h, w)
        """,
        "batch_size = 2",
        "torch.rand(batch_size, 3, 8, 8)",
        "",
    )
    chain = chain_of(reference)
    assert lets(chain) == [
        "t_0 = self.conv(x)",
        "b, c, h, w = t_0.shape",
        "t_1 = t_0.view(b, c, -1)",
        "t_3 = self.dropout(t_2)",  # p > 0 in training: random, kept
        "t_4 = t_3.view(b, c, h, w)",
    ]
    (kernel,) = chain.kernels  # relu and the scale; the p = 0 dropout is the identity
    assert kernel.main == "t_1" and kernel.ops == 2


def test_an_attribute_dimension_is_assumed_from_the_module_constant_and_checked() -> None:
    reference = problem(
        "self.conv = nn.Conv3d(3, 4, 3)\nself.dim = dim",
        "x = self.conv(x)\nx = torch.min(x, dim=self.dim)[0]\nreturn torch.tanh(x) * 2.0",
        "batch_size = 2\ndim = 2",
        "torch.rand(batch_size, 3, 6, 7, 8)",
        "dim",
    )
    chain = chain_of(reference)
    assert chain.guards == ("self.dim == 2",)
    (kernel,) = chain.kernels
    assert kernel.axes == (2,) and kernel.present == (0, 1, 3, 4)


def test_a_single_operation_stays_the_torch_call_it_is() -> None:
    reference = problem(
        "self.linear = nn.Linear(8, 4)",
        "x = self.linear(x)\nreturn torch.relu(x)",
        "batch_size = 2",
        "torch.rand(batch_size, 8)",
        "",
    )
    chain = chain_of(reference)
    assert not chain.kernels and lets(chain)[-1] == "t_1 = torch.relu(t_0)"
    assert child("fuse", reference) is None


def test_plan_moves_a_convolution_bias_into_the_kernel_and_writes_in_place() -> None:
    planned = plan(chain_of(CONV_CHANNEL_MIN))
    assert lets(planned)[0] == (
        "t_0 = F.conv2d(x, self.conv.weight, None, self.conv.stride, self.conv.padding, "
        "self.conv.dilation, self.conv.groups)"
    )
    (kernel,) = planned.kernels
    assert kernel.operands[-1].source == "channel_bias(self.conv, 4)"
    assert "self.conv.padding_mode == 'zeros'" in planned.guards
    assert not kernel.in_place  # its output is the reduced shape
    (linear,) = plan(chain_of(LINEAR_TAIL)).kernels
    assert linear.in_place  # the Linear's result: a temporary nothing else reads


def test_plan_turns_a_sum_over_linear_features_into_a_matrix_vector_product() -> None:
    planned = plan(chain_of(FEATURE_SUM))
    assert not any("self.linear(x)" in text for text in lets(planned))
    (text,) = [t for t in lets(planned) if "feature_sum(" in t]
    assert "feature_sum(x, self.linear.weight, self.linear.bias, 0.5, 0.0, mean=False" in text
    assert "keep=True" in text
    (kernel,) = planned.kernels  # the scaling, on the (batch, 1) sums
    assert kernel.axes == () and kernel.params == ("self.scaling_factor",)


def test_exact_simplifications() -> None:
    x = Input(0)
    assert simplify(op("add", x, x)) == op("mul", Const(2.0), x)
    two_clamps = op("max", op("max", x, Const(-1.0)), Const(0.5))
    assert simplify(two_clamps) == op("max", x, Const(0.5))
    assert simplify(op("mul", Const(2.0), Const(3.0))) == Const(6.0)


@pytest.mark.parametrize(
    "reference", [LINEAR_TAIL, CONV_CHANNEL_MIN, SOFTMAX_LOGSUMEXP, POOL_THEN_CHANNELS, FEATURE_SUM]
)
def test_fuse_children_keep_the_rules_and_the_parent_as_fallback(reference: str) -> None:
    source = child("fuse", reference)
    assert source is not None and check_model_new(source) == ""
    assert "# codevolve-template: fused" in source and "def forward_torch(self, x):" in source
    assert child_of("fuse", source) is None and child_of("template", source) is None


def test_epilogue_applies_to_a_linear_with_an_elementwise_tail_only() -> None:
    source = child("epilogue", LINEAR_TAIL)
    assert source is not None and check_model_new(source) == ""
    assert "linear_fused0(x, self.gemm.weight, self.gemm.bias, self.bias, self.scale)" in source
    assert child("epilogue", CONV_CHANNEL_MIN) is None  # a convolution
    assert child("epilogue", SOFTMAX_LOGSUMEXP) is None  # a norm between the product and tail


def test_tune_moves_the_fused_kernels_constants() -> None:
    source = child("fuse", CONV_CHANNEL_MIN)
    assert source is not None
    prompt = Prompt(
        "job", "kernelbench", 0, 0, ProgramView("p", source, 1.0), (), {}, context="", text=""
    )
    moved = {
        line.split(" = ")[0]
        for seed in range(30)
        if (answer := MUTATIONS["tune"].propose(prompt, np.random.default_rng(seed))) is not None
        for line in answer.split("\n")
        if line.startswith("F0_")
    }
    assert {"F0_COL_BLOCK_R", "F0_COL_BLOCK_I", "F0_ROW_BLOCK"} <= moved


def _leaves(node: object) -> list[object]:
    if isinstance(node, Op):
        return [leaf for arg in node.args for leaf in _leaves(arg)]
    return [node]


def _stat(node: object) -> object:
    from codevolve.problems.kernelbench.tree import Stat

    return next(n for n in _leaves(node) if isinstance(n, Stat))


def test_launches_name_the_steps_they_bind() -> None:
    chain = chain_of(LINEAR_TAIL)
    assert [type(s).__name__ for s in chain.steps] == ["Let", "Launch"]
    assert isinstance(chain.steps[1], Launch) and chain.steps[1].target == "t_1"


def test_fuse_skips_a_product_it_could_skip_only_some_of_the_time() -> None:
    program = read_problem(FEATURE_SUM, name="1_Test").initial_program
    parent = ProgramView(id="parent", source=program, score=1.0)
    prompt = Prompt("job", "kernelbench", 0, 0, parent, (), {}, context="", text="")
    answers = [
        MUTATIONS["fuse"].propose(prompt, np.random.default_rng(seed)) or "" for seed in range(20)
    ]
    summed = sum("feature_sum(" in answer for answer in answers)
    assert 0 < summed < 20  # the judge decides whether the reference's rounding allows it


def test_a_parameter_that_would_widen_the_value_is_left_to_torch() -> None:
    reference = problem(
        "self.gemm = nn.Linear(8, 4)\nself.bias = nn.Parameter(torch.randn(bias_shape))",
        """
        x = self.gemm(x)
        x = torch.min(x, dim=1, keepdim=True)[0]
        return x + self.bias
        """,
        "batch_size = 2\nbias_shape = (1, 4, 1, 1)",
        "torch.rand(batch_size, 8)",
        "",
    )
    chain = chain_of(reference)
    assert not chain.kernels  # the minimum alone, then the widening addition, both torch's
    assert chain.result == "t_1 + self.bias"
