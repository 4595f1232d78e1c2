"""The cascade of a KernelBench problem: the source rules on any CPU worker, then the judge.

1. ``static``: the candidate's source against the rules every ``ModelNew`` keeps
   (core/kernel_rules.py): allowed imports only, no streams, threads, seeding, try/except,
   monkeypatching or reaching the reference. Read, never run. Score 1.0. (A
   :class:`~codevolve.core.problem.SourceCheckStage` of ``check_model_new``: problem.py.)
2. ``judge`` (a worker's device): the trusted judge (problems/kernelbench/device/kb_judge.py) builds
   the reference and the candidate from the same seed, checks the candidate on fresh inputs from
   several seeds in three distributions (KernelBench's own ``get_inputs()``, the same values with
   random signs, and those times 100), then times it against PyTorch eager (interleaved, L2
   flushed, each round's output checked) and, when the problem asks, ``torch.compile``. Score:
   t_eager / t_candidate. A candidate wrong on any distribution fails, and the error says which
   verdicts it got: KernelBench's verdict alone (its inputs only) is kept as a metric, never as a
   pass. The ``torch.compile`` baseline adds ``compile_ms`` and ``speedup_compile``, the seconds
   its compiling took (``compile_seconds``) and whether Inductor's cache held it
   (``compile_cache_hit``, 1 or 0, where known); a reference that does not compile leaves the
   artifact ``compile_note`` ("compile baseline failed: ...") and is judged against eager.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from codevolve.core.device import GPU, Device
from codevolve.core.problem import Candidate, Threshold
from codevolve.core.program import CaseResult, StageResult
from codevolve.problems.kernelbench.spec import DISTRIBUTIONS, KernelSpec

JUDGE_JOB = "kb.judge"
CASE_PREFIX = "kb "
COMPILE_NOTE = "compile_note"  # the artifact of a compile baseline that failed


@dataclass(frozen=True, slots=True)
class JudgeStage:
    """Check and time ``ModelNew`` against the reference on the worker's device."""

    spec: KernelSpec
    name: str = "judge"
    threshold: Threshold | None = None
    capability: str = GPU

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del candidate, rng
        error = f"the {self.name} stage needs a worker with a device (capability 'gpu')"
        return StageResult(stage=self.name, passed=False, score=None, error=error)

    def payload(self, source: str, rng: np.random.Generator) -> dict[str, Any]:
        """The device job's request: fresh seeds every evaluation, so no answer can be kept."""
        settings = self.spec.settings
        return {
            "reference": self.spec.reference,
            "candidate": source,
            "seeds": [int(s) for s in rng.integers(2**31, size=settings.seeds)],
            "trials": settings.trials,
            "warmup": settings.warmup,
            "distributions": list(DISTRIBUTIONS),
            "forbid": list(settings.forbid),
            "baselines": list(settings.baselines),
            "time": True,
            "tolerance": settings.tolerance,
        }

    def run_on(self, candidate: Candidate, device: Device, rng: np.random.Generator) -> StageResult:
        answer = device.run(
            JUDGE_JOB, self.payload(candidate.source, rng), timeout_s=self.spec.settings.timeout_s
        )
        if not answer.ok:
            kind = "device fault" if answer.fault else "device error"
            return self._failed(f"{kind}: {answer.error}")
        if not isinstance(answer.value, dict):
            return self._failed(f"the device answered {type(answer.value).__name__}, not a dict")
        return self.judge(answer.value, device_index=device.index, source=candidate.source)

    def _failed(self, error: str, metrics: dict[str, float] | None = None) -> StageResult:
        return StageResult(
            stage=self.name, passed=False, score=None, error=error, metrics=metrics or {}
        )

    def judge(self, value: dict[str, Any], *, device_index: int, source: str = "") -> StageResult:
        """The stage result from the judge's reply (kb_judge.py's format)."""
        if value.get("load_error"):
            return self._failed(f"the program did not load: {value['load_error']}")
        verdicts: dict[str, str] = dict(value.get("verdicts") or {})
        metrics = {"correct_kernelbench": float(bool(value.get("correct_kernelbench")))}
        if value.get("problem"):
            return self._failed(str(value["problem"]), metrics)
        if not value.get("correct"):
            wrong = "; ".join(f"{d}: {v}" for d, v in verdicts.items() if v and not _skipped(v))
            note = (
                " (correct on KernelBench's own inputs only)"
                if value.get("correct_kernelbench")
                else ""
            )
            return self._failed(f"wrong result{note}: {wrong or 'no verdict'}", metrics)
        timing: dict[str, Any] = dict(value.get("timing") or {})
        t_candidate, t_eager = _ms(timing, "candidate_ms"), _ms(timing, "eager_ms")
        if t_candidate is None or t_eager is None:
            return self._failed("the judge returned no timing for a correct program", metrics)
        speedup = t_eager / t_candidate
        metrics.update(
            speedup_eager=speedup,
            candidate_ms=t_candidate,
            eager_ms=t_eager,
            max_abs_error=float(value.get("max_abs_error") or 0.0),
        )
        t_compile = _ms(timing, "compile_ms")
        if t_compile is not None:
            metrics["compile_ms"] = t_compile
            metrics["speedup_compile"] = t_compile / t_candidate
        compile_seconds = timing.get("compile_seconds")
        if isinstance(compile_seconds, int | float) and not isinstance(compile_seconds, bool):
            metrics["compile_seconds"] = float(compile_seconds)
        if timing.get("compile_cache") in ("hit", "miss", "partial"):
            metrics["compile_cache_hit"] = float(timing["compile_cache"] == "hit")
        uses_triton = float("triton.jit" in source)
        device_name = str((value.get("device") or {}).get("name", "the device"))
        artifacts = {"device_index": str(device_index), "device_name": device_name}
        if timing.get("compile_error"):
            artifacts[COMPILE_NOTE] = str(timing["compile_error"])[:400]
        return StageResult(
            stage=self.name,
            passed=True,
            score=speedup,
            metrics=metrics,
            features={"uses_triton": uses_triton, "speedup_eager": speedup},
            cases=(
                CaseResult(
                    key=CASE_PREFIX + self.spec.name,
                    cost=t_candidate,
                    detail=f"{speedup:.3f}x eager",
                ),
            ),
            feedback=_feedback(self.spec.name, metrics, value, device_name),
            artifacts=artifacts,
        )


def _skipped(verdict: str) -> bool:
    return verdict.startswith("skipped")


def _ms(timing: dict[str, Any], key: str) -> float | None:
    """A positive time in ms from the judge's reply, or None."""
    value = timing.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _feedback(name: str, metrics: dict[str, float], value: dict[str, Any], device: str) -> str:
    parts = [
        f"Correct on every input distribution; measured on {device}: "
        f"{metrics['candidate_ms']:.4f} ms against PyTorch eager {metrics['eager_ms']:.4f} ms "
        f"({metrics['speedup_eager']:.2f}x)"
    ]
    if "compile_ms" in metrics:
        parts.append(
            f"torch.compile {metrics['compile_ms']:.4f} ms ({metrics['speedup_compile']:.2f}x)"
        )
    note = str((value.get("timing") or {}).get("compile_error") or "")
    if note:
        parts.append(f"no torch.compile figure ({note})")
    ops = value.get("ops") or []
    if ops:
        parts.append("aten operators it ran: " + ", ".join(str(op) for op in ops[:12]))
    return f"{name}: " + "; ".join(parts) + "."
