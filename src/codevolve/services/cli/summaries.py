"""Short human summaries of what ``evaluate`` and ``status`` print without ``--json``.

A screenful at most: the verdict and score, one line per cascade stage (and the lines of the
problem's per-case report, when it has one), or a job's state, counts and best program.
``--json`` keeps the full record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console


def print_evaluation(console: Console, result: dict[str, Any], report: Sequence[str] = ()) -> None:
    """Verdict, score and stages of one program; a failure's reason on one line; then the
    ``report`` lines (the problem's per-case report)."""
    score = "-" if result["score"] is None else f"{result['score']:.4f}"
    console.print(
        f"{result['program']} on {result['problem']}: {result['status']}, score {score}",
        markup=False,
    )
    for stage in result["stages"]:
        verdict = "passed" if stage["passed"] else "failed"
        stage_score = "" if stage["score"] is None else f" {stage['score']:.4f}"
        reason = "" if stage["passed"] else f"  {_one_line(stage.get('error') or '')}"
        console.print(f"  stage {stage['stage']}: {verdict}{stage_score}{reason}", markup=False)
        if stage["metrics"]:
            console.print(f"    {_metrics_line(stage['metrics'])}", markup=False)
        stopped = _threshold_note(stage.get("feedback") or "")
        if stopped:
            console.print(f"    {stopped}", markup=False)
    if result["status"] != "evaluated":
        console.print(f"reason: {failure_reason(result)}", markup=False)
    for line in report:
        console.print(line, markup=False)
    console.print("(--json prints the full record)", style="dim")


def _metrics_line(metrics: dict[str, float]) -> str:
    """``name value`` pairs of a stage's metrics, in the evaluator's order, on one line."""
    return ", ".join(f"{name} {value:.4g}" for name, value in metrics.items())


def _threshold_note(feedback: str) -> str:
    """The cascade's note on a stage below its threshold ("stopped here: ..." or "rejected:
    ..."), if the stage's feedback ends with one."""
    lines = feedback.strip().splitlines()
    last = lines[-1] if lines else ""
    return last if last.startswith(("stopped here: ", "rejected: ")) else ""


def failure_reason(result: dict[str, Any]) -> str:
    """The first failed stage's error (or threshold), else the evaluation's, as one line."""
    for stage in result["stages"]:
        why = stage.get("error") or _threshold_note(stage.get("feedback") or "")
        if not stage["passed"] and why:
            return f"stage {stage['stage']}: {_one_line(why)}"
    return _one_line(result.get("error") or result["status"])


def print_status(console: Console, status: dict[str, Any]) -> None:
    """A job's state, budget, program counts and best program, in a few lines."""
    problem = status.get("label") or status["problem"]
    console.print(f"job {status['job_id']} ({problem}): {status['state']}", markup=False)
    if status.get("error"):
        console.print(f"  note: {_one_line(status['error'])}", markup=False)
    console.print(
        f"  proposals {status['proposals']} of {status['max_proposals']}, "
        f"{status['wall_s']:.1f} s running",
        markup=False,
    )
    programs = status["programs"]
    console.print(
        f"  programs: {programs['evaluated']} evaluated, {programs['rejected']} rejected, "
        f"{programs['failed']} failed, {programs['pending']} pending",
        markup=False,
    )
    best = status["best_score"]
    if best is None and programs["evaluated"]:
        # A would-be best counts only once fresh samples confirm it (the winner's curse): a run
        # stopped early can hold evaluated programs and no best yet.
        console.print(
            f"  best: none confirmed yet (a would-be best is re-measured on "
            f"{status['remeasure_samples']} fresh samples first)",
            markup=False,
        )
    elif best is None:
        console.print("  best: none evaluated yet")
    else:
        picked = status.get("best_picked_score")
        as_picked = "" if picked is None else f"; {picked:.4f} as evaluated when picked"
        console.print(
            f"  best: {best:.4f} confirmed on {status['remeasure_samples']} fresh samples"
            f"{as_picked}, program {status['best_program_id']}",
            markup=False,
        )
    console.print("(--json prints every field, the config included)", style="dim")


def _one_line(text: str) -> str:
    """A message as one line: its first, or a traceback's last (the exception), spaces folded."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    traceback = "Traceback" in lines[0] or 'File "' in lines[0]
    return " ".join((lines[-1] if traceback else lines[0]).split())
