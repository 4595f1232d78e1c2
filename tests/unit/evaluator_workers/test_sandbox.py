"""The sandbox pool against real fork servers: what candidates get back, and what they cannot do."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.problem import SandboxErrorKind, SandboxReply
from codevolve.evaluator_workers import _confine
from codevolve.evaluator_workers.errors import SandboxUnavailable
from codevolve.evaluator_workers.sandbox import Isolation, SandboxPool

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5.0, memory_mb=256, output_bytes=4096)
SHORT = SandboxLimits(wall_s=0.5, cpu_s=5.0, memory_mb=256, output_bytes=4096)


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=2) as started:
        yield started


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as dead."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _eventually_dead(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def _only_value(reply: SandboxReply) -> Any:
    assert reply.ok, reply
    assert reply.values is not None and len(reply.values) == 1
    return reply.values[0]


def _assert_pool_works(pool: SandboxPool) -> None:
    reply = pool.call("def f(x):\n    return x * 2\n", "f", [[21]], LIMITS)
    assert reply.ok, reply
    assert reply.values == (42,)


# ----------------------------------------------------------------------------- values


def test_returns_the_entry_points_value_for_each_argument_list(pool: SandboxPool) -> None:
    source = "def add(a, b):\n    return a + b\n"
    reply = pool.call(source, "add", [[1, 2], [2.5, 0.5], ["x", "y"]], LIMITS)
    assert reply.ok
    assert reply.error_kind is None
    assert reply.values == (3, 3.0, "xy")


def test_named_tuples_tuples_and_nested_data_come_back_as_plain_lists(pool: SandboxPool) -> None:
    source = (
        "from typing import NamedTuple\n"
        "class Config(NamedTuple):\n"
        "    block: int\n"
        "    ratio: float\n"
        "def choose(m):\n"
        "    return {'config': Config(m, 0.5), 'pair': (1, (2, None)), 'flag': True}\n"
    )
    reply = pool.call(source, "choose", [[64]], LIMITS)
    assert reply.values == ({"config": [64, 0.5], "pair": [1, [2, None]], "flag": True},)


def test_prints_of_the_candidate_come_back_as_stdout_and_stderr(pool: SandboxPool) -> None:
    source = "import sys\ndef f():\n    print('to out')\n    print('to err', file=sys.stderr)\n"
    reply = pool.call(source, "f", [[]], LIMITS)
    assert reply.values == (None,)
    assert reply.stdout == "to out\n"
    assert reply.stderr == "to err\n"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ("return object()", "object"),
        ("return float('nan')", "nan"),
        ("return [1.0, float('inf')]", "inf"),
        ("return {1: 'int key'}", "key"),
        ("return {1, 2}", "set"),
        ("return b'bytes'", "bytes"),
        ("x = []\n    x.append(x)\n    return x", "nested"),
    ],
)
def test_anything_but_plain_finite_data_is_invalid_output(
    pool: SandboxPool, body: str, detail: str
) -> None:
    reply = pool.call(f"def f():\n    {body}\n", "f", [[]], LIMITS)
    assert reply.error_kind is SandboxErrorKind.INVALID_OUTPUT
    assert reply.values is None
    assert detail in reply.error


# ----------------------------------------------------------------------------- candidate errors


def test_an_exception_is_reported_with_the_tail_of_its_traceback(pool: SandboxPool) -> None:
    source = "def helper():\n    raise ValueError('boom')\n\ndef f():\n    helper()\n"
    reply = pool.call(source, "f", [[]], LIMITS)
    assert reply.error_kind is SandboxErrorKind.EXCEPTION
    assert 'File "candidate.py", line 2, in helper' in reply.error
    assert "raise ValueError('boom')" in reply.error
    assert reply.error.rstrip().endswith("ValueError: boom")


def test_sys_exit_in_the_candidate_is_an_exception_not_a_lost_child(pool: SandboxPool) -> None:
    reply = pool.call("import sys\ndef f():\n    sys.exit(3)\n", "f", [[]], LIMITS)
    assert reply.error_kind is SandboxErrorKind.EXCEPTION
    assert "SystemExit" in reply.error


@pytest.mark.parametrize(
    ("source", "detail"),
    [
        ("def f(:\n    pass\n", "SyntaxError"),
        ("def f():\n    return 1\x00\n", "null"),
        ("def g():\n    return 1\n", "no function 'f'"),
        ("f = 3\n", "no function 'f'"),
    ],
)
def test_source_that_does_not_load_or_lacks_the_entry_is_a_load_error(
    pool: SandboxPool, source: str, detail: str
) -> None:
    reply = pool.call(source, "f", [[]], LIMITS)
    assert reply.error_kind is SandboxErrorKind.LOAD_ERROR
    assert detail in reply.error


@pytest.mark.parametrize(
    "body",
    ["os.abort()", "os.kill(os.getpid(), signal.SIGSEGV)", "os._exit(0)"],
)
def test_a_child_that_dies_without_a_result_is_a_crash(pool: SandboxPool, body: str) -> None:
    reply = pool.call(f"import os, signal\ndef f():\n    {body}\n", "f", [[]], LIMITS)
    assert reply.error_kind is SandboxErrorKind.CRASH
    _assert_pool_works(pool)


def test_an_infinite_loop_times_out_at_the_wall_limit_and_the_pool_goes_on(
    pool: SandboxPool,
) -> None:
    started = time.monotonic()
    reply = pool.call("def f():\n    while True:\n        pass\n", "f", [[]], SHORT)
    assert reply.error_kind is SandboxErrorKind.TIMEOUT
    assert "wall-clock" in reply.error
    assert time.monotonic() - started < SHORT.wall_s + 4.0  # killed, not waited out
    _assert_pool_works(pool)


def test_a_cpu_hog_is_stopped_by_the_cpu_limit(pool: SandboxPool) -> None:
    limits = SandboxLimits(wall_s=20.0, cpu_s=1.0, memory_mb=256, output_bytes=4096)
    reply = pool.call("def f():\n    while True:\n        pass\n", "f", [[]], limits)
    assert reply.error_kind is SandboxErrorKind.TIMEOUT
    assert "CPU" in reply.error


@pytest.mark.parametrize(
    "body",
    [
        "return len(bytearray(1 << 36))",
        "chunks = []\n    while True:\n        chunks.append(bytearray(1 << 20))",
    ],
)
def test_a_memory_blow_up_is_stopped_by_the_memory_limit(pool: SandboxPool, body: str) -> None:
    limits = SandboxLimits(wall_s=10.0, cpu_s=10.0, memory_mb=128, output_bytes=4096)
    reply = pool.call(f"def f():\n    {body}\n", "f", [[]], limits)
    assert reply.error_kind in {SandboxErrorKind.MEMORY, SandboxErrorKind.CRASH}
    _assert_pool_works(pool)


def test_huge_output_is_capped_and_the_call_still_returns(pool: SandboxPool) -> None:
    source = (
        "import os\n"
        "def f():\n"
        "    line = 'x' * 999\n"
        "    for _ in range(50_000):\n"  # 50 MB through print
        "        print(line)\n"
        "    print('y' * 1_000_000)\n"
        "    return 7\n"
    )
    reply = pool.call(source, "f", [[]], LIMITS)
    assert reply.values == (7,)
    assert len(reply.stdout.encode()) < LIMITS.output_bytes + 100
    assert reply.stdout.endswith(f"[output truncated at {LIMITS.output_bytes} bytes]")


def test_writes_past_the_output_cap_that_bypass_print_fail_instead_of_filling_the_disk(
    pool: SandboxPool,
) -> None:
    source = "import os\ndef f():\n    while True:\n        os.write(1, b'z' * 1_000_000)\n"
    reply = pool.call(source, "f", [[]], LIMITS)
    assert reply.error_kind is SandboxErrorKind.EXCEPTION
    assert "File too large" in reply.error
    assert len(reply.stdout.encode()) < LIMITS.output_bytes + 100


# ----------------------------------------------------------------------------- isolation


def test_the_candidate_sees_a_scrubbed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://user:secret@db/prod")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    source = (
        "import os\n"
        "def f(worker):\n"
        "    try:\n"
        "        theirs = open(f'/proc/{worker}/environ', 'rb').read().decode(errors='replace')\n"
        "    except PermissionError:\n"
        "        theirs = 'denied'\n"
        "    return dict(os.environ), theirs\n"
    )
    with SandboxPool(size=1) as fresh:
        reply = fresh.call(source, "f", [[os.getpid()]], LIMITS)
        unprivileged = fresh.isolation is not None and fresh.isolation.unprivileged
    assert reply.ok, reply
    environment, workers_environment = _only_value(reply)
    assert set(environment) <= {"PATH", "LANG", "HOME", "TMPDIR"}
    assert "secret" not in repr(environment)
    if unprivileged:
        assert workers_environment == "denied"


def test_the_candidate_holds_no_fd_and_no_module_of_the_worker(pool: SandboxPool) -> None:
    source = (
        "import os, sys\ndef f():\n    return os.listdir('/proc/self/fd'), sorted(sys.modules)\n"
    )
    with open(os.devnull) as _held_open_by_the_worker:
        reply = pool.call(source, "f", [[]], LIMITS)
    fds, modules = _only_value(reply)
    assert set(fds) <= {"0", "1", "2", "3", "4"}  # stdio, result pipe, the listing itself
    top_level = {name.split(".")[0] for name in modules}
    assert not top_level & {"numpy", "pydantic", "sqlalchemy", "redis", "httpx", "pytest"}


def test_the_candidate_cannot_reach_the_network(pool: SandboxPool) -> None:
    if not (pool.isolation and pool.isolation.no_network):
        pytest.skip("an empty network namespace needs root (or CAP_SYS_ADMIN)")
    source = (
        "import socket\n"
        "def f(port):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=1).close()\n"
        "    except OSError as exc:\n"
        "        return str(exc)\n"
        "    return 'connected'\n"
    )
    with socket.create_server(("127.0.0.1", 0)) as listener:
        reply = pool.call(source, "f", [[listener.getsockname()[1]]], LIMITS)
    assert reply.ok, reply
    assert _only_value(reply) != "connected"


def test_as_root_the_candidate_runs_as_an_unprivileged_uid(pool: SandboxPool) -> None:
    if not (pool.isolation and pool.isolation.unprivileged):
        pytest.skip("not root, or the Python installation is unreadable to other users")
    reply = pool.call(
        "import os\ndef f():\n    return os.getuid(), os.getgid()\n", "f", [[]], LIMITS
    )
    uid, gid = _only_value(reply)
    assert uid != 0 and gid != 0


def test_no_state_survives_from_one_call_to_the_next(pool: SandboxPool) -> None:
    source = (
        "import os\n"
        "counter = 0\n"
        "def f():\n"
        "    global counter\n"
        "    counter += 1\n"
        "    open('state.txt', 'w').write('left behind')\n"
        "    return counter, os.getcwd()\n"
    )
    directories = set()
    for _ in range(4):  # every server of the pool, more than once
        reply = pool.call(source, "f", [[]], LIMITS)
        count, directory = _only_value(reply)
        assert count == 1
        directories.add(directory)
    assert len(directories) == 4
    deadline = time.monotonic() + 5.0  # removed right after each reply
    while any(Path(d).exists() for d in directories) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(Path(d).exists() for d in directories)


def test_a_timeout_kills_the_childs_whole_process_group(pool: SandboxPool) -> None:
    source = (
        "import os, time\n"
        "def f():\n"
        "    if os.fork() == 0:\n"
        "        print(os.getpid(), flush=True)\n"
        "        time.sleep(1000)\n"
        "    while True:\n"
        "        time.sleep(0.01)\n"
    )
    reply = pool.call(source, "f", [[]], SHORT)
    assert reply.error_kind is SandboxErrorKind.TIMEOUT
    grandchild = int(reply.stdout.split()[0])
    assert _eventually_dead(grandchild)


@pytest.mark.parametrize("escape", [False, True])
def test_descendants_left_running_by_a_finished_call_are_killed(
    pool: SandboxPool, escape: bool
) -> None:
    if escape and not (pool.isolation and pool.isolation.subreaper):
        pytest.skip("killing descendants that left the group needs a subreaper")
    source = (
        "import os, time\n"
        "def f(escape):\n"
        "    read, write = os.pipe()\n"
        "    if os.fork() == 0:\n"
        "        if escape:\n"
        "            os.setsid()\n"
        "        os.write(write, str(os.getpid()).encode())\n"
        "        time.sleep(1000)\n"
        "    return int(os.read(read, 32))\n"
    )
    reply = pool.call(source, "f", [[escape]], LIMITS)
    assert reply.values is not None
    (grandchild,) = reply.values
    assert isinstance(grandchild, int)
    assert _eventually_dead(grandchild)


def test_a_fork_bomb_is_contained_and_leaves_no_process_behind(pool: SandboxPool) -> None:
    if not (pool.isolation and pool.isolation.unprivileged):
        pytest.skip("the process limit binds only an unprivileged uid")
    source = (
        "import os\n"
        "def f():\n"
        "    print(os.getuid(), flush=True)\n"
        "    while True:\n"
        "        os.fork()\n"
    )
    reply = pool.call(source, "f", [[]], SHORT)
    assert not reply.ok
    uid = int(reply.stdout.split()[0])
    servers = pool.server_pids()
    deadline = time.monotonic() + 5.0
    while _processes_of(uid, besides_children_of=servers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _processes_of(uid, besides_children_of=servers) == []
    _assert_pool_works(pool)


def _processes_of(uid: int, *, besides_children_of: list[int]) -> list[int]:
    """Live processes of ``uid``, leaving out zombies and the servers' waiting children."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if parent not in besides_children_of and _alive(int(entry.name)):
                    pids.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return pids


