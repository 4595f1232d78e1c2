"""Find the global minimum of a rugged two-dimensional function.

search_minimum(objective, seed) returns the point (x, y) it believes minimises ``objective`` on
the square [-5, 5] x [-5, 5]. It may call ``objective(x, y)`` at most 2000 times; the evaluator
counts the calls and scores how close the returned point's value is to the true minimum.
"""

import random
from collections.abc import Callable

# EVOLVE-BLOCK-START
SAMPLES = 400  # random points tried
STEP = 1.0  # size of the local moves around the best point


def search_minimum(objective: Callable[[float, float], float], seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    best = (rng.uniform(-5, 5), rng.uniform(-5, 5))
    best_value = objective(*best)
    for _ in range(SAMPLES):
        if rng.random() < 0.5:
            point = (rng.uniform(-5, 5), rng.uniform(-5, 5))
        else:
            point = (best[0] + rng.gauss(0, STEP), best[1] + rng.gauss(0, STEP))
        value = objective(*point)
        if value < best_value:
            best, best_value = point, value
    return best


# EVOLVE-BLOCK-END
