"""The KernelBench judge on the CPU: right candidates pass and are timed, hostile ones fail.

Each hostile candidate names the hack it tries and the test asserts the defence that stops it
(its message), so removing that defence fails the test. "rules off" candidates run with the
source rules switched off, to show the judge's own layer behind them.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from codevolve.evaluator_workers.gpu.device_process import DeviceProcess  # noqa: E402
from codevolve.problems.kernelbench.device.kb_jobs import KbJobError, settings_from  # noqa: E402
from codevolve.problems.kernelbench.device.kb_judge import JudgeSettings  # noqa: E402
from tests.kb_judging import Judges  # noqa: E402
from tests.kernelbench_programs import TRITON_RELU  # noqa: E402

KB_JOBS = {"kb.judge": "codevolve.problems.kernelbench.device.kb_jobs:judge_job"}


def _reference(model: str, inputs: str, init: str = "[]", extra: str = "") -> str:
    """A reference file: ``model`` is the body of class Model, ``inputs`` get_inputs's list."""
    return (
        "import torch\nimport torch.nn as nn\n\n"
        + extra
        + "\nclass Model(nn.Module):\n"
        + textwrap.indent(textwrap.dedent(model), "    ")
        + f"\n\ndef get_inputs():\n    return {inputs}\n\n"
        + f"def get_init_inputs():\n    return {init}\n"
    )


def _candidate(body: str) -> str:
    """A candidate file: ``body`` is the body of class ModelNew."""
    return (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
        "class ModelNew(nn.Module):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )


CUMSUM_MODEL = """
def __init__(self, dim):
    super().__init__()
    self.dim = dim

def forward(self, x):
    return torch.cumsum(x, dim=self.dim)
"""
CUMSUM = _reference(CUMSUM_MODEL, "[torch.rand(16, 64)]", "[1]")
MATMUL = _reference(
    "def forward(self, a, b):\n    return torch.matmul(a, b)\n",
    "[torch.rand(32, 48), torch.rand(48, 16)]",
)
RELU = _reference("def forward(self, x):\n    return torch.relu(x)\n", "[torch.rand(16, 64)]")
ROW_SUM = _reference(
    "def forward(self, x):\n    return x.sum(dim=1, keepdim=True)\n", "[torch.rand(16, 64)]"
)
WEIGHTED = _reference(
    """
    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, x):
        return x @ self.w
    """,
    "[torch.rand(8, 16)]",
    "[torch.randn(16, 4)]",
)
LINEAR = _reference(
    """
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x):
        return self.lin(x)
    """,
    "[torch.rand(8, 16)]",
)
LOG = _reference("def forward(self, x):\n    return torch.log(x)\n", "[torch.rand(16, 64) + 0.1]")
DIAG = _reference(
    "def forward(self, a, b):\n    return torch.diag(a) @ b\n",
    "[torch.rand(512), torch.rand(512, 512)]",  # O(n^3) against O(n^2): 10x+ on many cores
)

CUMSUM_COPY = _candidate(CUMSUM_MODEL)
QUICK = JudgeSettings(trials=5, warmup=1, time=False)


@pytest.fixture(scope="module")
def loader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judges]:
    judges = Judges(tmp_path_factory.mktemp("kb"))
    yield judges
    judges.close()


def _judged(loader: Judges, reference: str, candidate: str, **settings: Any) -> dict[str, Any]:
    return loader.judge(reference, candidate, **settings)


@pytest.fixture
def rules_off(loader: Judges) -> Iterator[None]:
    """The source rules switched off (in the judge and in its runners): what the process
    boundary holds behind them."""
    loader.rules = False
    yield
    loader.rules = True


# -- right candidates ------------------------------------------------------------------------


def test_the_reference_copied_into_model_new_passes_and_is_timed(
    loader: Judges,
) -> None:
    reference = _reference(CUMSUM_MODEL, "[torch.rand(64, 4000)]", "[1]")
    reply = _judged(loader, reference, CUMSUM_COPY, trials=21, warmup=3, time=True)
    assert (reply["load_error"], reply["problem"]) == ("", "")
    assert reply["verdicts"] == {"kernelbench": "", "signed": "", "wide": ""}
    assert reply["correct"] and reply["correct_kernelbench"] and reply["ops"] == ["aten.cumsum"]
    timing = reply["timing"]
    assert timing["rounds"] == 21 and timing["compile_ms"] is None
    assert timing["candidate_p10_ms"] <= timing["candidate_ms"] <= timing["candidate_p90_ms"]
    # How close the two medians come (about 1.1 on an idle CPU) is a benchmark's figure, not a
    # test's: a busy machine moved one median 30x once.


