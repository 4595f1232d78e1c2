"""Hostile gemm-kernel-gpu candidates against the real judging path on the CPU: the judge in this
process, each candidate's ``matmul`` in a caged runner of its own, every buffer in the judge's
arena.

Every candidate here runs with the source rules switched off (they are a filter, not the wall):
its module still gets the loader's cut builtins and no import but Triton and ``math``, and
reaches everything else through an attribute chain, a tensor's class to a torch function's
``__globals__`` to ``torch.sys.modules``. Each test names an attack and asserts that it fails or
is scored honestly. A candidate that finds something tells the test by raising with it: the
judge reports the first line of its message as the checked shape's problem.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.kernel_judging import HONEST, KernelJudges, hostile_launch  # noqa: E402

SECRET = "codevolve-judge-secret-71c2"
SHAPE = (8, 32, 64)


@pytest.fixture(scope="module")
def judges() -> Iterator[KernelJudges]:
    os.environ["CODEVOLVE_TEST_SECRET"] = SECRET  # in the judge's environment, before runners
    judges = KernelJudges()
    judges.rules = False
    yield judges
    judges.close()
    del os.environ["CODEVOLVE_TEST_SECRET"]


def _candidate(body: str, *, top: str = "") -> str:
    return hostile_launch(body, top=top)


def _problem(reply: dict[str, Any]) -> str:
    assert not reply["load_error"], reply
    assert reply["problems"], reply
    return str(reply["problems"][-1])


def _found(reply: dict[str, Any]) -> str:
    """What the candidate reported by raising (the checked shape's problem)."""
    problem = _problem(reply)
    assert "matmul raised" in problem, reply
    return problem


def _correct(reply: dict[str, Any]) -> bool:
    return not reply["load_error"] and all(p == "" for p in reply["problems"])


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


# -- forged correctness ----------------------------------------------------------------------


def test_an_honest_launch_through_tensor_methods_is_correct_and_timed(
    judges: KernelJudges,
) -> None:
    reply = judges.measure(HONEST, [SHAPE, (3, 40, 24)], time=True, check_shapes=[(5, 17, 33)])
    assert _correct(reply) and reply["problems"] == ["", "", ""], reply
    assert [row["status"] for row in reply["timings"]] == ["ok", "ok"], reply
    row = reply["timings"][0]
    assert row["t_us"] > 0 and row["cublas_us"] > 0 and row["batch"] >= 1 and not row["graph"]
    assert reply["isolation"].get("seccomp") is True, reply["isolation"]


def test_returning_without_writing_leaves_the_poison(judges: KernelJudges) -> None:
    problem = _problem(judges.measure(_candidate("return None\n")))
    assert "wrong or unwritten" in problem, problem


def test_replacing_the_judges_comparison_reaches_only_its_own_process(
    judges: KernelJudges,
) -> None:
    body = """
    bench = mod(x, "codevolve.problems.gemm_kernel_gpu.device.kernel_bench")
    bench.tolerance_problem = lambda *args: ""
    bench.CheckedCall.problem = lambda *args: ""
    y.zero_()
    """
    assert "wrong or unwritten" in _problem(judges.measure(_candidate(body)))


def test_writing_a_guard_row_outside_the_output_is_caught(judges: KernelJudges) -> None:
    body = """
    y.copy_(x.float() @ w.float().t())
    m, n = y.shape
    below = y.as_strided((n,), (1,), y.storage_offset() + m * n)
    below.zero_()
    """
    assert _problem(judges.measure(_candidate(body))).endswith("wrote outside the output")


def test_writing_past_the_workspace_is_caught(judges: KernelJudges) -> None:
    body = """
    y.copy_(x.float() @ w.float().t())
    n = workspace.numel()
    workspace.as_strided((8,), (1,), workspace.storage_offset() + n).zero_()
    """
    problem = _problem(judges.measure(_candidate(body)))
    assert problem.endswith("wrote past the end of the workspace"), problem


def test_changing_the_inputs_is_caught(judges: KernelJudges) -> None:
    body = "y.copy_(x.float() @ w.float().t())\nx.zero_()\n"
    assert _problem(judges.measure(_candidate(body))).endswith("changed its inputs")


def test_reading_scratch_it_never_cleared_is_caught(judges: KernelJudges) -> None:
    # Adds its product to what the workspace held (zero, it assumes): the judge poisons it.
    body = """
    m, n = y.shape
    part = workspace[: m * n].view(m, n)
    part.add_(x.float() @ w.float().t())
    y.copy_(part)
    """
    assert "wrong or unwritten" in _problem(judges.measure(_candidate(body)))


def test_an_answer_before_the_work_is_done_is_caught(judges: KernelJudges) -> None:
    # The work is left to a thread: the runner answers at once and is stopped before it lands.
    body = """
    later = lambda: (mod(x, "time").sleep(0.3), y.copy_(x.float() @ w.float().t()))
    mod(x, "threading").Thread(target=later, daemon=True).start()
    """
    assert "wrong or unwritten" in _problem(judges.measure(_candidate(body)))


def test_results_cached_by_address_fail_the_timed_batches(judges: KernelJudges) -> None:
    # Right for the checked calls (whose buffers stay put across distributions, which it would
    # fail); then it replays what it wrote at an address when the address comes back.
    top = "CACHE = {}\nCALLS = [0]\n"
    body = """
    CALLS[0] += 1
    key = (x.data_ptr(), y.data_ptr())
    if CALLS[0] > 3 and key in CACHE:
        y.copy_(CACHE[key])
        return
    y.copy_(x.float() @ w.float().t())
    CACHE[key] = y.clone()
    """
    reply = judges.measure(_candidate(body, top=top), time=True)
    assert reply["problems"] == [""], reply
    row = reply["timings"][0]
    assert row["status"] == "incorrect" and row["detail"].startswith("timed batch"), row


def test_right_only_while_the_calls_are_few_fails_on_a_timed_batch(judges: KernelJudges) -> None:
    top = "CALLS = [0]\n"
    body = """
    CALLS[0] += 1
    if CALLS[0] <= 3:
        y.copy_(x.float() @ w.float().t())
    """
    reply = judges.measure(_candidate(body, top=top), time=True)
    row = reply["timings"][0]
    assert row["status"] == "incorrect" and row["detail"].startswith("timed batch 1"), row


# -- forged speed ------------------------------------------------------------------------------


def test_patching_the_clocks_in_its_process_does_not_touch_the_judges(
    judges: KernelJudges,
) -> None:
    body = """
    clock = mod(x, "time")
    frozen = clock.perf_counter()
    clock.perf_counter = lambda: frozen
    clock.monotonic = lambda: frozen
    clock.sleep(0.02)
    y.copy_(x.float() @ w.float().t())
    """
    reply = judges.measure(_candidate(body), time=True, samples=3, warmup=0)
    row = reply["timings"][0]
    assert row["status"] == "ok" and row["t_us"] >= 18_000, row


def test_a_busy_process_left_behind_is_ended_before_the_reference_is_timed(
    judges: KernelJudges,
) -> None:
    # A forked child that spins, named so that the test can look for it: ended with the
    # candidate's runner, which ends before cuBLAS is timed.
    name = f"spin{os.getpid() % 10000}"
    top = "PIDS = []\n"
    body = f"""
    if not PIDS:
        pid = mod(x, "os").fork()
        if pid == 0:
            mod(x, "ctypes").CDLL(None).prctl(15, b"{name}", 0, 0, 0)  # PR_SET_NAME
            while True:
                pass
        PIDS.append(pid)
    y.copy_(x.float() @ w.float().t())
    """
    reply = judges.measure(_candidate(body, top=top), time=True, samples=3, warmup=0)
    assert reply["timings"][0]["status"] == "ok", reply
    assert not _named(name)


def _named(name: str) -> list[int]:
    """Processes called ``name`` that still run."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                comm, rest = handle.read().split(" (", 1)[1].rsplit(") ", 1)
        except (OSError, ValueError):
            continue
        if comm == name and rest[:1] not in "ZX":
            found.append(int(pid))
    return found


# -- reaching out ------------------------------------------------------------------------------


def test_the_environment_holds_no_secret_of_the_judge(judges: KernelJudges) -> None:
    body = 'raise ValueError(" ".join(sorted(mod(x, "os").environ)))\n'
    found = _found(judges.measure(_candidate(body)))
    assert "CODEVOLVE_TEST_SECRET" not in found and "PATH" in found, found


def test_the_judges_process_environment_is_unreadable(judges: KernelJudges) -> None:
    body = """
    os = mod(x, "os")
    with builtin(x, "open")(f"/proc/{os.getppid()}/environ", "rb") as f:
        raise ValueError(f.read().decode(errors="replace").replace("\\0", " "))
    """
    found = _found(judges.measure(_candidate(body)))
    assert SECRET not in found, found


def test_writing_outside_its_scratch_folder_fails(judges: KernelJudges, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    tmp_path.chmod(0o777)  # the uid alone would allow it: Landlock must refuse
    body = f"""
    with builtin(x, "open")({str(target)!r}, "w") as f:
        f.write("out")
    raise ValueError("wrote it")
    """
    found = _found(judges.measure(_candidate(body)))
    assert "wrote it" not in found and not target.exists(), found


@pytest.mark.parametrize("address", [("127.0.0.1", 6379), ("127.0.0.1", 5432)])
def test_no_socket_reaches_the_database_or_the_queue(
    judges: KernelJudges, address: tuple[str, int]
) -> None:
    body = f"""
    sock = mod(x, "socket").create_connection({address!r}, timeout=2)
    raise ValueError("connected")
    """
    found = _found(judges.measure(_candidate(body)))
    assert "connected" not in found, found


def test_a_shell_runs_as_an_unprivileged_uid_if_at_all(judges: KernelJudges) -> None:
    body = """
    done = mod(x, "subprocess").run(["id", "-u"], capture_output=True, text=True)
    raise ValueError("uid=" + done.stdout.strip())
    """
    found = _found(judges.measure(_candidate(body)))
    if os.geteuid() == 0:
        assert "uid=0" not in found.split(": ", 2)[-1].split(), found


def test_the_judge_cannot_be_signalled(judges: KernelJudges) -> None:
    body = """
    os = mod(x, "os")
    os.kill(os.getppid(), 9)
    raise ValueError("signalled")
    """
    found = _found(judges.measure(_candidate(body)))
    if os.geteuid() == 0:
        assert "signalled" not in found, found


def test_ptrace_is_refused(judges: KernelJudges) -> None:
    body = """
    ctypes = mod(x, "ctypes")
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.ptrace(16, mod(x, "os").getppid(), 0, 0)  # PTRACE_ATTACH
    raise ValueError(f"ptrace={result} errno={ctypes.get_errno()}")
    """
    assert "ptrace=-1" in _found(judges.measure(_candidate(body)))


def test_a_forged_reply_on_its_own_socket_is_not_believed(judges: KernelJudges) -> None:
    # It answers "done" itself without writing the output.
    body = """
    body = mod(x, "json").dumps({"done": 1, "id": 3}).encode()
    mod(x, "os").write(own_socket(x), len(body).to_bytes(4, "big") + body)
    mod(x, "time").sleep(0.5)
    """
    problem = _problem(judges.measure(_candidate(body)))
    assert "process failed" in problem or "wrong or unwritten" in problem, problem


# -- what outlives a judging ---------------------------------------------------------------------


def test_a_forked_child_is_ended_with_the_judging(judges: KernelJudges) -> None:
    body = """
    os = mod(x, "os")
    pid = os.fork()
    if pid == 0:
        mod(x, "time").sleep(300)
        os._exit(0)
    raise ValueError(f"pid={pid}")
    """
    found = _found(judges.measure(_candidate(body)))
    assert _gone(int(found.rsplit("pid=", 1)[1]))


def test_a_process_in_a_session_of_its_own_is_ended_with_the_judging(
    judges: KernelJudges,
) -> None:
    body = """
    child = mod(x, "subprocess").Popen(["sleep", "300"], start_new_session=True)
    raise ValueError(f"pid={child.pid}")
    """
    found = _found(judges.measure(_candidate(body)))
    if os.geteuid() != 0:
        pytest.skip("the uid sweep needs the judge to run as root")
    assert _gone(int(found.rsplit("pid=", 1)[1]))


def test_nothing_carries_from_one_judging_to_the_next(judges: KernelJudges) -> None:
    leave = """
    os = mod(x, "os")
    open_ = builtin(x, "open")
    open_(os.path.join(os.environ["HOME"], "marker"), "w").close()
    open_("marker", "w").close()
    _torch(x).carried = True
    y.copy_(x.float() @ w.float().t())
    """
    find = """
    os = mod(x, "os")
    for path in (os.path.join(os.environ["HOME"], "marker"), "marker"):
        if os.path.exists(path):
            raise ValueError("found " + path)
    if "carried" in _torch(x).__dict__:
        raise ValueError("found torch.carried")
    y.copy_(x.float() @ w.float().t())
    """
    assert _correct(judges.measure(_candidate(leave)))
    assert _correct(judges.measure(_candidate(find)))


def test_exiting_the_process_fails_only_the_candidate(judges: KernelJudges) -> None:
    problem = _problem(judges.measure(_candidate('mod(x, "os")._exit(0)\n')))
    assert "the matmul process failed" in problem, problem
    assert _correct(judges.measure(HONEST))
