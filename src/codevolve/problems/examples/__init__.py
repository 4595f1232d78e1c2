"""Example problems in the OpenEvolve folder layout, run with ``codevolve run --problem-dir``.

- ``function_minimization``: find the minimum of a shifted Rastrigin function; a two-stage
  cascade (a few seeds, then many).
- ``circle_packing``: 26 circles in the unit square, maximising the sum of radii under a strict
  validator; best known about 2.6359.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLES = ("circle_packing", "function_minimization")


def example_dir(name: str) -> Path:
    """The folder of the named example; ValueError names the known ones.

    A reference for tests and scripts: the command line takes the folder itself
    (``--problem-dir``)."""
    if name not in EXAMPLES:
        raise ValueError(f"unknown example {name!r}; known: {', '.join(EXAMPLES)}")
    return Path(__file__).parent / name