def test_a_faster_correct_rewrite_passes_and_measures_faster(loader: Judges) -> None:
    rewrite = _candidate("def forward(self, a, b):\n    return a.unsqueeze(1) * b\n")
    reply = _judged(loader, DIAG, rewrite, trials=7, time=True)
    assert reply["correct"], reply
    assert reply["timing"]["candidate_ms"] * 3 < reply["timing"]["eager_ms"], reply["timing"]


def test_a_distribution_where_the_reference_is_not_finite_is_skipped(loader: Judges) -> None:
    reply = _judged(loader, LOG, _candidate("def forward(self, x):\n    return torch.log(x)\n"))
    assert reply["verdicts"]["kernelbench"] == ""
    assert reply["verdicts"]["signed"].startswith("skipped: the reference's own output")
    assert reply["correct"]


def test_a_forbidden_operator_is_matched_exactly(loader: Judges) -> None:
    broadcast = "def forward(self, a, b):\n    return (a.unsqueeze(2) * b.unsqueeze(0)).sum(1)\n"
    reply = _judged(loader, MATMUL, _candidate(broadcast), forbid=["aten.mm", "aten.bmm"])
    assert reply["correct"] and "aten.mm" not in reply["ops"], reply


def test_every_seed_builds_both_models_and_reports_the_first_failing_one(
    loader: Judges,
) -> None:
    reply = _judged(loader, WEIGHTED, _candidate(WEIGHTED_COPY), seeds=[3, 4])
    assert reply["correct"], reply
    zero_second = WEIGHTED_COPY.replace("self.w = w", "self.w = w if w[0, 0] != 0 else w")
    assert _judged(loader, WEIGHTED, _candidate(zero_second), seeds=[3, 4])["correct"]


def test_tensors_in_nested_input_lists_are_refilled_and_watched(loader: Judges) -> None:
    pair = _reference(
        "def forward(self, xs, k):\n    return xs[0] * k + xs[1]\n",
        "[[torch.rand(4, 4), torch.rand(4, 4)], 3]",
    )
    right = "def forward(self, xs, k):\n    return xs[0] * k + xs[1]\n"
    assert _judged(loader, pair, _candidate(right))["correct"]
    cached = "def __init__(self):\n    super().__init__()\n    self.memo = {}\n\n" + right.replace(
        "return xs[0] * k + xs[1]",
        "key = xs[1].data_ptr()\n    if key not in self.memo:\n"
        "        self.memo[key] = xs[0] * k + xs[1]\n    return self.memo[key]",
    )
    reply = _judged(loader, pair, _candidate(cached), distributions=["kernelbench"])
    assert reply["verdicts"]["kernelbench"].startswith("after new values in the same input")
    zeroes = right.replace("return", "y =") + "    xs[1].zero_()\n    return y\n"
    assert _judged(loader, pair, _candidate(zeroes))["problem"] == "ModelNew wrote into input 0"


WEIGHTED_COPY = """
def __init__(self, w):
    super().__init__()
    self.w = w

def forward(self, x):
    return x @ self.w
"""


# -- hostile candidates ----------------------------------------------------------------------


def test_returning_an_input_is_refused_even_where_its_values_are_right(loader: Judges) -> None:
    # relu of torch.rand inputs is the input itself.
    reply = _judged(loader, RELU, _candidate("def forward(self, x):\n    return x\n"))
    assert reply["problem"] == "ModelNew returned input 0 (or a view of it)"
    assert not reply["correct"] and not reply["correct_kernelbench"]


def test_a_cached_first_output_fails_once_the_same_tensors_hold_new_values(
    loader: Judges,
) -> None:
    cached = _candidate(
        """
        def __init__(self, dim):
            super().__init__()
            self.dim = dim
            self.out = None

        def forward(self, x):
            if self.out is None:
                self.out = torch.cumsum(x, dim=self.dim)
            return self.out
        """
    )
    reply = _judged(loader, CUMSUM, cached, distributions=["kernelbench"])
    assert reply["verdicts"]["kernelbench"].startswith("after new values in the same input")
    assert not reply["correct_kernelbench"]


