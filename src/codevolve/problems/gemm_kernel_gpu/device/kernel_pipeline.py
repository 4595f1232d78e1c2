"""gemm-kernel-gpu's judge as a pipeline that keeps the device busy (trusted code of the device
process).

Every ``kernel.measure`` job (kernel_jobs.py) runs in a thread of its own in the device process
(a concurrent job: device_process.py) and passes through two lanes:

1. **compile** (kernel_compile.py): its kernels compiled for the device's GPU in a caged compile
   runner that has no GPU, up to ``compile_workers`` programs at once on the host's cores, while
   the device times other programs;
2. **timing**: one thread that takes the device (``device_lane``) and, in each pass, every
   judging whose compile is done (up to ``lane_batch``): it checks and times each candidate in a
   runner of its own, which starts with its compiled kernels, then times cuBLAS in one trusted
   runner for the pass's shapes that no judging timed within ``reference_age_s``
   (kernel_references.py), and answers them all.

The timing lane never waits on a compile: a judging enters it when its compile is done, so a
program with nothing to compile is timed while another still compiles, and a program whose
compile hangs is ended by the compile lane's deadline without holding the device. A program the
compile lane finds not loading is answered from there without touching the device. Whenever a
compile ends or a candidate is timed, every judging still waiting tells its worker it is alive
(``alive``): a judging queued behind others is not taken for a hung one.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from codevolve.evaluator_workers.gpu.device_process import device_lane
from codevolve.evaluator_workers.gpu.remote import REQUEST_TIMEOUT_S
from codevolve.evaluator_workers.gpu.runner_link import RunnerPool
from codevolve.problems.gemm_kernel_gpu.device.kernel_compile import (
    COMPILE_TIMEOUT_S,
    Compiled,
    CompileLane,
    Target,
)
from codevolve.problems.gemm_kernel_gpu.device.kernel_judge import (
    Judging,
    MeasureSettings,
    new_reply,
    num_sms_of,
)
from codevolve.problems.gemm_kernel_gpu.device.kernel_references import References

# The settings a device process reads from its environment (PipelineSettings.from_environment).
COMPILE_WORKERS_ENV = "CODEVOLVE_KERNEL_COMPILE_WORKERS"
COMPILE_TARGET_ENV = "CODEVOLVE_KERNEL_COMPILE_TARGET"
LANE_BATCH_ENV = "CODEVOLVE_KERNEL_LANE_BATCH"
REFERENCE_AGE_ENV = "CODEVOLVE_KERNEL_REFERENCE_AGE_S"
# seconds one request to a timing runner may take when every kernel it launches was compiled
# ahead: a batch of calls, no compile (a hung kernel holds the device this long, not 300 s)
COMPILED_REQUEST_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """How a device process judges gemm-kernel-gpu programs."""

    compile_workers: int  # programs compiled at once (0: none; timing runners compile)
    target: Target | None  # the GPU compiled for (None: the compile lane is off)
    lane_batch: int = 8  # judgings checked and timed in one pass of the timing lane
    reference_age_s: float = 300.0  # cuBLAS's time of a shape is reused this long (0: never)
    compile_timeout_s: float = COMPILE_TIMEOUT_S

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], device: str) -> PipelineSettings:
        """From :data:`COMPILE_WORKERS_ENV` (default: half the host's cores past two, 1 to 8),
        :data:`COMPILE_TARGET_ENV` (``cuda:90``; default: the CUDA device's own, none on the
        CPU), :data:`LANE_BATCH_ENV` (default 8) and :data:`REFERENCE_AGE_ENV` (default
        300)."""
        cores = len(os.sched_getaffinity(0))
        workers = int(environ.get(COMPILE_WORKERS_ENV, min(8, max(1, (cores - 2) // 2))))
        named = environ.get(COMPILE_TARGET_ENV, "")
        target = Target.parse(named) if named else _own_target(device)
        return cls(
            compile_workers=max(0, workers),
            target=target,
            lane_batch=max(1, int(environ.get(LANE_BATCH_ENV, 8))),
            reference_age_s=max(0.0, float(environ.get(REFERENCE_AGE_ENV, 300.0))),
        )


def _own_target(device: str) -> Target | None:
    if device != "cuda":
        return None  # the CPU runs Triton's interpreter: nothing to compile
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return Target("cuda", 10 * major + minor)


@dataclass(slots=True)
class _Waiting:
    """A judging whose compile is done, waiting for the timing lane."""

    source: str
    settings: MeasureSettings
    compiled: Compiled
    reply: dict[str, Any] | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Pipeline:
    """The compile lane and the timing lane of one device process (thread-safe)."""

    def __init__(self, settings: PipelineSettings, *, device: str, runners: RunnerPool) -> None:
        self.settings = settings
        self.device = device
        self.runners = runners
        num_sms = num_sms_of(device)
        self.references = References(
            device, runners, num_sms=num_sms, max_age_s=settings.reference_age_s
        )
        self.compile_lane = CompileLane(
            width=settings.compile_workers,
            target=settings.target,
            num_sms=num_sms,
            device=device,
            rules=runners.settings.rules,
            timeout_s=settings.compile_timeout_s,
        )
        self._ready: list[_Waiting] = []
        self._changed = threading.Condition()
        self._closed = False
        self._alive: dict[int, Callable[[], None]] = {}  # every judging in the pipeline
        self._keys = itertools.count()
        self._lane: threading.Thread | None = None
        self.passes = 0  # passes of the timing lane so far
        self.timed = 0  # judgings timed so far

    def measure(
        self, source: str, settings: MeasureSettings, alive: Callable[[], None] = lambda: None
    ) -> dict[str, Any]:
        """Judge ``source``: compiled in the compile lane, then checked and timed in the timing
        lane; kernel_jobs.py's reply."""
        with self._changed:
            key = next(self._keys)
            self._alive[key] = alive
        try:
            shapes = list(dict.fromkeys((*settings.check_shapes, *settings.shapes)))
            compiled = self.compile_lane.compile(source, shapes)
            self._moved()
            if compiled.load_error:
                reply = new_reply(self.device)
                reply["load_error"] = compiled.load_error
                reply["compile"] = _compile_figures(compiled)
                return reply
            waiting = _Waiting(source, settings, compiled)
            with self._changed:
                if self._closed:
                    raise RuntimeError("the judge was shut down")
                self._ready.append(waiting)
                self._start_lane()
                self._changed.notify_all()
            waiting.done.wait()
            if waiting.error is not None:
                raise waiting.error
            assert waiting.reply is not None
            return waiting.reply
        finally:
            with self._changed:
                self._alive.pop(key, None)

    @property
    def ready(self) -> int:
        """Judgings compiled and waiting for the timing lane."""
        with self._changed:
            return len(self._ready)

    def _moved(self) -> None:
        """Something ended: every judging still waiting is alive."""
        with self._changed:
            waiting = list(self._alive.values())
        for alive in waiting:
            alive()

    def _start_lane(self) -> None:
        if self._lane is None:
            self._lane = threading.Thread(target=self._serve, name="timing-lane", daemon=True)
            self._lane.start()

    def _serve(self) -> None:
        """The timing lane: pass after pass over the judgings whose compile is done."""
        while True:
            with self._changed:
                while not self._ready and not self._closed:
                    self._changed.wait()
            with device_lane():
                pass  # the device is free (another job may have held it): what is ready now
            with self._changed:
                if self._closed:
                    batch, self._ready = self._ready, []
                    for waiting in batch:
                        waiting.error = RuntimeError("the judge was shut down")
                        waiting.done.set()
                    return
                batch = self._ready[: self.settings.lane_batch]
                del self._ready[: len(batch)]
            try:
                self._pass(batch)
            except BaseException as exc:  # noqa: BLE001 - the judge's own failure: each job's
                for waiting in batch:
                    if not waiting.done.is_set():
                        waiting.error = exc
                        waiting.done.set()

    def _pass(self, batch: list[_Waiting]) -> None:
        """Each judging's candidate checked and timed, then cuBLAS for all of them."""
        judged: list[tuple[_Waiting, Judging, dict[str, Any]]] = []
        for waiting in batch:
            timeout_s = (
                COMPILED_REQUEST_TIMEOUT_S if waiting.compiled.complete else REQUEST_TIMEOUT_S
            )
            with device_lane():
                judging = Judging(
                    waiting.source,
                    waiting.settings,
                    runners=self.runners,
                    references=self.references,
                    compiled=waiting.compiled.folder,
                    timeout_s=timeout_s,
                )
                reply = judging.run()
            reply["compile"] = _compile_figures(waiting.compiled)
            judged.append((waiting, judging, reply))
            self._moved()
        started = time.perf_counter()
        with device_lane():
            wanted = [key for _, judging, _ in judged for key in judging.wanted()]
            cublas = self.references.times(wanted)
        seconds = time.perf_counter() - started
        self.passes += 1
        self.timed += len(judged)
        for waiting, judging, reply in judged:
            reply["lane"] = {"pass": self.passes, "judgings": len(judged)}
            reply["seconds"]["reference"] = seconds  # the pass's, shared
            waiting.reply = judging.finish(reply, cublas)
            waiting.done.set()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            lane = self._lane
        if lane is not None:
            lane.join(timeout=600)
        self.compile_lane.close()


def _compile_figures(compiled: Compiled) -> dict[str, Any]:
    return {
        "ahead": compiled.folder is not None,
        "complete": compiled.complete,
        "seconds": round(compiled.seconds, 3),
        "note": compiled.note,
    }
