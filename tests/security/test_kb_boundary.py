"""Hostile KernelBench candidates against the real judging path on the CPU: the judge in this
process, each candidate in a caged runner of its own.

Every candidate here runs with the source rules switched off (they are a filter, not the wall),
and reaches what Python lets it reach: ``torch.sys.modules`` gives it every loaded module and
``importlib``. Each test names an attack and asserts that it fails or is scored honestly. A
candidate that finds something tells the test by raising with it: the judge reports the first
line of its message as the reply's ``problem``.
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

MATMUL = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)

def get_inputs():
    return [torch.rand(32, 48), torch.rand(48, 16)]

def get_init_inputs():
    return []
"""
SECRET = "codevolve-judge-secret-3f9a"


@pytest.fixture(scope="module")
def judges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judges]:
    os.environ["CODEVOLVE_TEST_SECRET"] = SECRET  # in the judge's environment, before runners
    judges = Judges(tmp_path_factory.mktemp("kb-boundary"))
    judges.rules = False
    yield judges
    judges.close()
    del os.environ["CODEVOLVE_TEST_SECRET"]


def _candidate(forward: str, *, top: str = "", init: str = "") -> str:
    return hostile_model_new(forward, top=top, init=init)


def _found(reply: dict[str, Any]) -> str:
    """What the candidate reported by raising (the reply's problem)."""
    assert reply["problem"].startswith("ModelNew raised"), reply
    return str(reply["problem"])


def _wrong(reply: dict[str, Any]) -> None:
    assert not reply["correct"], reply
    assert reply["problem"] or any("wrong" in v for v in reply["verdicts"].values()), reply


# -- forged correctness ----------------------------------------------------------------------


def test_zeros_for_a_matrix_product_are_wrong(judges: Judges) -> None:
    reply = judges.judge(
        MATMUL, _candidate("def forward(self, a, b):\n    return a.new_zeros(32, 16)\n")
    )
    _wrong(reply)


def test_replacing_the_judges_comparison_reaches_only_its_own_process(judges: Judges) -> None:
    forward = """
    def forward(self, a, b):
        compare = mod("codevolve.problems.kernelbench.device.kb_compare")
        compare.compare = lambda *args, **kwargs: compare.Comparison("")
        compare.all_finite = lambda value: True
        return a.new_zeros(32, 16)
    """
    _wrong(judges.judge(MATMUL, _candidate(forward)))


def test_a_global_hook_registry_stays_in_its_own_process(judges: Judges) -> None:
    # In one process a global forward hook would zero the reference's output too.
    top = "torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o * 0)\n"
    forward = "def forward(self, a, b):\n    return a.new_zeros(32, 16)\n"
    _wrong(judges.judge(MATMUL, _candidate(forward, top=top)))


def test_replacing_a_library_function_through_a_foreign_self_changes_only_its_own(
    judges: Judges,
) -> None:
    top = 'object.__setattr__(torch, "relu", lambda x: x * 0)\n'
    _wrong(
        judges.judge(RELU, _candidate("def forward(self, x):\n    return torch.relu(x)\n", top=top))
    )


def test_predicting_the_inputs_from_the_seed_it_was_built_under_fails(judges: Judges) -> None:
    init = """
    def __init__(self):
        super().__init__()
        torch.manual_seed(torch.initial_seed())
        self.answer = torch.relu(torch.rand(16, 64))
    """
    forward = "def forward(self, x):\n    return self.answer.clone()\n"
    _wrong(judges.judge(RELU, _candidate(forward, init=init), distributions=["kernelbench"]))


