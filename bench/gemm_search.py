"""Benchmark: evolve gemm tiling on the embedded default for several seeds.

Prints, per seed and as medians, the evolved heuristic's speedup relative to the oracle
(evolved / oracle, geomean of t_oracle / t_chosen) on the train and the held-out test shapes, the
per-M lookup table's, and the wall time of each run.

    python bench/gemm_search.py [--seeds 0 1 2 3 4] [--proposals 1000] [--workers 2]
        [--islands N] [--exploit-ratio R] [--rank-temperature T]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from codevolve.core.config import RunConfig
from codevolve.services.runtime.embedded import run_embedded


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--proposals", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--islands", type=int, default=None, help="default: RunConfig's")
    parser.add_argument(
        "--exploit-ratio", type=float, default=None, help="default: RunConfig's exploit_ratio"
    )
    parser.add_argument("--rank-temperature", type=float, default=None, help="default: RunConfig's")
    args = parser.parse_args()

    rows = []
    print(
        f"{'seed':>4} {'train ev/or':>12} {'test ev/or':>11} {'train lut/or':>13} "
        f"{'test lut/or':>12} {'evaluated':>9} {'wall s':>7}"
    )
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            db = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.sqlite'}"
            given = {
                "islands": args.islands,
                "exploit_ratio": args.exploit_ratio,
                "rank_temperature": args.rank_temperature,
            }
            overrides = {key: value for key, value in given.items() if value is not None}
            config = RunConfig(
                problem="gemm-tiling", seed=seed, max_proposals=args.proposals, **overrides
            )
            started = time.perf_counter()
            result = asyncio.run(run_embedded(db_url=db, config=config, workers=args.workers))
            wall = time.perf_counter() - started
        report = result.report
        train, test = report["train"], report["test"]
        row = {
            "train": train["evolved_over_oracle"],
            "test": test["evolved_over_oracle"],
            "lut_train": train["lookup"] / train["oracle"],
            "lut_test": test["lookup"] / test["oracle"],
            "wall": wall,
        }
        rows.append(row)
        print(
            f"{seed:>4} {row['train']:>12.4f} {row['test']:>11.4f} {row['lut_train']:>13.4f} "
            f"{row['lut_test']:>12.4f} {report['evaluated']:>9} {wall:>7.1f}",
            flush=True,
        )

    def med(key: str) -> float:
        return float(statistics.median(r[key] for r in rows))

    print(
        f"{'med':>4} {med('train'):>12.4f} {med('test'):>11.4f} {med('lut_train'):>13.4f} "
        f"{med('lut_test'):>12.4f} {'':>9} {med('wall'):>7.1f}"
    )
    above = sum(r["test"] > r["lut_test"] for r in rows)
    print(
        f"test: median evolved/oracle {med('test'):.4f} (target >= 0.95); "
        f"above the per-M table on {above}/{len(rows)} seeds"
    )


if __name__ == "__main__":
    main()