# ----------------------------------------------------------------------------- the pool


def test_a_dead_server_is_a_crash_for_its_call_and_is_restarted() -> None:
    with SandboxPool(size=1) as fresh:
        (server,) = fresh.server_pids()
        os.kill(server, signal.SIGKILL)
        reply = fresh.call("def f():\n    return 1\n", "f", [[]], LIMITS)
        assert reply.error_kind is SandboxErrorKind.CRASH
        _assert_pool_works(fresh)
        assert fresh.server_pids() != [server]


def test_a_hung_server_holds_its_caller_no_longer_than_the_wall_limit_and_a_grace() -> None:
    with SandboxPool(size=1, reply_grace_s=0.5) as fresh:
        (server,) = fresh.server_pids()
        os.kill(server, signal.SIGSTOP)
        started = time.monotonic()
        reply = fresh.call("def f():\n    return 1\n", "f", [[]], SHORT)
        assert reply.error_kind is SandboxErrorKind.CRASH
        assert time.monotonic() - started < SHORT.wall_s + 0.5 + 3.0
        assert _eventually_dead(server)
        _assert_pool_works(fresh)


def test_concurrent_callers_each_get_their_own_answer(pool: SandboxPool) -> None:
    source = "def square(x):\n    return x * x\n"
    with ThreadPoolExecutor(max_workers=6) as threads:
        replies = list(threads.map(lambda x: pool.call(source, "square", [[x]], LIMITS), range(12)))
    assert [reply.values for reply in replies] == [(x * x,) for x in range(12)]