def test_reading_the_rng_state_at_call_time_does_not_reveal_the_inputs(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        torch.set_rng_state(torch.get_rng_state())
        return torch.relu(torch.rand(16, 64))
    """
    _wrong(judges.judge(RELU, _candidate(forward)))


def test_right_only_while_the_calls_are_few_fails_on_a_timed_batch(judges: Judges) -> None:
    # Counts its calls: right for the checked ones (3 distributions x 2), zeros afterwards.
    init = "def __init__(self):\n    super().__init__()\n    self.calls = 0\n"
    forward = """
    def forward(self, x):
        self.calls += 1
        return torch.relu(x) if self.calls <= 6 else x * 0
    """
    reply = judges.judge(RELU, _candidate(forward, init=init), time=True, trials=3, warmup=0)
    assert reply["problem"].startswith("timed batch 1"), reply


def test_a_thread_that_finishes_the_output_after_the_call_delivers_the_unfinished_one(
    judges: Judges,
) -> None:
    forward = """
    def forward(self, x):
        out = torch.zeros_like(x)
        later = lambda: (mod("time").sleep(0.2), out.copy_(torch.relu(x)))
        mod("threading").Thread(target=later, daemon=True).start()
        return out
    """
    _wrong(judges.judge(RELU, _candidate(forward)))


def test_a_forged_reply_on_its_own_socket_is_read_from_memory_not_believed(
    judges: Judges,
) -> None:
    # It writes a well-formed "my output is in slot 0" reply itself, without writing the slot.
    forward = """
    def forward(self, x):
        os = mod("os")
        json = mod("json")
        body = json.dumps({"outputs": [{"tensor": {"slot": 0, "dtype": "torch.float32",
            "shape": [16, 64], "stride": [64, 1], "device": "cpu", "layout": "torch.strided",
            "type": "Tensor"}}]}).encode()
        os.write(own_socket(), len(body).to_bytes(4, "big") + body)
        return torch.relu(x)
    """
    reply = judges.judge(RELU, _candidate(forward))
    assert "the ModelNew process failed" in reply["problem"] and not reply["correct"], reply


def test_garbage_on_its_socket_ends_its_judging(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        os = mod("os")
        os.write(own_socket(), b"\\xff\\xff\\xff\\xff")
        return torch.relu(x)
    """
    reply = judges.judge(RELU, _candidate(forward))
    assert "the ModelNew process failed" in reply["problem"] and not reply["correct"], reply


def test_a_forbidden_operator_reached_through_a_sibling_is_refused(judges: Judges) -> None:
    forward = "def forward(self, a, b):\n    return torch.addmm(a.new_zeros(32, 16), a, b)\n"
    reply = judges.judge(MATMUL, _candidate(forward), forbid=["aten.mm"])
    assert reply["problem"] == (
        "ModelNew ran aten.addmm (a sibling of aten.mm), which this problem forbids"
    )


@pytest.mark.parametrize(
    "call",
    ["F.linear(a, b.t())", "torch.einsum('ik,kj->ij', a, b)", "torch.bmm(a[None], b[None])[0]"],
)
def test_other_routes_to_a_forbidden_product_are_refused(judges: Judges, call: str) -> None:
    reply = judges.judge(
        MATMUL, _candidate(f"def forward(self, a, b):\n    return {call}\n"), forbid=["aten.mm"]
    )
    assert "which this problem forbids" in reply["problem"] and not reply["correct"], reply


# -- forged speed ------------------------------------------------------------------------------


def test_patching_the_clocks_in_its_process_does_not_touch_the_judges(judges: Judges) -> None:
    top = """
    clock = mod("time")
    frozen = clock.perf_counter()
    clock.perf_counter = lambda: frozen
    clock.monotonic = lambda: frozen
    """
    forward = "def forward(self, x):\n    mod('time').sleep(0.05)\n    return torch.relu(x)\n"
    reply = judges.judge(RELU, _candidate(forward, top=top), time=True, trials=3, warmup=0)
    assert reply["correct"], reply
    assert reply["timing"]["candidate_ms"] >= 45, reply["timing"]


def test_right_when_checked_but_late_when_timed_is_caught(judges: Judges) -> None:
    # Synchronous for the checked calls; in the timed batches it answers at once and lets a
    # thread write the output later, outside the clock. Outputs are read when it answers.
    init = "def __init__(self):\n    super().__init__()\n    self.calls = 0\n"
    forward = """
    def forward(self, x):
        self.calls += 1
        if self.calls <= 6:
            return torch.relu(x)
        out = torch.empty_like(x)
        later = lambda: (mod("time").sleep(0.5), out.copy_(torch.relu(x)))
        mod("threading").Thread(target=later, daemon=True).start()
        return out
    """
    reply = judges.judge(RELU, _candidate(forward, init=init), time=True, trials=3, warmup=0)
    assert reply["problem"].startswith("timed batch 1"), reply


# -- reaching out ------------------------------------------------------------------------------


def test_the_environment_holds_no_secret_of_the_judge(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        raise RuntimeError(" ".join(sorted(mod("os").environ)))
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    assert "CODEVOLVE_TEST_SECRET" not in found and "PATH" in found, found


def test_the_judges_process_environment_is_unreadable(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        os = mod("os")
        with B.open(f"/proc/{os.getppid()}/environ", "rb") as f:
            raise RuntimeError(f.read().decode(errors="replace").replace("\\0", " "))
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    assert SECRET not in found, found


def test_a_root_only_file_is_unreadable(judges: Judges, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the runner has a uid of its own only where the judge runs as root")
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    forward = f"""
    def forward(self, x):
        with B.open({str(secret)!r}) as f:
            raise RuntimeError(f.read())
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    assert SECRET not in found and ("Permission" in found or "No such file" in found), found


def test_writing_outside_its_scratch_folder_fails(judges: Judges, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    tmp_path.chmod(0o777)  # the uid alone would allow it: Landlock must refuse
    forward = f"""
    def forward(self, x):
        with B.open({str(target)!r}, "w") as f:
            f.write("out")
        raise RuntimeError("wrote it")
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    assert "wrote it" not in found and not target.exists(), found


def test_a_shell_runs_as_an_unprivileged_uid_if_at_all(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        done = mod("subprocess").run(["id", "-u"], capture_output=True, text=True)
        raise RuntimeError("uid=" + done.stdout.strip())
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    if os.geteuid() == 0:
        assert "uid=0" not in found.split(": ", 1)[1].split(), found


@pytest.mark.parametrize("address", [("127.0.0.1", 6379), ("127.0.0.1", 5432)])
def test_no_socket_reaches_the_database_or_the_queue(
    judges: Judges, address: tuple[str, int]
) -> None:
    forward = f"""
    def forward(self, x):
        sock = mod("socket").create_connection({address!r}, timeout=2)
        raise RuntimeError("connected")
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    assert "connected" not in found, found


def test_the_judge_cannot_be_signalled(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        os = mod("os")
        os.kill(os.getppid(), 9)
        raise RuntimeError("signalled")
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    if os.geteuid() == 0:
        assert "signalled" not in found, found


def test_the_judges_memory_is_unreadable(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        os = mod("os")
        with B.open(f"/proc/{os.getppid()}/mem", "rb") as f:
            raise RuntimeError("opened")
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    assert "opened" not in found, found


def test_ptrace_is_refused(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        ctypes = mod("ctypes")
        libc = ctypes.CDLL(None, use_errno=True)
        result = libc.ptrace(16, mod("os").getppid(), 0, 0)  # PTRACE_ATTACH
        raise RuntimeError(f"ptrace={result} errno={ctypes.get_errno()}")
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    assert "ptrace=-1" in found, found


# -- what outlives a judging ---------------------------------------------------------------------


def _gone(pid: int) -> bool:
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(") ", 1)[1].startswith("Z"):
                    return True  # a zombie waiting for its reaper: it runs nothing
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_a_process_in_a_session_of_its_own_is_ended_with_the_judging(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        child = mod("subprocess").Popen(["sleep", "300"], start_new_session=True)
        raise RuntimeError(f"pid={child.pid}")
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    if os.geteuid() != 0:
        pytest.skip("the uid sweep needs the judge to run as root")
    pid = int(found.rsplit("pid=", 1)[1])
    assert _gone(pid)


def test_a_forked_child_is_ended_with_the_judging(judges: Judges) -> None:
    forward = """
    def forward(self, x):
        os = mod("os")
        pid = os.fork()
        if pid == 0:
            mod("time").sleep(300)
            os._exit(0)
        raise RuntimeError(f"pid={pid}")
    """
    found = _found(judges.judge(RELU, _candidate(forward)))
    assert _gone(int(found.rsplit("pid=", 1)[1]))


def test_nothing_carries_from_one_judging_to_the_next(judges: Judges) -> None:
    leave = """
    def forward(self, x):
        os = mod("os")
        B.open(os.path.join(os.environ["HOME"], "marker"), "w").close()
        B.open("marker", "w").close()
        torch.carried = True
        return torch.relu(x)
    """
    find = """
    def forward(self, x):
        os = mod("os")
        for path in (os.path.join(os.environ["HOME"], "marker"), "marker"):
            if os.path.exists(path):
                raise RuntimeError("found " + path)
        if B.getattr(torch, "carried", False):
            raise RuntimeError("found torch.carried")
        return torch.relu(x)
    """
    assert judges.judge(RELU, _candidate(leave))["correct"]
    assert judges.judge(RELU, _candidate(find))["correct"]


# -- a process that fails ------------------------------------------------------------------------


def test_exiting_the_process_fails_only_the_candidate(judges: Judges) -> None:
    reply = judges.judge(RELU, _candidate("def forward(self, x):\n    mod('os')._exit(0)\n"))
    assert "the ModelNew process failed" in reply["problem"] and not reply["correct"], reply
    assert judges.judge(RELU, _candidate("def forward(self, x):\n    return torch.relu(x)\n"))[
        "correct"
    ]


def test_a_memory_blow_up_fails_only_the_candidate(judges: Judges) -> None:
    forward = "def forward(self, x):\n    return torch.empty(1 << 38, dtype=torch.uint8)\n"
    reply = judges.judge(RELU, _candidate(forward))
    assert reply["problem"].startswith("ModelNew raised") and not reply["correct"], reply