def test_an_output_cached_by_input_address_fails_on_refilled_inputs(loader: Judges) -> None:
    by_address = _candidate(
        """
        def __init__(self, dim):
            super().__init__()
            self.dim = dim
            self.seen = {}

        def forward(self, x):
            key = x.data_ptr()
            if key not in self.seen:
                self.seen[key] = torch.cumsum(x, dim=self.dim)
            return self.seen[key]
        """
    )
    reply = _judged(loader, CUMSUM, by_address, distributions=["kernelbench"])
    assert reply["verdicts"]["kernelbench"].startswith("after new values in the same input")


def test_inputs_regenerated_from_the_seed_at_construction_fail_from_the_first_call(
    loader: Judges,
) -> None:
    # The judge seeds before ModelNew(...) as KernelBench does, but draws the inputs under seeds
    # salted with a secret of the judging: what the candidate regenerates from the seed it was
    # built under is not what it is given, even the first time.
    predicted = _candidate(
        """
        def __init__(self, dim):
            super().__init__()
            self.answer = torch.cumsum(torch.rand(16, 64), dim=dim)

        def forward(self, x):
            return self.answer.clone()
        """
    )
    reply = _judged(loader, CUMSUM, predicted, distributions=["kernelbench"])
    assert reply["verdicts"]["kernelbench"].startswith("output: "), reply["verdicts"]
    assert "elements wrong" in reply["verdicts"]["kernelbench"]


def test_a_forbidden_operator_ends_the_judging(loader: Judges) -> None:
    uses_mm = _candidate("def forward(self, a, b):\n    return torch.matmul(a, b)\n")
    reply = _judged(loader, MATMUL, uses_mm, forbid=["aten.mm"])
    assert reply["problem"] == "ModelNew ran aten.mm, which this problem forbids"
    assert not reply["correct"]


def test_writing_into_an_input_after_computing_is_caught(loader: Judges) -> None:
    zeroes = "def forward(self, x):\n    y = torch.relu(x)\n    x.zero_()\n    return y\n"
    reply = _judged(loader, RELU, _candidate(zeroes))
    assert reply["problem"] == "ModelNew wrote into input 0"


def test_computing_an_fp32_problem_in_bf16_misses_the_tolerance(loader: Judges) -> None:
    lowered = "def forward(self, a, b):\n    return (a.bfloat16() @ b.bfloat16()).float()\n"
    reply = _judged(loader, MATMUL, _candidate(lowered))
    assert "elements wrong (max abs error" in reply["verdicts"]["kernelbench"]
    assert reply["max_abs_error"] > 1e-3 and not reply["correct_kernelbench"]


def test_changing_its_own_copy_of_an_init_tensor_cannot_change_the_reference(
    loader: Judges,
) -> None:
    # Both models got the same weight tensor, they would agree on zeros.
    zeroed = _candidate(
        """
        def __init__(self, w):
            super().__init__()
            w.zero_()
            self.w = w

        def forward(self, x):
            return x @ self.w
        """
    )
    reply = _judged(loader, WEIGHTED, zeroed)
    assert "elements wrong" in reply["verdicts"]["kernelbench"]


def test_a_shape_that_broadcasts_is_wrong_before_values_are_compared(loader: Judges) -> None:
    no_keepdim = _candidate("def forward(self, x):\n    return x.sum(dim=1)\n")
    reply = _judged(loader, ROW_SUM, no_keepdim)
    assert reply["verdicts"]["kernelbench"] == "output: shape (16,), the reference's (16, 1)"


def test_a_wrong_dtype_is_wrong_even_with_the_right_values(loader: Judges) -> None:
    wider = "def forward(self, x):\n    return torch.relu(x).double()\n"
    reply = _judged(loader, RELU, _candidate(wider))
    assert reply["verdicts"]["kernelbench"] == (
        "output: dtype torch.float64, the reference's torch.float32"
    )


def test_returning_uninitialised_memory_fails(loader: Judges) -> None:
    # Before the candidate runs, nothing holds this round's answer (the reference runs after
    # it) and freed blocks of the sizes in play are NaN-filled: empty_like cannot find it.
    stale = "def forward(self, x):\n    return torch.empty_like(x)\n"
    reply = _judged(loader, RELU, _candidate(stale))
    assert "elements wrong" in reply["verdicts"]["kernelbench"] and not reply["correct"]


