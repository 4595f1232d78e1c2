"""Hostile candidates of classes the two boundary corpora did not hold yet, against the real
judging path on the CPU (KernelBench's judge and gemm-kernel-gpu's), source rules off.

Each test names what a search that wants a high score would try (forge correctness, forge
speed, break the judge) and asserts that it fails or is scored honestly. The first ones found
holes, fixed in the judge: a process the candidate forked kept running while its runner was
"stopped" (it could read staged inputs before the clock and write outputs after it), a reply
nested thousands deep crashed the judge instead of failing the candidate, and one written
tensor could be claimed for two outputs of a tuple.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.kb_judging import RELU, Judges, hostile_model_new  # noqa: E402
from tests.kernel_judging import KernelJudges, hostile_launch  # noqa: E402

KB_EXTRA = """
def frame_of(name):
    f = SYS._getframe()
    while f is not None and f.f_code.co_name != name:
        f = f.f_back
    return f


def timed():
    # A timed batch calls the model without the checked call's operator recorder.
    return frame_of("go").f_locals.get("recorder") is None


"""
# As RELU, but the reference spends a few milliseconds per call: a timed batch holds one call
# and the judge's check of it takes that long.
SLOW_RELU = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.randn(512, 512) / 32

    def forward(self, x):
        return torch.relu(x) + (self.w @ self.w @ self.w)[0, 0] * 0

def get_inputs():
    return [torch.rand(16, 64)]

def get_init_inputs():
    return []
"""
TWICE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x), torch.relu(x)

def get_inputs():
    return [torch.rand(16, 64)]

def get_init_inputs():
    return []
"""
AFFINE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1

def get_inputs():
    return [torch.rand(16, 64)]

def get_init_inputs():
    return []
"""
TOTAL = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.sum()

def get_inputs():
    return [torch.rand(16, 64)]

def get_init_inputs():
    return []
"""
NESTED_REPLY = """
def forge():
    os = mod("os")
    body = b"[" * 200000
    os.write(own_socket(), B.len(body).to_bytes(4, "big") + body)
    mod("time").sleep(0.5)
"""


@pytest.fixture(scope="module")
def judges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judges]:
    judges = Judges(tmp_path_factory.mktemp("red-team"))
    judges.rules = False
    yield judges
    judges.close()


@pytest.fixture(scope="module")
def kernels() -> Iterator[KernelJudges]:
    kernels = KernelJudges()
    kernels.rules = False
    yield kernels
    kernels.close()


def _model_new(forward: str, *, top: str = "") -> str:
    return hostile_model_new(forward, top=top, prelude=KB_EXTRA)


def _wrong(reply: dict[str, Any]) -> str:
    assert not reply["correct"], reply
    wrong = [v for v in reply["verdicts"].values() if v]
    assert reply["problem"] or wrong, reply
    return str(reply["problem"] or wrong[0])


def _gone(pid: int) -> bool:
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


# -- forged speed: a helper process outside the clock (a hole, fixed) --------------------------

# From its second timed batch on, the runner answers at once without delivering anything; a
# process it forked watches the arena and writes each output 3 ms after the judge poisoned the
# slot: the work done outside the clock. Before the fix the judge stopped only the runner's
# own process: the helper wrote while the judge computed the reference for its check, and the
# candidate was judged correct at 0.33 ms per call against 5.9 ms for the reference.
LATE_HELPER = """
STATE = {"timed": 0, "skip": False}


def helper(role):
    clock = mod("time")
    pairs = [(args[0], role.arena.tensor(slots[0])) for args, slots in role.staged]
    while True:
        for x, slot in pairs:
            if bool(torch.isnan(slot[0, 0])):
                clock.sleep(0.003)
                slot.copy_(torch.relu(x))
        clock.sleep(0.0002)


def deliver_nothing(self, output, slots):
    if not STATE["skip"]:
        return ORIGINAL(self, output, slots)
    return {"tensor": {"dtype": "torch.float32", "shape": [16, 64], "stride": [64, 1],
        "device": "cpu", "layout": "torch.strided", "type": "Tensor", "slot": 0}}


