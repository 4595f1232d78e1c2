"""Tile configuration for the bf16 GEMM y = x @ W.T, x: [M, K], W: [N, K].

choose_config(M, N, K) returns the Triton launch configuration for one shape. Only the code between
the EVOLVE-BLOCK markers changes; GemmConfig is fixed so that every candidate is self-contained.
"""

from typing import NamedTuple


class GemmConfig(NamedTuple):
    block_m: int  # rows of x per tile: 16, 32, 64, 128, 256
    block_n: int  # rows of W per tile: 16, 32, 64, 128, 256
    block_k: int  # reduction step: 16, 32, 64, 128
    num_warps: int  # 1, 2, 4, 8
    num_stages: int  # software-pipeline depth: 1..5
    group_m: int  # M-tiles per swizzle group (L2 reuse): 1, 4, 8


# EVOLVE-BLOCK-START
def choose_config(M: int, N: int, K: int) -> GemmConfig:
    """Expert rule: small tiles for decode, larger tiles as M grows."""
    if M * N > 2097152 and M * N <= 8388608:
        return GemmConfig(128, 256, 64, 8, 3, 8)
    if M * N > 524288 and M * N <= 2097152:
        return GemmConfig(128, 128, 128, 8, 3, 8)
    if M * N <= 32768:
        return GemmConfig(32, 64, 128, 8, 4, 8)
    if M * N > 8192 and M * N <= 32768:
        return GemmConfig(16, 128, 64, 8, 4, 1)
    if M * N > 131072 and M * N <= 262144:
        return GemmConfig(64, 64, 128, 8, 5, 8)
    if M * N > 65536 and M * N <= 262144:
        return GemmConfig(32, 64, 128, 8, 4, 8)
    if M * N <= 1048576:
        return GemmConfig(64, 64, 128, 8, 4, 8)
    if M <= 256:
        return GemmConfig(64, 128, 128, 8, 4, 8)
    return GemmConfig(256, 128, 64, 8, 3, 8)


# EVOLVE-BLOCK-END
