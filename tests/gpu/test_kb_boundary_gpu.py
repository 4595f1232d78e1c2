"""The KernelBench judge on a real GPU: the candidate in a caged runner with its own CUDA
context, inputs handed over by CUDA IPC, outputs read from the runner's memory, the clock in the
judge. Skipped without torch, Triton or a CUDA device; run with ``pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings  # noqa: E402
from codevolve.problems.kernelbench.device.kb_baselines import REFERENCE_RUNNERS  # noqa: E402
from codevolve.problems.kernelbench.device.kb_judge import JudgeSettings, judge  # noqa: E402
from codevolve.problems.kernelbench.device.kb_loader import KbLoader  # noqa: E402
from tests.kernelbench_programs import TRITON_RELU  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def _reference(forward: str, inputs: str) -> str:
    return (
        f"{HEAD}class Model(nn.Module):\n    def forward(self, *xs):\n        return {forward}\n\n"
        f"def get_inputs():\n    return {inputs}\n\ndef get_init_inputs():\n    return []\n"
    )


def _candidate(body: str, top: str = "") -> str:
    return (
        HEAD
        + textwrap.dedent(top)
        + "\nclass ModelNew(nn.Module):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
    )


RELU = _reference("torch.relu(xs[0])", "[torch.rand(4096, 4096)]")
MATMUL = _reference(
    "torch.matmul(xs[0], xs[1])", "[torch.randn(1024, 1024), torch.randn(1024, 1024)]"
)


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    loose = RunnerPool(RunnerSettings(device="cuda", rules=False), warm=1)
    strict = RunnerPool(RunnerSettings(device="cuda"), warm=1)
    yield {
        "loader": KbLoader(tmp_path_factory.mktemp("kb-gpu"), environ={}),
        "loose": loose,
        "strict": strict,
    }
    REFERENCE_RUNNERS.close()
    loose.close()
    strict.close()


def _judge(
    pools: dict[str, Any], reference: str, candidate: str, *, rules: bool = True, **settings: Any
) -> dict[str, Any]:
    fields = {"trials": 10, "warmup": 2, **settings}
    for key in ("seeds", "distributions", "forbid", "baselines"):
        if key in fields:
            fields[key] = tuple(fields[key])
    runners = pools["strict"] if rules else pools["loose"]
    return judge(
        reference,
        candidate,
        JudgeSettings(**fields),
        device="cuda",
        loader=pools["loader"],
        runners=runners,
    )


def test_a_triton_candidate_passes_in_its_own_process_and_is_timed(pools: dict[str, Any]) -> None:
    reply = _judge(pools, RELU, TRITON_RELU)
    assert reply["correct"], reply
    timing = reply["timing"]
    assert timing["candidate_ms"] > 0 and timing["eager_ms"] > 0 and timing["batch"] >= 1
    assert reply["isolation"]["seccomp"], reply["isolation"]
    print("isolation:", reply["isolation"], "timing:", timing)


def test_the_references_own_computation_passes_when_the_reference_is_slow(
    pools: dict[str, Any],
) -> None:
    """The judge's reference call (milliseconds here) is still running on its stream when the
    next inputs are staged behind it: the runner, in another CUDA context, must still read the
    new values (without the judge's wait it read the previous round's: every element wrong)."""
    slow = _reference(
        "torch.matmul(xs[0], xs[1])", "[torch.randn(4096, 4096), torch.randn(4096, 4096)]"
    )
    same = _candidate("def forward(self, a, b):\n    return torch.matmul(a, b)\n")
    reply = _judge(pools, slow, same, time=False)
    assert reply["correct"], reply


def test_zeros_for_a_matrix_product_are_wrong(pools: dict[str, Any]) -> None:
    reply = _judge(
        pools, MATMUL, _candidate("def forward(self, a, b):\n    return a @ b * 0\n"), time=False
    )
    assert not reply["correct"] and "elements wrong" in reply["verdicts"]["kernelbench"], reply


def test_tf32_switched_on_in_its_process_does_not_reach_the_reference(
    pools: dict[str, Any],
) -> None:
    # In one process the switch lowered the reference's precision too, and both agreed.
    top = "torch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True\n"
    reply = _judge(
        pools,
        MATMUL,
        _candidate("def forward(self, a, b):\n    return a @ b\n", top),
        rules=False,
        time=False,
    )
    assert not reply["correct"], reply
    assert not torch.backends.cuda.matmul.allow_tf32


CONV = (
    HEAD
    + """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 128, 3, padding=1)

    def forward(self, x):
        return self.conv(x)

