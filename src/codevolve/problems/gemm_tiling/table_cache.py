"""The cost model's tables kept on disk, so that each process does not compute them again.

A table of model times over every shape and config takes a few seconds of numpy (583 x 6000 and
408 x 6000 values); every ``codevolve`` process that evaluates gemm-tiling needs them. The first
process writes each table as a ``.npy`` file named by a digest of everything it depends on (the
sources of the cost model and the config space, numpy's version, the shapes), and later ones read
it: a change to the model or the shapes names another file, so a stale table is never read. A
file that cannot be read, or whose shape is not the table's, is computed again; a folder that
cannot be written costs only the time. The folder is the worker's cache folder
(core/cache_dir.py), which candidates, confined to their scratch folders by the sandbox, cannot
write.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from codevolve.core.cache_dir import cache_home

FloatArray = npt.NDArray[np.float64]


def table_digest(shapes: Sequence[tuple[int, int, int]], sources: Sequence[str]) -> str:
    """What a table depends on: the files of the code that computes it, numpy, the shapes."""
    digest = hashlib.sha256()
    for source in sources:
        digest.update(Path(source).read_bytes())
    digest.update(np.__version__.encode())
    digest.update(repr(tuple(shapes)).encode())
    return digest.hexdigest()[:24]


def cached_table(
    name: str,
    shapes: Sequence[tuple[int, int, int]],
    columns: int,
    compute: Callable[[], FloatArray],
    sources: Sequence[str],
) -> FloatArray:
    """The table ``compute`` gives, read from the cache folder when a process wrote it before."""
    path = cache_home() / f"{name}-{table_digest(shapes, sources)}.npy"
    try:
        table: FloatArray = np.load(path, allow_pickle=False)
        if table.shape == (len(shapes), columns) and table.dtype == np.float64:
            table.setflags(write=False)
            return table
    except (OSError, ValueError, EOFError):
        pass
    table = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        with open(partial, "wb") as out:
            np.save(out, table, allow_pickle=False)
        os.replace(partial, path)
    except OSError:
        pass
    return table
