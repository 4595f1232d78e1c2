"""The corpus of hostile programs through the real sandbox and the real gemm-tiling cascade.

Each case names the attack and the defence that stops it
(``fork_bomb->rlimit_nproc_and_group_kill``). Every case runs under the pool set-ups a machine
may have: every layer; no namespaces, no private /dev/shm and no unprivileged uid (a worker that
is not root; it still has the subreaper, which needs no privilege); no Landlock and no seccomp (an
old kernel, as root). A case whose defences a set-up lacks is skipped
with that reason; a case that reaches a limit runs under one set-up only, to keep the suite fast.
After each, the evaluation has ended failed (or evaluated with the honest score), the pool serves
the next program, and nothing outside the sandbox changed.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.problem import ProblemSpec
from codevolve.core.program import Evaluation, ProgramStatus
from codevolve.core.task import Task
from codevolve.evaluator_workers._confine import landlock_abi
from codevolve.evaluator_workers.cascade import run_cascade
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems.gemm_tiling.problem import gemm_tiling_problem
from tests.security.corpus import ATTACKS, Attack

LIMITS = SandboxLimits(wall_s=2.0, cpu_s=2.0, memory_mb=256, output_bytes=4096)
SET_UPS: dict[str, tuple[str, ...]] = {
    "all_layers": (),
    "no_namespaces": ("unprivileged", "no_network", "private_ipc", "private_shm"),
    "no_landlock_no_seccomp": ("landlock", "seccomp"),
}
SECRETS = {  # in the worker's environment while the pools start: none may reach a candidate
    "CODEVOLVE_DATABASE_URL": "postgresql://codevolve:secret@127.0.0.1:5432/prod",
    "CODEVOLVE_REDIS_URL": "redis://:secret@127.0.0.1:6379/0",
    "DATABASE_URL": "postgresql://secret@db/prod",
    "REDIS_URL": "redis://secret@cache",
    "PGPASSWORD": "secret",
    "REDISCLI_AUTH": "secret",
    "OPENAI_API_KEY": "sk-secret",
    "GITHUB_TOKEN": "ghp_secret",
    "AWS_SECRET_ACCESS_KEY": "secret",
}
EXPERT_SCORE = 1.0
LANDLOCK_ABI = landlock_abi(ctypes.CDLL(None, use_errno=True))


class Scene:
    """What lies outside the sandbox: a root-owned directory with a secret, a Unix socket."""

    def __init__(self, root: Path) -> None:
        self.canary = root / "canary"
        self.canary.mkdir(mode=0o755)
        os.chmod(root, 0o755)
        os.chmod(self.canary, 0o755)
        secret = self.canary / "secret.env"
        secret.write_text("CODEVOLVE_DATABASE_URL=postgresql://codevolve:secret@db/prod\n")
        secret.chmod(0o600)
        self.listener = socket.socket(socket.AF_UNIX)
        self.socket_path = self.canary / "db.sock"
        self.listener.bind(str(self.socket_path))
        self.socket_path.chmod(0o777)
        self.listener.listen()
        self.listener.setblocking(False)
        self.hostile_tmp = Path("/tmp") / f"codevolve-hostile-{uuid.uuid4().hex}"
        self.marker = f"codevolve-marker-{uuid.uuid4().hex}"

    def source(self, attack: Attack) -> str:
        return (
            attack.source.replace("CANARY_DIR", str(self.canary))
            .replace("HOSTILE_TMP", str(self.hostile_tmp))
            .replace("UNIX_SOCKET", str(self.socket_path))
            .replace("WORKER_PID", str(os.getpid()))
            .replace("MARKER", self.marker)
        )

    def leftovers(self) -> list[str]:
        """What a candidate left outside the sandbox: files, and processes it started."""
        name = self.hostile_tmp.name
        places = [self.hostile_tmp, Path("/dev/shm") / name, Path("/dev/shm") / f"sem.{name}"]
        found = [str(place) for place in places if place.exists()]
        marker = self.marker.encode()
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes():
                    found.append(f"process {entry.name}")
            except OSError:  # it ended meanwhile
                continue
        return found

    def fingerprint(self) -> dict[str, str]:
        return {
            path.name: hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "-"
            for path in sorted(self.canary.iterdir())
        }

    def nobody_connected(self) -> bool:
        try:
            self.listener.accept()[0].close()
        except BlockingIOError:
            return True
        return False


@pytest.fixture(scope="module")
def pools() -> Iterator[dict[str, SandboxPool]]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SECRETS.items():
            patch.setenv(name, value)
        started = {name: SandboxPool(size=1, disabled=off) for name, off in SET_UPS.items()}
        for pool in started.values():
            pool.start()
    try:
        yield started
    finally:
        for pool in started.values():
            pool.close()


@pytest.fixture(scope="module")
def problem() -> ProblemSpec:
    return gemm_tiling_problem()


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    made = Scene(tmp_path)
    try:
        yield made
    finally:
        made.listener.close()
        made.hostile_tmp.unlink(missing_ok=True)


def _cases() -> list[object]:
    cases: list[object] = []
    for attack in ATTACKS:
        for set_up in SET_UPS:
            if attack.costly and set_up != "all_layers":
                continue
            cases.append(pytest.param(attack, set_up, id=f"{attack.id}[{set_up}]"))
    return cases


def _evaluate(problem: ProblemSpec, pool: SandboxPool, source: str) -> Evaluation:
    task = Task(
        program_id=uuid.uuid4().hex, job_id="security", problem=problem.name,
        source=source, seed=7, limits=LIMITS,
    )  # fmt: skip
    return run_cascade(problem, task, pool, worker="security")


def _server_children(pool: SandboxPool) -> list[int]:
    (server,) = pool.server_pids()
    listing = Path(f"/proc/{server}/task/{server}/children").read_text()
    return [int(pid) for pid in listing.split()]


def _eventually(condition: Callable[[], bool], within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def _assert_contained(attack: Attack, evaluation: Evaluation) -> None:
    if evaluation.status is ProgramStatus.FAILED:
        error = evaluation.error or ""
        assert attack.errors, f"failed, but the attack should end honestly: {error}"
        assert any(text in error for text in attack.errors), error
        assert evaluation.score is None
        return
    assert attack.honest_ok, f"{evaluation.status.value} with score {evaluation.score}"
    assert evaluation.status is ProgramStatus.EVALUATED
    assert evaluation.score == EXPERT_SCORE  # what the expert's configs earn, not a bit more


@pytest.mark.parametrize(("attack", "set_up"), _cases())
def test_a_hostile_program_is_stopped_and_changes_nothing_outside(
    attack: Attack,
    set_up: str,
    pools: dict[str, SandboxPool],
    problem: ProblemSpec,
    scene: Scene,
) -> None:
    pool = pools[set_up]
    isolation = pool.isolation
    assert isolation is not None
    present = {
        layer
        for layer in attack.needs
        if getattr(isolation, layer)
        and (layer != "landlock" or attack.landlock_abi <= LANDLOCK_ABI)
    }
    if attack.needs and not present:
        pytest.skip(
            f"needs one of {sorted(attack.needs)} (Landlock ABI >= {attack.landlock_abi}), which "
            f"this set-up lacks ({isolation}, Landlock ABI {LANDLOCK_ABI})"
        )
    before = scene.fingerprint()
    source = scene.source(attack)

    evaluation = _evaluate(problem, pool, source)
    _assert_contained(attack, evaluation)
    if attack.twice:
        _assert_contained(attack, _evaluate(problem, pool, source))

    assert scene.fingerprint() == before
    assert scene.nobody_connected()
    assert _eventually(lambda: not scene.leftovers()), scene.leftovers()
    assert _eventually(lambda: len(_server_children(pool)) == 1)  # only the next call's child
    reply = pool.call("def f(x):\n    return x + 1\n", "f", [[41]], LIMITS)
    assert reply.values == (42,), reply


@pytest.mark.parametrize("set_up", SET_UPS)
def test_the_honest_initial_program_scores_the_same_under_every_set_up(
    set_up: str, pools: dict[str, SandboxPool], problem: ProblemSpec
) -> None:
    evaluation = _evaluate(problem, pools[set_up], problem.initial_program)
    assert evaluation.status is ProgramStatus.EVALUATED, evaluation.error
    assert evaluation.score == EXPERT_SCORE


def test_the_corpus_has_at_least_25_distinct_attacks() -> None:
    assert len({attack.name for attack in ATTACKS}) == len(ATTACKS) >= 25
