"""The ``fuse`` and ``epilogue`` children of Level-2-style problems before the real judge on
the CPU (Triton's interpreter in the candidate's runner): right fusions pass on every input
distribution, with their kernels doing the work, and a fusion wrong by a little fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.kb_judging import Judges  # noqa: E402
from tests.kernelbench_level2 import (  # noqa: E402
    CONV_CHANNEL_MIN,
    CONV_OPERANDS,
    FEATURE_SUM,
    LINEAR_TAIL,
    POOL_THEN_CHANNELS,
    SOFTMAX_LOGSUMEXP,
    problem,
)
from tests.unit.problems.kernelbench.test_kb_chain import child  # noqa: E402

# aten operators of the tails: a child whose kernels ran calls none of these (a launcher that
# declined its inputs would have run the parent's forward)
TAIL_OPS = {"aten.gelu", "aten.clamp", "aten.tanh", "aten.min", "aten.sigmoid", "aten._softmax"}
TAIL_OPS |= {"aten.logsumexp", "aten.mean", "aten.sum", "aten.mul", "aten.add", "aten.addmm"}


@pytest.fixture(scope="module")
def judges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judges]:
    found = Judges(tmp_path_factory.mktemp("kb2"))
    yield found
    found.close()


def judged(judges: Judges, reference: str, candidate: str) -> dict[str, Any]:
    return judges.judge(reference, candidate, seeds=[1, 2])


def fused(kind: str, reference: str) -> str:
    source = child(kind, reference)
    assert source is not None, f"{kind} did not apply"
    return source


@pytest.mark.parametrize(
    ("name", "reference", "kept"),
    [
        ("linear_tail", LINEAR_TAIL, {"aten.addmm"}),  # the Linear kept as the library's
        ("conv_channel_min", CONV_CHANNEL_MIN, {"aten.convolution"}),
        ("softmax_logsumexp", SOFTMAX_LOGSUMEXP, {"aten.addmm", "aten.native_group_norm"}),
        ("pool_then_channels", POOL_THEN_CHANNELS, {"aten.convolution"}),
        ("conv_operands", CONV_OPERANDS, {"aten.convolution"}),
    ],
)
def test_fused_children_pass_the_judge_with_their_kernels_doing_the_tail(
    judges: Judges, name: str, reference: str, kept: set[str]
) -> None:
    reply = judged(judges, reference, fused("fuse", reference))
    assert reply["correct"], (name, reply)
    assert kept <= set(reply["ops"])
    left = TAIL_OPS - kept
    if name == "pool_then_channels":  # its second-level log-sum-exp and scale: one kernel too
        left -= {"aten.add"}
    assert not left & set(reply["ops"]), (name, reply["ops"])


def test_a_sum_over_linear_features_passes_as_a_matrix_vector_product(judges: Judges) -> None:
    reply = judged(judges, FEATURE_SUM, fused("fuse", FEATURE_SUM))
    assert reply["correct"], reply
    assert "aten.addmm" not in reply["ops"] and "aten.bmm" in reply["ops"]  # chunked dots


def test_the_epilogue_child_passes_with_no_library_product(judges: Judges) -> None:
    reply = judged(judges, LINEAR_TAIL, fused("epilogue", LINEAR_TAIL))
    assert reply["correct"], reply
    assert not {"aten.addmm", "aten.mm", "aten.gelu"} & set(reply["ops"]), reply["ops"]


def test_inputs_a_launcher_declines_fall_back_to_the_parent(judges: Judges) -> None:
    # a 3-D input to the Linear: the kernel was built for its 2-D result
    reference = LINEAR_TAIL.replace(
        "torch.rand(batch_size, in_features)", "torch.rand(batch_size, 3, in_features)"
    )
    reply = judged(judges, reference, fused("fuse", reference))
    assert reply["correct"], reply
    assert "aten.gelu" in reply["ops"]  # the parent's forward ran


@pytest.mark.parametrize(
    ("reference", "right", "wrong"),
    [
        # the channel minimum taken as a maximum
        (CONV_CHANNEL_MIN, "a0 = tl.minimum(a0,", "a0 = tl.maximum(a0,"),
        # the scale off by a tenth of a percent
        (LINEAR_TAIL, "(x0 * p0)", "(x0 * (p0 * 1.001))"),
        # the softmax's log-sum-exp taken without its running maximum
        (SOFTMAX_LOGSUMEXP, "b0 + tl.log(", "tl.log("),
    ],
)
def test_a_wrong_fusion_fails(judges: Judges, reference: str, right: str, wrong: str) -> None:
    source = fused("fuse", reference)
    assert right in source, right
    reply = judged(judges, reference, source.replace(right, wrong))
    assert not reply["correct"] and not reply["problem"], reply
    assert any(v and not v.startswith("skipped") for v in reply["verdicts"].values())


def test_a_convolution_run_without_its_bias_needs_the_kernel_to_add_it(judges: Judges) -> None:
    source = fused("fuse", CONV_CHANNEL_MIN)
    dropped = ", channel_bias(self.conv, 4))"
    assert dropped in source
    # the kernel's bias operand replaced by zeros: the convolution's bias is lost
    wrong = source.replace(dropped, ", torch.zeros_like(self.conv.bias).view(-1, 1, 1))")
    reply = judged(judges, CONV_CHANNEL_MIN, wrong)
    assert not reply["correct"] and not reply["problem"], reply


def test_a_dimension_assumed_from_a_constant_is_checked_when_forward_runs(
    judges: Judges, tmp_path: Path
) -> None:
    del tmp_path
    reference = problem(
        "self.conv = nn.Conv2d(3, 4, 3)\nself.dim = dim",
        "x = self.conv(x)\nx = torch.min(x, dim=self.dim)[0]\nreturn torch.tanh(x) * 2.0",
        "batch_size = 2\ndim = 2",
        "torch.rand(batch_size, 3, 9, 8)",
        "dim",
    )
    source = fused("fuse", reference)
    assert "if not (self.dim == 2" in source
    assert judged(judges, reference, source)["correct"]
    # built with another dim than the constant says: the guard sends it to the parent
    other = reference.replace("return [dim]", "return [3]")
    reply = judged(judges, other, source)
    assert reply["correct"] and "aten.tanh" in reply["ops"], reply


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fused_kernels_compile_for_hopper(tmp_path: Path) -> None:
    """The launches the interpreter saw, compiled for sm_90 (Triton compiles without a GPU): a
    kernel that would not build on an H100/H200 fails here."""
    import json

    from tests.unit.problems.kernelbench.test_kb_mutations import COMPILER, DRIVER, _child_process

    cases = []
    children = [
        ("fuse", r)
        for r in (CONV_CHANNEL_MIN, SOFTMAX_LOGSUMEXP, POOL_THEN_CHANNELS, CONV_OPERANDS)
    ]
    children += [("fuse", LINEAR_TAIL), ("epilogue", LINEAR_TAIL), ("fuse", FEATURE_SUM)]
    for index, (kind, reference) in enumerate(children):
        candidate = tmp_path / f"candidate{index}.py"
        candidate.write_text(fused(kind, reference))
        namespace: dict[str, Any] = {}
        exec(compile(reference, "reference", "exec"), namespace)  # our own test problem
        torch.manual_seed(0)
        data = tmp_path / f"case{index}.pt"
        torch.save((namespace["get_init_inputs"](), namespace["get_inputs"](), {}), data)
        cases.append(
            {
                "name": f"case{index}",
                "candidate": str(candidate),
                "data": str(data),
                "out": str(tmp_path / f"case{index}.out"),
            }
        )
    manifest = tmp_path / "cases.json"
    manifest.write_text(json.dumps(cases))
    _child_process(tmp_path, DRIVER, "driver.py", manifest)
    for case in cases:
        out = torch.load(case["out"])
        assert "error" not in out, out.get("error")
        assert out["launches"], case["name"]
        case["launches"] = out["launches"]
    manifest.write_text(json.dumps(cases))
    compiled = json.loads(_child_process(tmp_path, COMPILER, "compiler.py", manifest))
    for case in cases:
        assert len(compiled[case["name"]]) == len(case["launches"]), case["name"]