def test_a_kernel_right_only_for_non_negative_inputs_passes_kernelbench_only(
    loader: Judges,
) -> None:
    abs_bug = CUMSUM_COPY.replace("torch.cumsum(x,", "torch.cumsum(x.abs(),")
    reply = _judged(loader, CUMSUM, abs_bug)
    assert reply["verdicts"]["kernelbench"] == "" and reply["correct_kernelbench"]
    assert "elements wrong" in reply["verdicts"]["signed"] and not reply["correct"]


def test_a_candidate_that_raises_is_a_problem_of_one_line(loader: Judges) -> None:
    raises = "def forward(self, x):\n    raise RuntimeError('kernel failed\\nsecond line')\n"
    reply = _judged(loader, RELU, _candidate(raises))
    assert reply["problem"] == "ModelNew raised RuntimeError: kernel failed"


@pytest.mark.parametrize(
    ("body", "refusal"),
    [
        ("def forward(self, x):\n    return Model()(x)\n", "the name 'Model'"),
        ("def forward(self, x):\n    try:\n        return x + 1\n    except Exception:\n"
         "        return torch.relu(x)\n", "a try statement"),
        ("def forward(self, x):\n    with torch.cuda.stream(torch.cuda.Stream()):\n"
         "        return torch.relu(x)\n", "'stream'"),
        ("def forward(self, x):\n    torch.threading.Thread(target=print).start()\n"
         "    return torch.relu(x)\n", "'threading'"),
        ("def forward(self, x):\n    torch.manual_seed(0)\n    return torch.relu(x)\n",
         "'manual_seed'"),
        ("def forward(self, x):\n    return torch.relu(x) + 0 * torch.initial_seed()\n",
         "'initial_seed'"),
        ("def forward(self, x):\n    torch.relu = F.relu\n    return torch.relu(x)\n",
         "assigns the attribute 'relu'"),
        ("def forward(self, x):\n    return torch.relu(x).__class__\n", "'__class__'"),
    ],
    ids=["uses-Model", "try-fallback", "side-stream", "thread", "seeds-rng", "reads-seed",
         "monkeypatch", "dunder"],
)  # fmt: skip
def test_what_the_source_rules_refuse_never_runs(loader: Judges, body: str, refusal: str) -> None:
    reply = _judged(loader, RELU, _candidate(body))
    assert refusal in reply["load_error"] and reply["verdicts"]["kernelbench"] == "not judged"
    assert not reply["correct"]


def test_rules_off_a_monkeypatch_at_import_stays_in_the_candidates_process(
    loader: Judges, rules_off: None
) -> None:
    # In one process the patch made the reference return zeros too, and zeros agreed.
    patched = CUMSUM_COPY.replace(
        "class ModelNew", "torch.cumsum = lambda x, dim: torch.zeros_like(x)\n\nclass ModelNew"
    )
    reply = _judged(loader, CUMSUM, patched)
    assert "elements wrong" in reply["verdicts"]["kernelbench"] and not reply["correct"]


def test_rules_off_a_thread_that_finishes_the_output_later_delivers_the_unfinished_one(
    loader: Judges, rules_off: None
) -> None:
    threaded = _candidate(
        """
        def forward(self, x):
            out = torch.zeros_like(x)
            later = lambda: (torch.sys.modules["time"].sleep(0.2), out.copy_(torch.relu(x)))
            torch.threading.Thread(target=later, daemon=True).start()
            return out
        """
    )
    reply = _judged(loader, RELU, threaded)
    assert "elements wrong" in reply["verdicts"]["kernelbench"] and not reply["correct"]


def test_rules_off_a_global_switch_stays_in_the_candidates_process(
    loader: Judges, rules_off: None
) -> None:
    # In one process float64 as the default made the reference's Linear float64 as well.
    switched = _candidate(
        """
        def __init__(self):
            super().__init__()
            torch.set_default_dtype(torch.float64)
            self.lin = nn.Linear(16, 4)

        def forward(self, x):
            return self.lin(x.double())
        """
    )
    reply = _judged(loader, LINEAR, switched)
    assert reply["verdicts"]["kernelbench"] == (
        "output: dtype torch.float64, the reference's torch.float32"
    )
    assert torch.get_default_dtype() == torch.float32