def test_a_closed_pool_refuses_calls() -> None:
    fresh = SandboxPool(size=1)
    with pytest.raises(SandboxUnavailable):
        fresh.call("def f():\n    return 1\n", "f", [[]], LIMITS)
    fresh.start()
    fresh.close()
    with pytest.raises(SandboxUnavailable):
        fresh.call("def f():\n    return 1\n", "f", [[]], LIMITS)
    assert fresh.server_pids() == []


# ----------------------------------------------------------------------------- isolation layers


def test_an_unknown_isolation_layer_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown isolation layers \\['sandbox'\\]"):
        SandboxPool(size=1, disabled=["sandbox"])


def test_disabled_layers_are_reported_off_and_the_rest_as_the_machine_allows() -> None:
    everything = (
        "unprivileged",
        "no_network",
        "private_ipc",
        "private_shm",
        "subreaper",
        "landlock",
        "seccomp",
    )
    with SandboxPool(size=1, disabled=everything) as bare:
        assert bare.isolation == Isolation(
            unprivileged=False,
            no_network=False,
            private_ipc=False,
            private_shm=False,
            subreaper=False,
            landlock=False,
            seccomp=False,
        )
        _assert_pool_works(bare)


def test_landlock_and_seccomp_apply_where_the_kernel_has_them(pool: SandboxPool) -> None:
    isolation = pool.isolation
    if not (isolation and isolation.landlock and isolation.seccomp):
        pytest.skip(f"this kernel lacks Landlock or seccomp: {isolation}")
    source = (
        "import os, socket\n"
        "def f():\n"
        "    seen = []\n"
        "    for attempt in (lambda: socket.socket(), lambda: open('/tmp/x', 'w'),\n"
        "                    lambda: os.listdir('/proc'), lambda: os.listdir('/etc')):\n"
        "        try:\n"
        "            attempt()\n"
        "            seen.append('allowed')\n"
        "        except PermissionError as exc:\n"
        "            seen.append(exc.strerror)\n"
        "    open('mine.txt', 'w').write('ok')\n"
        "    return seen, open('mine.txt').read(), sorted(os.listdir('/proc/self/fd'))[:3]\n"
    )
    denied, own_file, own_fds = _only_value(pool.call(source, "f", [[]], LIMITS))
    assert denied == ["Operation not permitted", *["Permission denied"] * 3]
    assert own_file == "ok"
    assert own_fds == ["0", "1", "2"]