ROLE = mod("codevolve.problems.kernelbench.device.kb_role")
ORIGINAL = ROLE.ModelRole._deliver
ROLE.ModelRole._deliver = deliver_nothing
"""


def test_a_forked_helper_that_writes_outputs_after_the_answer_is_stopped_with_the_runner(
    judges: Judges,
) -> None:
    forward = """
    def forward(self, x):
        if not timed():
            STATE["skip"] = False
            return torch.relu(x)
        role = frame_of("go").f_locals["self"]
        if STATE["timed"] == 0 and mod("os").fork() == 0:
            try:
                helper(role)
            finally:
                mod("os")._exit(0)
        STATE["timed"] += 1
        if STATE["timed"] <= B.len(role.staged):
            return torch.relu(x)  # its first batch is honest, while the helper starts
        STATE["skip"] = True
        return x
    """
    reply = judges.judge(
        SLOW_RELU, _model_new(forward, top=LATE_HELPER), time=True, trials=6, warmup=1
    )
    assert _wrong(reply).startswith("timed batch"), reply


def test_a_fork_bomb_of_sleepers_is_stopped_with_the_runner_and_ended_after(
    judges: Judges,
) -> None:
    top = "PIDS = []\n"
    forward = """
    def forward(self, x):
        os = mod("os")
        while B.len(PIDS) < 40:
            pid = os.fork()
            if pid == 0:
                while True:
                    mod("time").sleep(0.001)
            PIDS.append(pid)
        return torch.relu(x)
    """
    reply = judges.judge(RELU, _model_new(forward, top=top), time=True, trials=3, warmup=0)
    assert reply["correct"] and reply["timing"]["rounds"] == 3, reply


# -- breaking the judge ------------------------------------------------------------------------


def test_a_reply_nested_thousands_deep_fails_the_candidate_not_the_judge(
    judges: Judges,
) -> None:
    # json.loads raises RecursionError (not ValueError) on it: it escaped the judge, which
    # faulted and recycled its device process.
    forward = "def forward(self, x):\n    forge()\n    return torch.relu(x)\n"
    reply = judges.judge(RELU, _model_new(forward, top=NESTED_REPLY))
    assert "the ModelNew process failed" in reply["problem"] and not reply["correct"], reply
    assert "not JSON" in reply["problem"], reply


READY_REPLY = """
def forge():
    os = mod("os")
    body = SYS.modules["json"].dumps({"ready": True}).encode()
    os.write(own_socket(), B.len(body).to_bytes(4, "big") + body)
    mod("time").sleep(0.5)
