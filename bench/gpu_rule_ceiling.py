"""What rule forms can reach on the GPU: one config per class of train shapes, from the oracle.

The stored H200 oracle (src/codevolve/problems/gemm_tiling_gpu/data/oracle_h200.json) holds, for
each of the 88 shapes, the times of every config it measured. For a way of grouping shapes (one
octave of the output size M * N; that octave split by M), this picks per group the config with the
best geomean over the group's train shapes, among the configs measured on every shape of the
group, and prints the geomean and the worst of t_oracle / t_config over the train shapes. Only
train shapes are read: this is how the rule forms of the mutations were chosen
(docs/gemm_tiling.md, "Token bands"), and the held-out shapes play no part in it.

Caveats: a group can only use configs measured on all of its shapes (the oracle measured each
shape's own candidates), so the figures are lower bounds of what one config per group reaches;
the measured list holds 7-sample medians, the oracle's time a 30-sample one, so a ratio can pass 1.

    python bench/gpu_rule_ceiling.py [--oracle PATH]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codevolve.problems.gemm_tiling.shapes import train_shapes

ORACLE = Path("src/codevolve/problems/gemm_tiling_gpu/data/oracle_h200.json")
Group = Callable[[dict[str, Any]], object]


def octave(value: int) -> int:
    """i such that 2**(i-1) < value <= 2**i: the (2**i, 2**(i+1)] octaves the rules use."""
    return (value - 1).bit_length()


GROUPINGS: dict[str, Group] = {
    "octave of M * N": lambda s: octave(s["m"] * s["n"]),
    "octave of M * N, and M <= 16 or not": lambda s: (octave(s["m"] * s["n"]), s["m"] <= 16),
    "octave of M * N, and octave of M": lambda s: (octave(s["m"] * s["n"]), octave(s["m"])),
}


def ceiling(entries: list[dict[str, Any]], group: Group) -> tuple[int, float, float, str]:
    """(groups, geomean, worst ratio, worst shape) of the best config per group."""
    measured = [{tuple(c): t for c, t in e["measured"]} for e in entries]
    members: dict[object, list[int]] = {}
    for i, entry in enumerate(entries):
        members.setdefault(group(entry), []).append(i)
    ratios: dict[int, float] = {}
    for indices in members.values():
        common = set.intersection(*(set(measured[i]) for i in indices))
        best = min(
            common,
            key=lambda c: sum(math.log(measured[i][c] / entries[i]["time_us"]) for i in indices),
        )
        ratios.update({i: entries[i]["time_us"] / measured[i][best] for i in indices})
    worst = min(ratios, key=ratios.__getitem__)
    geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    where = f"{entries[worst]['projection']} M={entries[worst]['m']}"
    return len(members), geomean, ratios[worst], where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--oracle", type=Path, default=ORACLE)
    args = parser.parse_args()
    table = json.loads(args.oracle.read_text())
    train = {(s.m, s.n, s.k) for s in train_shapes()}
    entries = [e for e in table["shapes"] if (e["m"], e["n"], e["k"]) in train]
    print(f"{table['gpu']}: {len(entries)} train shapes of {len(table['shapes'])}")
    print(f"{'one config per':<40} {'groups':>6} {'geomean':>8} {'worst':>6}  worst shape")
    for name, group in GROUPINGS.items():
        groups, geomean, worst, where = ceiling(entries, group)
        print(f"{name:<40} {groups:>6} {geomean:>8.3f} {worst:>6.3f}  {where}")


if __name__ == "__main__":
    main()