def get_inputs():
    return [torch.rand(8, 64, 64, 64)]

def get_init_inputs():
    return []
"""
)
CONV_INIT = """
def __init__(self):
    super().__init__()
    self.conv = nn.Conv2d(64, 128, 3, padding=1)
"""


def test_a_convolution_computed_exactly_passes_against_the_fp32_reference(
    pools: dict[str, Any],
) -> None:
    # torch's default lets cuDNN round a convolution's inputs to TF32; the judge switches that
    # off (kb_precision.py), so the exact answer (fp64, rounded once) is right and TF32 is not.
    exact = (
        CONV_INIT
        + """
def forward(self, x):
    c = self.conv
    return F.conv2d(x.double(), c.weight.double(), c.bias.double(), padding=1).float()
"""
    )
    reply = _judge(pools, CONV, _candidate(exact), time=False)
    assert reply["correct"], reply
    print("exact fp64 convolution: max abs error", reply["max_abs_error"])
    tf32 = CONV_INIT + "\ndef forward(self, x):\n    return self.conv(x)\n"
    top = "torch.backends.cudnn.allow_tf32 = True\n"
    reply = _judge(pools, CONV, _candidate(tf32, top), rules=False, time=False)
    assert not reply["correct"], reply
    print("TF32 convolution:", reply["verdicts"])


HEAVY = """
def forward(self, a, b):
    out = a @ b
    for _ in range(40):
        out = torch.tanh(out @ b) * 0 + a @ b
    return out
"""


def test_an_answer_sent_before_the_gpu_work_ends_gains_nothing(pools: dict[str, Any]) -> None:
    honest = _judge(pools, MATMUL, _candidate(HEAVY), rules=False, distributions=["kernelbench"])
    assert honest["correct"], honest
    # No synchronisation: the runner answers while its kernels still run.
    top = "torch.cuda.synchronize = lambda *args, **kwargs: None\n"
    early = _judge(
        pools, MATMUL, _candidate(HEAVY, top), rules=False, distributions=["kernelbench"]
    )
    print("honest:", honest["timing"], "early:", early["timing"], early["problem"])
    if early["correct"]:
        assert early["timing"]["candidate_ms"] > 0.8 * honest["timing"]["candidate_ms"], (
            honest,
            early,
        )


def test_a_forbidden_operator_through_a_sibling_is_refused(pools: dict[str, Any]) -> None:
    candidate = _candidate("def forward(self, a, b):\n    return F.linear(a, b.t())\n")
    reply = _judge(pools, MATMUL, candidate, time=False, forbid=["aten.mm"])
    assert "which this problem forbids" in reply["problem"], reply


def test_the_runner_sees_one_gpu_and_no_secret(pools: dict[str, Any]) -> None:
    body = """
    def forward(self, x):
        env = sorted(torch.sys.modules["os"].environ)
        raise RuntimeError(f"gpus={torch.cuda.device_count()} env={' '.join(env)}")
    """
    reply = _judge(pools, RELU, _candidate(body), rules=False, time=False)
    assert "gpus=1" in reply["problem"], reply
    assert "CODEVOLVE" not in reply["problem"].split("env=", 1)[1], reply


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's imports warn
def test_the_compile_baseline_compiles_in_its_cage_and_the_next_process_loads_it(
    pools: dict[str, Any], tmp_path: Path
) -> None:
    """torch.compile of the reference (Inductor and Triton inside a caged trusted runner), its
    compiling timed apart; a later device process (a new pool) loads it from the cache."""
    cache = tmp_path / "torch-compile"
    timings = []
    for _sitting in ("first", "next"):
        pool = RunnerPool(RunnerSettings(device="cuda", compile_cache=str(cache)), warm=1)
        try:
            reply = judge(
                RELU,
                TRITON_RELU,
                JudgeSettings(trials=10, warmup=2, baselines=("eager", "compile")),
                device="cuda",
                loader=pools["loader"],
                runners=pool,
            )
        finally:
            REFERENCE_RUNNERS.close()
            pool.close()
        assert reply["correct"], reply
        timing = reply["timing"]
        assert timing["compile_error"] == "", timing
        assert timing["compile_ms"] > 0 and timing["compile_seconds"] > 0, timing
        timings.append(timing)
    for timing in timings:
        print("compile:", timing["compile_seconds"], "s,", timing["compile_cache"], timing)
    assert [t["compile_cache"] for t in timings] == ["miss", "hit"]
    assert any((cache / "cache" / "triton").iterdir())  # Inductor's kernels, by Triton