# ----------------------------------------------------------------------------- processes


def test_the_candidate_may_run_the_interpreter_and_nothing_else(pool: SandboxPool) -> None:
    source = (
        "import os, subprocess, sys\n"
        "def f():\n"
        "    ran = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True,\n"
        "                         text=True, timeout=30)\n"
        "    with open('tool', 'w') as tool:\n"
        "        tool.write(f'#!{sys.executable}\\nprint(1)\\n')\n"
        "    os.chmod('tool', 0o755)\n"
        "    refused = []\n"
        "    for command in (['/bin/sh', '-c', 'true'], ['./tool']):\n"
        "        try:\n"
        "            subprocess.run(command, timeout=30)\n"
        "            refused.append('ran')\n"
        "        except PermissionError as exc:\n"
        "            refused.append(exc.strerror)\n"
        "    return ran.stdout, ran.stderr, refused\n"
    )
    stdout, stderr, refused = _only_value(pool.call(source, "f", [[]], LIMITS))
    assert (stdout, stderr) == ("42\n", "")
    if pool.isolation and pool.isolation.landlock:  # no execution but the interpreter's
        assert refused == ["Permission denied", "Permission denied"]


PROBE = """\
import os, socket
for attempt in (lambda: socket.socket(), lambda: open('/tmp/x', 'w'),
                lambda: os.listdir('/proc'), lambda: __import__('codevolve')):
    try:
        attempt()
        print('allowed')
    except (PermissionError, ImportError) as exc:
        print(type(exc).__name__)
try:
    held = bytearray(1 << 30)  # 1 GiB, past the call's memory limit
    print('allowed')
except MemoryError:
    print('MemoryError')
print(sorted(os.environ))
"""