# Each reports its process's TF32 switches in its output: 0 when both are off.
TF32_SEEN = "float(torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32)"
TF32_REPORTED = _reference(
    f"def forward(self, x):\n    return x * 0 + {TF32_SEEN}\n", "[torch.rand(8, 4)]"
)
ZEROS = _reference("def forward(self, x):\n    return x * 0\n", "[torch.rand(8, 4)]")


def test_the_reference_is_computed_without_tf32(loader: Judges) -> None:
    # torch's default lets cuDNN convolutions round to TF32; the judge's process switches it off
    # before the reference runs, so the reference reports 0 and a candidate of zeros agrees.
    torch.backends.cudnn.allow_tf32 = True
    reply = _judged(loader, TF32_REPORTED, _candidate("def forward(self, x):\n    return x * 0\n"))
    assert reply["correct"], reply
    assert not torch.backends.cudnn.allow_tf32


def test_rules_off_the_candidates_process_runs_without_tf32_unless_it_switches_it_on(
    loader: Judges, rules_off: None
) -> None:
    reports = _candidate(f"def forward(self, x):\n    return x * 0 + {TF32_SEEN}\n")
    assert _judged(loader, ZEROS, reports)["correct"]
    switched = reports.replace(
        "class ModelNew", "torch.backends.cudnn.allow_tf32 = True\n\nclass ModelNew"
    )
    reply = _judged(loader, ZEROS, switched, distributions=["kernelbench"])
    assert "elements wrong" in reply["verdicts"]["kernelbench"], reply


def test_rules_off_the_reference_model_is_out_of_the_candidates_reach(
    loader: Judges, rules_off: None
) -> None:
    # The candidate walks up its stack looking for the judge's reference model to zero it; in
    # one process it found it there. Here it returns zeros if it finds one, so a correct verdict
    # says it found none.
    reach = _candidate(
        """
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 4)

        def forward(self, x):
            frame = torch.sys._getframe(1)
            while frame is not None:
                for value in list(frame.f_locals.values()):
                    if torch.sys.modules["builtins"].hasattr(value, "ref_model"):
                        value.ref_model.lin.weight.zero_()
                        return torch.zeros(x.shape[0], 4)
                frame = frame.f_back
            return self.lin(x)
        """
    )
    reply = _judged(loader, LINEAR, reach, distributions=["kernelbench"])
    assert reply["correct"], reply


# -- the device job --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("not a dict", "dict payload"),
        ({"reference": RELU}, "'reference' and 'candidate'"),
        ({"reference": RELU, "candidate": "", "seeds": []}, "'seeds' holds 1 to"),
        ({"reference": RELU, "candidate": "", "seeds": [True]}, "list of ints"),
        ({"reference": RELU, "candidate": "", "trials": 0}, "'trials' is an int"),
        ({"reference": RELU, "candidate": "", "distributions": ["normal"]}, "distinct names"),
        ({"reference": RELU, "candidate": "", "baselines": ["eager", "eager"]}, "distinct"),
        ({"reference": RELU, "candidate": "", "time": 1}, "'time' is a bool"),
        ({"reference": RELU, "candidate": "", "tolerance": float("nan")}, "between 0 and 1"),
        ({"reference": RELU, "candidate": "", "trails": 3}, "unknown key 'trails'"),
    ],
)
def test_a_malformed_payload_is_refused_with_its_reason(payload: Any, message: str) -> None:
    with pytest.raises(KbJobError, match=message):
        settings_from(payload)


def test_a_payload_fills_its_defaults() -> None:
    reference, candidate, settings = settings_from(
        {"reference": "r", "candidate": "c", "forbid": ["aten.mm"], "tolerance": 0.001}
    )
    assert (reference, candidate) == ("r", "c")
    assert settings == JudgeSettings(forbid=("aten.mm",), tolerance=0.001)


