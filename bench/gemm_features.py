"""Which shape features let a rule carry over from the train shapes to the test shapes?

For each way of grouping the shapes (by M, by M and an N or K class, by octave of M * N, ...), fit
one config per group on the train split (the config with the best geomean over the group's train
shapes), then print the evolved/oracle geomean of that chooser on train and on test. Groups that
the train split lacks fall back to the per-M lookup table.

    python bench/gemm_features.py
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from codevolve.problems.gemm_tiling.baselines import (
    fit_lookup_table,
    oracle_time_us,
    shape_times,
)
from codevolve.problems.gemm_tiling.shapes import GemmShape, heldout_shapes, train_shapes
from codevolve.problems.gemm_tiling.space import GemmConfig, all_configs, config_index

Grouping = Callable[[GemmShape], Hashable]


def over_oracle(choose: Callable[[GemmShape], GemmConfig], shapes: Sequence[GemmShape]) -> float:
    """Geomean of t_oracle / t_chosen over the shapes."""
    ratios = [oracle_time_us(s) / shape_times(s)[config_index(choose(s))] for s in shapes]
    return math.exp(float(np.mean(np.log(ratios))))


def fitted_chooser(group_of: Grouping) -> Callable[[GemmShape], GemmConfig]:
    lookup = fit_lookup_table(train_shapes())
    table: dict[Hashable, GemmConfig] = {}
    for key in {group_of(s) for s in train_shapes()}:
        members = [s for s in train_shapes() if group_of(s) == key]
        log_times = np.sum([np.log(shape_times(s)) for s in members], axis=0)
        table[key] = all_configs()[int(np.argmin(log_times))]
    return lambda s: table.get(group_of(s), lookup.config_for(s.m))


GROUPINGS: dict[str, Grouping] = {
    "M (the per-M lookup table)": lambda s: s.m,
    "M, and N >= 4096 or not": lambda s: (s.m, s.n >= 4096),
    "M, and K >= 8192 or not": lambda s: (s.m, s.k >= 8192),
    "octave [2^i, 2^(i+1)) of M*N": lambda s: int(math.log2(s.m * s.n)),
    "octave (2^i, 2^(i+1)] of M*N": lambda s: math.ceil(math.log2(s.m * s.n)),
    "octave of M * N * K": lambda s: int(math.log2(s.m * s.n * s.k)),
}


def leave_one_projection_out(group_of: Grouping) -> float:
    """Train split only: for each projection, fit one config per group on the other projections'
    train shapes and score that projection's train shapes (a group the fit lacks takes the
    nearest group's config). Geomean evolved/oracle over all train shapes."""
    logs = []
    for n, k in sorted({(s.n, s.k) for s in train_shapes()}):
        fit = [s for s in train_shapes() if (s.n, s.k) != (n, k)]
        table = {}
        for key in {group_of(s) for s in fit}:
            members = [s for s in fit if group_of(s) == key]
            table[key] = int(np.argmin(np.sum([np.log(shape_times(s)) for s in members], axis=0)))
        for s in (s for s in train_shapes() if (s.n, s.k) == (n, k)):
            key = min(table, key=lambda g: (abs(g - group_of(s)), g))  # type: ignore[operator]
            logs.append(math.log(oracle_time_us(s) / shape_times(s)[table[key]]))
    return math.exp(float(np.mean(logs)))


def main() -> None:
    print(f"{'one config per':<30} {'train':>7} {'test':>7}")
    for name, group_of in GROUPINGS.items():
        choose = fitted_chooser(group_of)
        train = over_oracle(choose, train_shapes())
        test = over_oracle(choose, heldout_shapes())
        print(f"{name:<30} {train:>7.3f} {test:>7.3f}")
    everything = fit_lookup_table([*train_shapes(), *heldout_shapes()])
    ceiling = over_oracle(lambda s: everything.config_for(s.m), heldout_shapes())
    print(f"{'per-M table fitted on all 88':<30} {'':>7} {ceiling:>7.3f}")
    print("leave one projection out, train split only:")
    for name in (
        "M (the per-M lookup table)",
        "octave [2^i, 2^(i+1)) of M*N",
        "octave (2^i, 2^(i+1)] of M*N",
    ):
        print(f"{name:<30} {leave_one_projection_out(GROUPINGS[name]):>7.3f}")


if __name__ == "__main__":
    main()
