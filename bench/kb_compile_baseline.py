"""The torch.compile baseline of a few KernelBench problems: compile seconds, cold and cached.

For each problem, `codevolve evaluate` judges the reference's own code (the initial program) with
``--baselines eager,compile`` twice, each run in a device process of its own and both into one
compile cache: the first compiles the reference, the second should load it from the cache
(Inductor's FX graph cache: "hit"). One line per run: the compile seconds and the cache's
answer, eager's and compile's per-call times, or the note of a reference that did not compile;
then the seconds over all problems, cold and cached.

    python bench/kb_compile_baseline.py --dir .kb --problems "19 23 1" [--gpus 0|cpu]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

PASSES = ("cold", "cached")


def problem_file(folder: Path, number: str) -> Path:
    found = sorted(folder.glob(f"level1/{number}_*.py")) or sorted(folder.glob(f"{number}_*.py"))
    if not found:
        raise SystemExit(f"no problem {number} in {folder} (level1/{number}_*.py)")
    return found[0]


def evaluate(path: Path, args: argparse.Namespace, record: Path) -> dict[str, Any]:
    """`codevolve evaluate` of the file's reference code, its JSON record (kept in ``record``)."""
    command = [
        sys.executable, "-m", "codevolve.services.cli", "evaluate",
        "--kernel-problem", str(path), "--baselines", "eager,compile",
        "--judge-trials", str(args.trials), "--cache-dir", str(args.cache_dir), "--json",
    ]  # fmt: skip
    if args.gpus:
        command += ["--gpus", args.gpus]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout_s)
    record.write_text(done.stdout + done.stderr)
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": "error", "error": tail, "stages": []}
    return result


def line(number: str, run: str, result: dict[str, Any]) -> tuple[str, float]:
    judge = result["stages"][-1] if result["stages"] else {"metrics": {}, "artifacts": {}}
    metrics, note = judge["metrics"], judge["artifacts"].get("compile_note", "")
    seconds = float(metrics.get("compile_seconds", math.nan))
    cache = {1.0: "hit", 0.0: "miss"}.get(metrics.get("compile_cache_hit"), "?")
    eager, compiled = metrics.get("eager_ms", math.nan), metrics.get("compile_ms", math.nan)
    text = (
        f"{number:>4} {run:<6} {result['status']:<9} compile {seconds:7.1f} s ({cache:<4}) "
        f"eager {eager:.4f} ms  compile {compiled:.4f} ms  {note or result.get('error') or ''}"
    )
    return text.rstrip(), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a folder holding level1/")
    parser.add_argument("--problems", default="19 23 1", help="Level-1 numbers, space-separated")
    parser.add_argument("--cache-dir", type=Path, required=True, help="emptied first")
    parser.add_argument("--out", type=Path, default=Path("gpu-out"), help="the JSON records")
    parser.add_argument("--gpus", default="", help="as evaluate's --gpus (default: one GPU)")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args()
    shutil.rmtree(args.cache_dir, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    totals = dict.fromkeys(PASSES, 0.0)
    for number in args.problems.replace(",", " ").split():
        path = problem_file(args.dir, number)
        for run in PASSES:
            result = evaluate(path, args, args.out / f"compile_{number}_{run}.json")
            text, seconds = line(number, run, result)
            print(text, flush=True)
            totals[run] += 0.0 if math.isnan(seconds) else seconds
    spent = ", ".join(f"{run} {seconds:.1f}" for run, seconds in totals.items())
    print(f"compile seconds over the problems: {spent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
