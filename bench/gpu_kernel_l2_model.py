"""gemm-kernel-gpu: how many HBM bytes persistent_stream_k's stream-K part reads, in an LRU model.

    python bench/gpu_kernel_l2_model.py [--l2-mib 60 30]

A sketch, not a profile: every shape here has all its tiles in the last wave (fewer tiles than
132 SMs), so every program runs stream-K. The programs step through their K stretches together,
one BLOCK_K step per tick; each step reads one x block (BLOCK_M x 64) and one w block
(BLOCK_N x 64), bf16, through one LRU cache of the L2's size. Printed: the bytes that missed, as a
multiple of x's and w's bytes, with each program's pieces run first tile first (the old order)
and last tile first, the piece that starts at K step 0 leading (the order the variant uses now).
"""

from __future__ import annotations

import argparse
import math
from collections import OrderedDict

SMS = 132
BLOCK_K = 64
GROUP_M = 8
SHAPES = {  # name: (M, N, K, BLOCK_M, BLOCK_N)
    "70B_tp8.qkv M=1536, 128x128": (1536, 1280, 8192, 128, 128),
    "70B_tp8.qkv M=3072, 128x256": (3072, 1280, 8192, 128, 256),
    "70B_tp8.qkv M=1024, 128x256": (1024, 1280, 8192, 128, 256),
    "8B.qkv M=384, 128x256": (384, 6144, 4096, 128, 256),
    "8B.o M=384, 128x128": (384, 4096, 4096, 128, 128),
}


def tile_position(tile: int, tiles_m: int, tiles_n: int) -> tuple[int, int]:
    """Row and column of a tile in the kernels' GROUP_M-swizzled order."""
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % rows, (tile % per_group) // rows


def missed(m: int, n: int, k: int, block_m: int, block_n: int, *, last_first: bool,
           l2_bytes: int) -> float:  # fmt: skip
    tiles_m, tiles_n = math.ceil(m / block_m), math.ceil(n / block_n)
    tiles, steps = tiles_m * tiles_n, math.ceil(k / BLOCK_K)
    total = tiles * steps
    per = max(math.ceil(total / SMS), math.ceil(steps / 4))  # as launch_persistent_stream_k
    walks = []
    for program in range(SMS):
        start, end = program * per, min(program * per + per, total)
        if start >= end:
            continue
        order = range(start // steps, (end - 1) // steps + 1)
        walk = []
        for tile in reversed(order) if last_first else order:
            row, col = tile_position(tile, tiles_m, tiles_n)
            first, last = max(start - tile * steps, 0), min(end - tile * steps, steps)
            walk += [(row, col, step) for step in range(first, last)]
        walks.append(walk)
    cache: OrderedDict[tuple[str, int, int], int] = OrderedDict()
    held = misses = 0
    for tick in range(max(map(len, walks))):
        for walk in walks:
            if tick >= len(walk):
                continue
            row, col, step = walk[tick]
            for key, size in ((("x", row, step), block_m), (("w", col, step), block_n)):
                if key in cache:
                    cache.move_to_end(key)
                    continue
                misses += size * BLOCK_K * 2
                cache[key] = size * BLOCK_K * 2
                held += cache[key]
                while held > l2_bytes:
                    held -= cache.popitem(last=False)[1]
    return misses / ((m + n) * k * 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--l2-mib", type=int, nargs="+", default=[60, 30])
    args = parser.parse_args()
    for mib in args.l2_mib:
        print(f"L2 of {mib} MiB: HBM bytes / unique bytes, old order / new order")
        for name, (m, n, k, bm, bn) in SHAPES.items():
            old, new = (
                missed(m, n, k, bm, bn, last_first=order, l2_bytes=mib << 20)
                for order in (False, True)
            )
            print(f"  {name:30s} {old:5.2f} / {new:5.2f}")


if __name__ == "__main__":
    main()
