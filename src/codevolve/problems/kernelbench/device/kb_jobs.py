"""The device job of KernelBench-format problems: judge a candidate against its reference.

``kb.judge``: ``{"reference": str, "candidate": str, "seeds": [int], "trials": int, "warmup":
int, "distributions": [str], "forbid": [str], "baselines": [str], "time": bool, "tolerance":
float | null}`` (every key but the two sources optional; defaults in
:class:`~codevolve.problems.kernelbench.device.kb_judge.JudgeSettings`) -> the judge's reply
(kb_judge.py). A malformed payload raises :class:`KbJobError` (an error reply; the process lives
on). A broken CUDA context or a candidate that tampered with the process raises something else:
the device process answers with a fault and recycles itself.

The device is ``cuda`` when torch sees one, else ``cpu``; ``CODEVOLVE_KB_DEVICE=cpu`` forces the
CPU. This module imports torch but not Triton, so a CPU-only machine serves it through
``DeviceProcess(gpu=None, jobs="codevolve.problems.kernelbench.device.kb_jobs")``; a GPU worker's
gemm_jobs table serves the same job (``kb.judge``) beside its own.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Callable
from typing import Any

from codevolve.evaluator_workers.errors import WorkerError
from codevolve.evaluator_workers.gpu import judging
from codevolve.evaluator_workers.gpu.cuda_device import device_info
from codevolve.evaluator_workers.gpu.judging import device, runners
from codevolve.problems.kernelbench.device.kb_baselines import REFERENCE_RUNNERS
from codevolve.problems.kernelbench.device.kb_inputs import DISTRIBUTIONS
from codevolve.problems.kernelbench.device.kb_judge import BASELINES, JudgeSettings, judge
from codevolve.problems.kernelbench.device.kb_loader import KbLoader

JUDGE_JOB = "kb.judge"
MAX_SEEDS = 16
MAX_TRIALS = 1000
MAX_WARMUP = 100
_KEYS = frozenset(
    {"reference", "candidate", "seeds", "trials", "warmup", "distributions", "forbid",
     "baselines", "time", "tolerance"}
)  # fmt: skip


class KbJobError(WorkerError):
    """A malformed ``kb.judge`` payload (an error reply; the device process lives on)."""


JobError = KbJobError  # the name the device process looks for in a jobs module


@functools.cache
def _loader() -> KbLoader:
    device()  # read the environment before the loader scrubs it
    if os.environ.get("TRITON_INTERPRET") == "1":
        # Triton's interpreter computes with numpy, which warns of every overflow a kernel's
        # exp meets on wide inputs; the judge compares the results, and the warnings would
        # only fill the user's terminal.
        warnings.filterwarnings(
            "ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter"
        )
    return KbLoader()


def shutdown() -> None:
    """End the runners this process started: the reference timers', then the pool's
    (judging.py)."""
    REFERENCE_RUNNERS.close()
    judging.shutdown()


def settings_from(payload: Any) -> tuple[str, str, JudgeSettings]:
    """The two sources and the settings of a ``kb.judge`` payload, or :class:`KbJobError`."""
    if not isinstance(payload, dict):
        raise KbJobError(f"{JUDGE_JOB} needs a dict payload")
    unknown = sorted(set(payload) - _KEYS)
    if unknown:
        raise KbJobError(f"{JUDGE_JOB}: unknown key {unknown[0]!r}")
    reference, candidate = payload.get("reference"), payload.get("candidate")
    if not isinstance(reference, str) or not isinstance(candidate, str):
        raise KbJobError(f"{JUDGE_JOB} needs strings 'reference' and 'candidate'")
    defaults = JudgeSettings()
    seeds = _ints(payload.get("seeds", list(defaults.seeds)), "seeds")
    if not 1 <= len(seeds) <= MAX_SEEDS:
        raise KbJobError(f"'seeds' holds 1 to {MAX_SEEDS} ints")
    settings = JudgeSettings(
        seeds=tuple(seeds),
        trials=_bounded(payload.get("trials", defaults.trials), "trials", 1, MAX_TRIALS),
        warmup=_bounded(payload.get("warmup", defaults.warmup), "warmup", 0, MAX_WARMUP),
        distributions=_choices(payload, "distributions", DISTRIBUTIONS, defaults.distributions),
        forbid=tuple(_strings(payload.get("forbid", []), "forbid")),
        baselines=_choices(payload, "baselines", BASELINES, defaults.baselines),
        time=_flag(payload.get("time", defaults.time)),
        tolerance=_tolerance(payload.get("tolerance")),
    )
    return reference, candidate, settings


def _ints(value: Any, key: str) -> list[int]:
    if not isinstance(value, list) or any(type(v) is not int for v in value):
        raise KbJobError(f"{key!r} is a list of ints, not {value!r}")
    return value


def _bounded(value: Any, key: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise KbJobError(f"{key!r} is an int from {low} to {high}, not {value!r}")
    return value


def _strings(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or any(not isinstance(v, str) for v in value):
        raise KbJobError(f"{key!r} is a list of strings, not {value!r}")
    return value


def _choices(
    payload: dict[str, Any], key: str, allowed: tuple[str, ...], default: tuple[str, ...]
) -> tuple[str, ...]:
    values = _strings(payload.get(key, list(default)), key)
    wrong = [v for v in values if v not in allowed]
    if wrong or not values or len(set(values)) != len(values):
        raise KbJobError(f"{key!r} lists distinct names of {', '.join(allowed)}, not {values!r}")
    return tuple(values)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise KbJobError(f"'time' is a bool, not {value!r}")
    return value


def _tolerance(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KbJobError(f"'tolerance' is a number or null, not {value!r}")
    if not (math.isfinite(value) and 0 < value < 1):
        raise KbJobError(f"'tolerance' is between 0 and 1, not {value!r}")
    return float(value)


def judge_job(payload: Any) -> dict[str, Any]:
    reference, candidate, settings = settings_from(payload)
    return judge(
        reference, candidate, settings, device=device(), loader=_loader(), runners=runners()
    )


def _info(payload: Any) -> Any:
    del payload
    return device_info(device())


JOBS: dict[str, Callable[[Any], Any]] = {"info": _info, JUDGE_JOB: judge_job}