@pytest.mark.slow
def test_a_hang_is_a_fault_and_the_next_job_gets_a_fresh_process(tmp_path: Path) -> None:
    hangs = _candidate("def forward(self, x):\n    while True:\n        pass\n")
    job = {"reference": RELU, "time": False, "distributions": ["kernelbench"]}
    right = {**job, "candidate": _candidate(RELU_COPY)}
    # the CPU even where a GPU is visible: the same job runs on either, and this test is the CPU's
    with DeviceProcess(None, jobs=KB_JOBS, env={"CODEVOLVE_KB_DEVICE": "cpu"}) as device:
        first = device.run("kb.judge", right, timeout_s=120)  # warm: torch imported, settled
        assert first.ok and first.value["correct"] and first.value["device"]["type"] == "cpu"
        hung = device.run("kb.judge", {**job, "candidate": hangs}, timeout_s=2)
        assert hung.fault and "timed out" in hung.error
        again = device.run("kb.judge", right, timeout_s=120)
        assert again.ok and again.value["correct"], again
        bad = device.run("kb.judge", {**job, "candidate": 3}, timeout_s=60)
        assert not bad.ok and not bad.fault and "strings 'reference'" in bad.error
        assert device.restarts == 1


RELU_COPY = "def forward(self, x):\n    return torch.relu(x)\n"


