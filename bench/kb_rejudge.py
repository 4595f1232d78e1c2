"""Judge stored best KernelBench programs again with the current judge, beside the figures
stored with them.

    python bench/kb_rejudge.py REPORT.json KB_DIR [--out FILE] [--trials 10] [--budget SECONDS]

REPORT.json is a ``codevolve kernelbench --report`` file (rows with ``problem``,
``best_source`` and ``speedup_eager``); KB_DIR holds the problems' reference files
(``<problem>.py``). For each row whose file exists it runs the device job ``kb.judge``
(``kb_jobs.judge_job``, seed 0, every distribution, eager baseline), then prints the stored and
the new speedup, the verdict, and the judging's wall seconds; at the end fast_1 against eager
over the rows judged and over 100 files. Quoted by docs/results-kernelbench.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

try:
    from codevolve.problems.kernelbench.device import kb_jobs
except ImportError:  # a tree from before the judges moved into their problems
    from codevolve.evaluator_workers.gpu import kb_jobs  # type: ignore[no-redef]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("kb_dir")
    parser.add_argument("--out", default="")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--budget", type=float, default=1e9)
    args = parser.parse_args()
    rows = json.loads(Path(args.report).read_text())["rows"]
    started = time.monotonic()
    results = []
    for row in rows:
        path = Path(args.kb_dir) / f"{row['problem']}.py"
        if not path.exists() or not row.get("best_source"):
            continue  # no reference file here, or the run kept no program for it
        if time.monotonic() - started > args.budget:
            continue
        mark = time.monotonic()
        reply = kb_jobs.judge_job(
            {
                "reference": path.read_text(),
                "candidate": row["best_source"],
                "trials": args.trials,
                "warmup": 3,
                "seeds": [0],
            }
        )
        timing = reply["timing"] or {}
        speedup = timing["eager_ms"] / timing["candidate_ms"] if timing else None
        result = {
            "problem": row["problem"],
            "stored_speedup": row["speedup_eager"],
            "speedup": speedup,
            "correct": reply["correct"],
            "problem_text": reply["problem"]
            or reply["load_error"]
            or "; ".join(f"{k}: {v}" for k, v in reply["verdicts"].items() if v),
            "verdicts": reply["verdicts"],
            "batch": timing.get("batch"),
            "seconds": time.monotonic() - mark,
            "isolation": reply.get("isolation"),
            "phases": reply.get("seconds"),
        }
        results.append(result)
        stored = "-" if row["speedup_eager"] is None else f"{row['speedup_eager']:.3f}"
        new = "-" if speedup is None else f"{speedup:.3f}"
        print(
            f"{row['problem'][:38]:<38} stored {stored:>6} new {new:>6} "
            f"correct={reply['correct']} batch={timing.get('batch')} "
            f"{result['seconds']:.1f}s {result['problem_text'][:300]}",
            flush=True,
        )
    fast = sum(1 for r in results if r["correct"] and r["speedup"] and r["speedup"] > 1.0)
    stored_fast = sum(1 for r in results if r["stored_speedup"] and r["stored_speedup"] > 1.0)
    print(f"judged {len(results)}: fast_1 {fast} (stored {stored_fast}); 100 files: {fast / 100}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    getattr(kb_jobs, "shutdown", lambda: None)()  # a tree from before the runners has none


if __name__ == "__main__":
    main()