"""


def test_a_ready_sent_again_mid_judging_fails_the_candidate(judges: Judges) -> None:
    # A runner says ready once, before any request: a second "ready" would answer the judge's
    # request without naming it, and shift every later reply by one.
    forward = "def forward(self, x):\n    forge()\n    return torch.relu(x)\n"
    reply = judges.judge(RELU, _model_new(forward, top=READY_REPLY))
    assert not reply["correct"], reply
    assert "does not answer the judge's last request" in reply["problem"], reply


def test_one_written_tensor_claimed_for_both_outputs_delivers_the_second_unwritten(
    judges: Judges,
) -> None:
    # The judge read each tensor from the slot its description named: the runner wrote only
    # the first slot and named it twice.
    top = """
    ROLE = mod("codevolve.problems.kernelbench.device.kb_role")
    ORIGINAL = ROLE.ModelRole._deliver


    def deliver_once(self, output, slots):
        first = ORIGINAL(self, output[0], slots[:1])["tensor"]
        return {"tuple": [{"tensor": first}, {"tensor": first}]}


    ROLE.ModelRole._deliver = deliver_once
    """
    forward = "def forward(self, x):\n    y = torch.relu(x)\n    return y, y\n"
    problem = _wrong(judges.judge(TWICE, _model_new(forward, top=top)))
    assert "output 1" in problem, problem


# -- forged correctness: what an output may be -----------------------------------------------


@pytest.mark.parametrize(
    "value", ["float('nan')", "float('inf')", "-float('inf')", "3.0e38"], ids=str
)
def test_a_non_finite_or_huge_payload_is_wrong(judges: Judges, value: str) -> None:
    forward = f"def forward(self, x):\n    return torch.full_like(x, {value})\n"
    _wrong(judges.judge(RELU, _model_new(forward)))


def test_float64_where_the_reference_gives_float32_is_wrong(judges: Judges) -> None:
    forward = "def forward(self, x):\n    return torch.relu(x.double())\n"
    assert "dtype" in _wrong(judges.judge(RELU, _model_new(forward)))


def test_one_element_where_the_reference_gives_a_scalar_is_wrong(judges: Judges) -> None:
    forward = "def forward(self, x):\n    return x.sum().reshape(1)\n"
    assert "shape" in _wrong(judges.judge(TOTAL, _model_new(forward)))


@pytest.mark.parametrize(
    "output",
    ["torch.empty(16, 64, device='meta')", "torch.relu(x).to_sparse()"],
    ids=["meta", "sparse"],
)
def test_an_output_on_another_device_or_layout_is_wrong(judges: Judges, output: str) -> None:
    forward = f"def forward(self, x):\n    return {output}\n"
    _wrong(judges.judge(RELU, _model_new(forward)))


def test_an_expanded_view_right_only_in_its_first_row_is_wrong(judges: Judges) -> None:
    forward = "def forward(self, x):\n    return torch.relu(x[:1]).expand(16, 64)\n"
    _wrong(judges.judge(RELU, _model_new(forward)))


def test_the_arena_holds_no_reference_output(judges: Judges) -> None:
    # It looks for the bytes of the right answer anywhere in the shared memory it was given.
    forward = """
    def forward(self, x):
        want = (x * 2 + 1).reshape(-1)
        raw = x.untyped_storage()
        arena = torch.empty(0, dtype=torch.float32).set_(raw, 0, (raw.nbytes() // 4,))
        rows = arena[: arena.numel() // 1024 * 1024].view(-1, 1024)
        hits = int((rows == want).all(dim=1).sum())
        raise RuntimeError(f"rows holding the answer: {hits}")
    """
    reply = judges.judge(AFFINE, _model_new(forward))
    assert reply["problem"].endswith("rows holding the answer: 0"), reply


# -- forged correctness: right only where it is checked ----------------------------------------


def test_wrong_on_every_other_timed_call_is_caught(judges: Judges) -> None:
    top = "CALLS = [0]\n"
    forward = """
    def forward(self, x):
        if timed():
            CALLS[0] += 1
            if CALLS[0] % 2:
                return torch.zeros_like(x)
        return torch.relu(x)
    """
    reply = judges.judge(RELU, _model_new(forward, top=top), time=True, trials=5, warmup=1)
    assert _wrong(reply).startswith("timed batch"), reply


def test_answering_for_inputs_it_zeroed_in_a_timed_batch_is_wrong(judges: Judges) -> None:
    # Timed batches do not compare the staged inputs afterwards: the reference's outputs come
    # from the judge's private copies, so the zeros it computed are wrong.
    forward = """
    def forward(self, x):
        if timed():
            x.zero_()
        return torch.relu(x)
    """
    reply = judges.judge(RELU, _model_new(forward), time=True, trials=3, warmup=0)
    assert _wrong(reply).startswith("timed batch 1"), reply


def test_writing_the_machines_shared_memory_folder_is_refused(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        try:
            with B.open("/dev/shm/codevolve-red-team", "w") as f:
                f.write("kept for the next candidate")
        except B.OSError as exc:
            raise RuntimeError(f"refused: {B.type(exc).__name__}")
        raise RuntimeError("written")
    """
    reply = judges.judge(RELU, _model_new(forward))
    assert "refused" in reply["problem"], reply
    assert not os.path.exists("/dev/shm/codevolve-red-team")


# -- gemm-kernel-gpu ---------------------------------------------------------------------------

GEMM_EXTRA = """
def rounds_of(t):
    f = _torch(t).sys._getframe()
    while f is not None and f.f_code.co_name != "_calls":
        f = f.f_back
    return f.f_locals["self"].rounds


"""


def _launch(body: str, *, top: str = "") -> str:
    return hostile_launch(body, top=top, prelude=GEMM_EXTRA)


def _timing(reply: dict[str, Any]) -> dict[str, Any]:
    assert not reply["load_error"] and reply["problems"] == [""], reply
    return dict(reply["timings"][0])


def test_gemm_a_forked_helper_that_writes_y_after_the_answer_is_caught(
    kernels: KernelJudges,
) -> None:
    # Honest in the checked calls and the first timed batch; then the launch returns at once
    # and a process it forked writes every y 2 ms after the judge poisoned it.
    top = """
    STATE = {"calls": 0, "helper": False}


    def helper(t, rounds):
        clock = mod(t, "time")
        while True:
            for x, w, y, in rounds:
                if bool(y[0, 0].isnan()):
                    clock.sleep(0.002)
                    y.copy_(x.float() @ w.float().t())
            clock.sleep(0.0002)
    """
    body = """
    STATE["calls"] += 1
    rounds = rounds_of(x)
    if len(rounds) > 1 and not STATE["helper"]:
        STATE["helper"] = True
        os = mod(x, "os")
        if os.fork() == 0:
            try:
                helper(x, rounds)
            finally:
                os._exit(0)
    if STATE["calls"] > 3 + len(rounds):
        return
    y.copy_(x.float() @ w.float().t())
    """
    row = _timing(kernels.measure(_launch(body, top=top), time=True, samples=4))
    assert row["status"] == "incorrect" and row["detail"].startswith("timed batch"), row


def test_gemm_computing_half_the_rows_of_timed_calls_is_caught(kernels: KernelJudges) -> None:
    body = """
    if len(rounds_of(x)) > 1:
        half = x.shape[0] // 2
        y[:half].copy_(x[:half].float() @ w.float().t())
        return
    y.copy_(x.float() @ w.float().t())
    """
    row = _timing(kernels.measure(_launch(body), time=True))
    assert row["status"] == "incorrect" and row["detail"].startswith("timed batch"), row


def test_gemm_copying_the_first_calls_product_into_the_others_is_caught(
    kernels: KernelJudges,
) -> None:
    top = "FIRST = {}\n"
    body = """
    rounds = rounds_of(x)
    if len(rounds) > 1 and y.data_ptr() != rounds[0][2].data_ptr():
        y.copy_(rounds[0][2])
        return
    y.copy_(x.float() @ w.float().t())
    """
    row = _timing(kernels.measure(_launch(body, top=top), time=True))
    assert row["status"] == "incorrect" and row["detail"].startswith("timed batch"), row


def test_gemm_using_its_inputs_as_scratch_and_restoring_them_is_scored_honestly(
    kernels: KernelJudges,
) -> None:
    # Halves x in place, doubles the product, and puts x back: nothing is gained and nothing is
    # lost; the judge's input check sees the restored x.
    body = """
    x.mul_(0.5)
    y.copy_((x.float() @ w.float().t()) * 2)
    x.mul_(2)
    """
    row = _timing(kernels.measure(_launch(body), time=True))
    assert row["status"] == "ok", row


def test_gemm_a_reply_nested_thousands_deep_fails_the_candidate(kernels: KernelJudges) -> None:
    body = """
    os = mod(x, "os")
    sock = None
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "socket" in os.readlink(f"/proc/self/fd/{fd}"):
                sock = int(fd)
        except builtin(x, "OSError"):
            pass
    data = b"[" * 200000
    os.write(sock, len(data).to_bytes(4, "big") + data)
    mod(x, "time").sleep(0.5)
    """
    reply = kernels.measure(_launch(body))
    problem = reply["problems"][-1] if reply["problems"] else reply["load_error"]
    assert "not JSON" in problem, reply


def test_every_helper_process_is_gone_after_the_judging(judges: Judges, tmp_path: Path) -> None:
    # The pause stops each of them; the end of the judging kills them all.
    top = "PIDS = []\n"
    forward = """
    def forward(self, x):
        os = mod("os")
        if not PIDS:
            for _ in range(5):
                pid = os.fork()
                if pid == 0:
                    while True:
                        mod("time").sleep(0.01)
                PIDS.append(pid)
        if not timed():
            raise RuntimeError("pids " + " ".join(B.str(p) for p in PIDS))
        return torch.relu(x)
    """
    reply = judges.judge(RELU, _model_new(forward, top=top))
    pids = [int(p) for p in reply["problem"].rsplit("pids ", 1)[1].split()]
    assert len(pids) == 5 and all(_gone(pid) for pid in pids), reply