def test_the_interpreter_run_by_a_candidate_is_held_like_the_candidate(pool: SandboxPool) -> None:
    isolation = pool.isolation
    if not (isolation and isolation.landlock and isolation.seccomp):
        pytest.skip(f"this kernel lacks Landlock or seccomp: {isolation}")
    source = (
        "import subprocess, sys\n"
        "def f(probe):\n"
        "    ran = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True)\n"
        "    return ran.stdout.splitlines(), ran.stderr\n"
    )
    lines, stderr = _only_value(pool.call(source, "f", [[PROBE]], LIMITS))
    assert lines == [
        "PermissionError",
        "PermissionError",
        "PermissionError",
        "ModuleNotFoundError",
        "MemoryError",
        "['HOME', 'LANG', 'PATH', 'TMPDIR']",
    ], stderr


def test_multiprocessing_works_and_dev_shm_is_private_and_emptied_after_each_call(
    pool: SandboxPool,
) -> None:
    if not (pool.isolation and pool.isolation.private_shm):
        pytest.skip("a /dev/shm of the server's own needs root (a mount namespace)")
    source = (
        "import multiprocessing, os\n"
        "def square(x):\n"
        "    return x * x\n"
        "def f():\n"
        "    seen = sorted(os.listdir('/dev/shm'))\n"
        "    with multiprocessing.Pool(2) as workers:\n"
        "        squares = workers.map(square, range(5))\n"
        "    queue = multiprocessing.Queue()\n"
        "    child = multiprocessing.Process(target=queue.put, args=(squares,))\n"
        "    child.start()\n"
        "    got = queue.get(timeout=30)\n"
        "    child.join(30)\n"
        "    open('/dev/shm/state', 'w').write('left for the next call')\n"
        "    return seen, got\n"
    )
    before = set(os.listdir("/dev/shm"))
    for _ in range(3):  # two servers: some call runs where an earlier one left its file
        assert _only_value(pool.call(source, "f", [[]], LIMITS)) == [[], [0, 1, 4, 9, 16]]
    assert set(os.listdir("/dev/shm")) == before


def test_a_grandchild_interpreter_is_killed_with_its_call_at_the_wall_limit(
    pool: SandboxPool,
) -> None:
    source = (
        "import subprocess, sys, time\n"
        "def f():\n"
        "    sleeper = [sys.executable, '-c', 'import time; time.sleep(1000)']\n"
        "    for escape in (False, True):\n"
        "        child = subprocess.Popen(sleeper, start_new_session=escape)\n"
        "        print(child.pid, flush=True)\n"
        "    while True:\n"
        "        time.sleep(0.01)\n"
    )
    reply = pool.call(source, "f", [[]], SHORT)
    assert reply.error_kind is SandboxErrorKind.TIMEOUT
    in_group, escaped = (int(pid) for pid in reply.stdout.split())
    assert _eventually_dead(in_group)
    if pool.isolation and pool.isolation.subreaper:
        assert _eventually_dead(escaped)


def test_only_the_interpreter_and_its_loader_may_be_executed() -> None:
    plan = _confine.Plan(ctypes.CDLL(None, use_errno=True), landlock=True, seccomp=False)
    if not plan.abi:
        pytest.skip("this kernel lacks Landlock")
    executable, *loader = plan.run_files
    assert executable == os.path.realpath(sys.executable)
    assert [os.path.basename(path).startswith("ld-") for path in loader] == [True]