def test_a_triton_kernel_loads_from_its_file_and_passes(
    loader: Judges, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Triton's interpreter runs the kernel on the CPU; @triton.jit still reads its source.
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    reply = _judged(loader, RELU, TRITON_RELU)
    assert reply["correct"], reply
    assert "aten.relu" not in reply["ops"] and "aten.clamp_min" not in reply["ops"]


def test_signed_and_wide_inputs_keep_the_structure_get_inputs_built() -> None:
    from codevolve.problems.kernelbench.device.kb_inputs import SIGNED, WIDE, _redraw

    generator = torch.Generator().manual_seed(0)
    upper = torch.triu(torch.rand(64, 64) + 0.5)
    for distribution, scale in ((SIGNED, 1.0), (WIDE, 100.0)):
        values = [upper.clone(), torch.arange(5)]
        _redraw(values, distribution, generator)
        drawn, labels = values
        assert torch.equal(torch.tril(drawn, -1), torch.zeros_like(drawn))  # still triangular
        assert torch.allclose(drawn.abs(), upper * scale)
        assert 0.3 < (drawn < 0).sum() / (upper > 0).sum() < 0.7  # about half made negative
        assert torch.equal(labels, torch.arange(5))  # integers are left alone


# Compiles under Dynamo's trace only to fail there: torch.compile of it raises in seconds, before
# Inductor writes any code, while eager runs it as any reference.
NOT_COMPILABLE = _reference(
    """
    def forward(self, x):
        if torch.compiler.is_compiling():
            torch._assert(False, "this reference refuses torch.compile")
        return torch.relu(x)
    """,
    "[torch.rand(16, 64)]",
)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's imports warn
def test_a_reference_torch_compile_cannot_compile_is_judged_against_eager_with_a_note(
    loader: Judges,
) -> None:
    both = ["eager", "compile"]
    right = _candidate("def forward(self, x):\n    return x.clamp_min(0)\n")
    reply = _judged(loader, NOT_COMPILABLE, right, time=True, baselines=both)
    assert reply["correct"] and not reply["problem"], reply
    timing = reply["timing"]
    assert timing["eager_ms"] > 0 and timing["compile_ms"] is None
    assert timing["compile_error"] == (
        "compile baseline failed: compiling Model raised AssertionError: "
        "this reference refuses torch.compile"
    )
    # Not compiled again for the next candidate of the same reference: the same record.
    again = _judged(loader, NOT_COMPILABLE, right, time=True, baselines=both)
    assert again["timing"]["compile_error"] == timing["compile_error"]
    assert again["timing"]["compile_seconds"] == timing["compile_seconds"] is not None


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's imports warn
def test_the_compile_baseline_is_timed_and_the_next_process_compiles_it_from_the_cache(
    tmp_path: Path,
) -> None:
    """``torch.compile`` of the reference is timed in rounds of its own (here by Inductor on the
    CPU), its compiling in seconds of its own; a later device process (here a new runner pool)
    finds it in the worker's compile cache."""
    reference = _reference(CUMSUM_MODEL, "[torch.rand(64, 4000)]", "[1]")
    both = ["eager", "compile"]
    cache = tmp_path / "torch-compile"
    timings = []
    for sitting in ("first", "next"):
        judges = Judges(tmp_path / sitting, compile_cache=str(cache))
        try:
            reply = judges.judge(
                reference, CUMSUM_COPY, trials=5, warmup=1, time=True, baselines=both
            )
        finally:
            judges.close()
        assert reply["correct"], reply
        timing = reply["timing"]
        assert timing["compile_error"] == "", timing["compile_error"]
        assert timing["compile_ms"] is not None and timing["compile_ms"] > 0
        assert timing["compile_seconds"] is not None and timing["compile_seconds"] > 0
        assert timing["eager_ms"] > 0
        timings.append(timing)
    assert [t["compile_cache"] for t in timings] == ["miss", "hit"]
    assert any((cache / "cache" / "inductor").iterdir())
    if os.geteuid() == 0:  # the runner's uid held the files while it compiled, and no longer
        assert {p.lstat().st_uid for p in cache.rglob("*")} == {0}


def test_a_scalar_output_is_judged_and_timed(loader: Judges) -> None:
    # A loss returns a 0-dim tensor: its slot in the shared memory is poisoned and read as one.
    loss = _reference(
        "def forward(self, a, b):\n    return torch.mean((a - b) ** 2)\n",
        "[torch.rand(64, 128), torch.rand(64, 128)]",
    )
    right = _candidate("def forward(self, a, b):\n    return ((a - b) ** 2).mean()\n")
    reply = _judged(loader, loss, right, time=True, trials=3)
    assert reply["correct"] and reply["timing"]["candidate_ms"] > 0, reply
    wrong = _candidate("def forward(self, a, b):\n    return ((a - b) ** 2).sum()\n")
    assert "elements wrong" in _judged(loader, loss, wrong)["verdicts"]["kernelbench"]


def test_a_batch_answer_in_short_form_expands_or_is_refused() -> None:
    from codevolve.problems.kernelbench.device.kb_timing import _outputs_of

    facts = {"dtype": "torch.float32", "shape": [4], "stride": [1], "device": "cuda"}
    alike = {"facts": facts, "handles": ["ab" * 64], "places": [[0, 0], [0, 512]]}
    outputs = _outputs_of({"alike": alike}, 2)
    assert [o["tensor"]["offset"] for o in outputs] == [0, 512]
    assert all(o["tensor"]["ipc"] == "ab" * 64 for o in outputs)
    assert _outputs_of({"alike": {**alike, "places": [[1, 0], [0, 0]]}}, 2) is None  # no handle 1
    assert _outputs_of({"alike": alike}, 3) is None  # a batch of 3 answered with 2
    assert _outputs_of({"outputs": [1, 2]}, 2) == [1, 2]  # the long form, checked later


# -- memory ----------------------------------------------------------------------------------


def test_a_problem_whose_inputs_do_not_fit_is_a_reference_failure_not_a_crash(
    loader: Judges, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codevolve.evaluator_workers.gpu.shared_tensors import SharingError
    from codevolve.problems.kernelbench.device import kb_judge

    def full(nbytes: int, device: str) -> Any:
        raise SharingError("cuMemAlloc failed with CUDA driver error 2")

    monkeypatch.setattr(kb_judge.Arena, "create", full)
    reply = _judged(loader, RELU, _candidate("def forward(self, x):\n    return torch.relu(x)\n"))
    assert not reply["correct"]
    assert reply["load_error"].startswith("reference: the problem's inputs"), reply
    assert "do not fit: cuMemAlloc failed" in reply["load_error"], reply


def test_reference_runners_of_other_problems_end_while_memory_runs_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from codevolve.problems.kernelbench.device import kb_baselines

    class Held:
        def __init__(self) -> None:
            self.closed = False

        def close(self, *, arena: bool = False) -> None:
            self.closed = arena

    runners = kb_baselines._ReferenceRunners()
    held = {(digest, 0, "cuda", 1, 0): Held() for digest in ("a", "b", "c", "d")}
    runners._remotes.update(held)  # type: ignore[arg-type]
    short = iter([True, True, False])  # memory frees up once two have ended
    monkeypatch.setattr(kb_baselines, "_memory_short", lambda device, share: next(short))
    runners.make_room("cuda", keep="a")
    assert [key[0] for key, h in held.items() if h.closed] == ["b", "c"]
    assert [key[0] for key in runners._remotes] == ["a", "d"]
