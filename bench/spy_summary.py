"""Summarise a py-spy raw profile (``py-spy record -f raw``) of ``bench/throughput.py``: where the
controller's event loop spends its samples.

Only stacks inside the controller's run count (``Controller.run`` or a task the loop runs); module
imports and the workers-only part (``drain``) are left out. Prints the share of those samples that
pass through each of a list of functions (a sample counts for every listed function on its
stack, so shares overlap), then the functions that were running themselves most often.

    py-spy record --nonblocking -r 250 -f raw -o spy.txt -- python bench/throughput.py ...
    python bench/spy_summary.py spy.txt
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

# Parts of the controller's work, by a function on the stack (substring of a py-spy frame).
PARTS = (
    ("proposal, whole", "Controller._propose_once"),
    ("sampling", "Controller.sample"),
    ("prompt", "build_prompt"),
    ("proposal processes", "ProposalPool.settle"),
    ("proposal process messages", "_Link."),
    ("proposal write, database", "write_proposals"),
    ("proposal write, tasks to Redis", "submit_many"),
    ("results, read from Redis", "next_results"),
    ("results, whole", "Controller._apply"),
    ("results, database", "apply_evaluations"),
    ("results, archive", "Controller._archive_results"),
    ("SQLAlchemy", "greenlet_spawn"),
    ("JSON", "json/"),
)
LINE = re.compile(r":\d+\)")


def summarise(path: Path, top: int) -> None:
    total = 0
    parts: collections.Counter[str] = collections.Counter()
    running: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        if "Controller.run" not in stack and "Handle._run" not in stack:
            continue
        if "importlib" in stack or "drain" in stack:
            continue
        samples = int(count)
        total += samples
        running[LINE.sub(")", stack.split(";")[-1])] += samples
        for name, frame in PARTS:
            if frame in stack:
                parts[name] += samples
    if not total:
        print("no samples of the controller in this profile")
        return
    print(f"{total} samples of the controller's event loop")
    for name, _frame in PARTS:
        print(f"  {parts[name] / total:6.1%}  {name}")
    print("running themselves:")
    for frame, samples in running.most_common(top):
        print(f"  {samples / total:6.1%}  {frame}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profile", type=Path, help="a py-spy raw (collapsed stacks) file")
    parser.add_argument("--top", type=int, default=15)
    arguments = parser.parse_args()
    summarise(arguments.profile, arguments.top)
