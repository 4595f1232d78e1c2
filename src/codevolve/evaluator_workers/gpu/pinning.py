"""One GPU worker per device: which GPUs a host offers, and pinning a worker to one of them.

``codevolve worker --capability gpu --gpus all`` starts one worker process per visible GPU, each
with ``CUDA_VISIBLE_DEVICES`` naming its GPU alone, so its device process sees exactly one
device; the embedded mode does the same with one device process per GPU in one process. The
device's index travels with every GPU evaluation (the GPU stage's ``device_index`` artifact).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

from codevolve.core.device import GPU, needed_capabilities
from codevolve.core.plugin import DeviceJob
from codevolve.evaluator_workers.errors import WorkerError
from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
from codevolve.evaluator_workers.nvidia import query_gpus

VISIBLE = "CUDA_VISIBLE_DEVICES"
INDEX = "CODEVOLVE_DEVICE_INDEX"
# ``--gpus cpu``: one device process that sees no GPU and runs the device jobs that can run on
# a CPU (those declared ``cpu``: the KernelBench judge), to try a kernel problem or test the
# pipeline without a GPU.
CPU_DEVICE = "cpu"
# Triton kernels run in Triton's interpreter there (numpy on the CPU: right, and slow).
CPU_ENV = {"TRITON_INTERPRET": "1", "CODEVOLVE_KB_DEVICE": "cpu"}


class GpuSelectionError(WorkerError):
    """A ``--gpus`` value names no GPU of this host."""


def _query_gpu_ids() -> list[str]:
    """Indices of the host's GPUs as ``nvidia-smi`` numbers them; empty without a driver."""
    return query_gpus("index")


def visible_gpus(
    environ: Mapping[str, str] | None = None, *, query: Callable[[], list[str]] = _query_gpu_ids
) -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else every GPU."""
    env = os.environ if environ is None else environ
    if VISIBLE in env:
        return [part.strip() for part in env[VISIBLE].split(",") if part.strip()]
    return query()


def select_gpus(spec: str, visible: Sequence[str]) -> list[str]:
    """The GPUs a ``--gpus`` value names: ``all``, ``none``, ``cpu`` (:data:`CPU_DEVICE`), or
    ids separated by commas."""
    spec = spec.strip()
    if spec == CPU_DEVICE:
        return [CPU_DEVICE]
    if spec == "all":
        return list(visible)
    if spec in ("", "none"):
        return []
    chosen = [part.strip() for part in spec.split(",") if part.strip()]
    unknown = [gpu for gpu in chosen if gpu not in visible]
    if unknown:
        raise GpuSelectionError(f"--gpus {spec}: no GPU {', '.join(unknown)}; visible: {visible}")
    if len(set(chosen)) != len(chosen):
        raise GpuSelectionError(f"--gpus {spec}: a GPU is named twice")
    return chosen


def device_index(gpu: str, position: int) -> int:
    """The index recorded with evaluations: the GPU's number, or its position for UUID ids."""
    return int(gpu) if gpu.isdigit() else position


def pinned_env(gpu: str, position: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker process that serves ``gpu`` alone."""
    env = dict(os.environ if base is None else base)
    env[VISIBLE] = gpu
    env[INDEX] = str(device_index(gpu, position))
    return env


def open_devices(gpus: Sequence[str], jobs: Iterable[DeviceJob]) -> list[DeviceProcess]:
    """One device process per GPU serving ``jobs`` (the problems' device jobs; started lazily,
    on its first job); close each when done. :data:`CPU_DEVICE` is a device process with every
    GPU hidden, serving the jobs that run on a CPU."""
    served = tuple(jobs)
    targets = {job.name: job.target for job in served}
    cpu_targets = {job.name: job.target for job in served if job.cpu}
    return [
        DeviceProcess("", index=0, jobs=cpu_targets, env=CPU_ENV)
        if gpu == CPU_DEVICE
        else DeviceProcess(gpu, index=device_index(gpu, i), jobs=targets)
        for i, gpu in enumerate(gpus)
    ]


def run_pinned(commands: Sequence[list[str]], gpus: Sequence[str]) -> int:
    """Run ``commands[i]`` pinned to ``gpus[i]``, one process each, until all end.

    SIGTERM and SIGINT are passed on to every process (each drains its evaluations); the result is
    the worst exit code.
    """
    if len(commands) != len(gpus):
        raise ValueError("one command per GPU")
    processes = [
        subprocess.Popen(command, env=pinned_env(gpu, i))
        for i, (command, gpu) in enumerate(zip(commands, gpus, strict=True))
    ]

    def forward(number: int, frame: object) -> None:
        del frame
        for process in processes:
            if process.poll() is None:
                process.send_signal(number)

    previous = {
        number: signal.signal(number, forward) for number in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        codes = [process.wait() for process in processes]
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return max(codes, default=0)


def embedded_gpus(
    stages: Sequence[object], requested: str | None, visible: Sequence[str] | None = None
) -> list[str]:
    """The GPUs an embedded run uses: ``requested`` (a ``--gpus`` value), or by default the
    first visible GPU when a stage of the problem needs one, else none."""
    if requested is None and GPU not in needed_capabilities(stages):
        return []  # no GPU stage: do not even ask the driver
    if requested is not None and requested.strip() == CPU_DEVICE:
        return [CPU_DEVICE]
    visible = visible_gpus() if visible is None else visible
    if requested is not None:
        return select_gpus(requested, visible)
    return list(visible[:1])


def worker_slots(
    loops: int, devices: Sequence[DeviceProcess]
) -> list[tuple[str, int, DeviceProcess | None]]:
    """(name, loops, device) of each embedded worker: one per device, sharing ``loops`` between
    them (at least one each), or one CPU worker without devices."""
    if not devices:
        return [("local", loops, None)]
    share = max(1, loops // len(devices))
    return [(f"local-gpu{device.index}", share, device) for device in devices]


def pinned_commands(argv: Sequence[str], gpus: Sequence[str]) -> list[list[str]]:
    """One worker command per GPU: ``argv`` (the arguments after the program name) with its
    ``--gpus`` value replaced by that GPU's id, run by this interpreter."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--gpus":
            skip = True
        elif not arg.startswith("--gpus="):
            kept.append(arg)
    program = [sys.executable, "-m", "codevolve.services.cli"]
    return [[*program, *kept, "--gpus", gpu] for gpu in gpus]
