"""Analytical time of a tiled bf16 GEMM on an H100 SXM5, vectorised over configs and shapes.

The kernel is Triton's tutorial matmul: one CTA per BM x BN output tile, a K loop
software-pipelined over ``num_stages`` shared-memory buffers, CTAs launched in ``group_m``
swizzled order. The model follows research/gemm_gpu.md section 2.3:

1. Grid and occupancy: tiles (M padded to the 16-row tensor-core minimum), CTAs per SM from
   shared memory, registers and warp slots, tiles per SM (wave quantisation), rounds of CTAs.
2. One CTA's K step: tensor-core time at a rate that falls for non-wgmma configs (BM % 64 or
   W % 4), small tiles (operand reuse) and few warps, plus a fixed loop overhead; or, when the
   pipeline is too shallow, the load latency divided by the loads in flight (Little's law per CTA:
   ``num_stages - 1`` loads in flight, each taking the DRAM latency plus its transfer).
3. The busiest SM: its rounds of resident CTAs, each paying a pipeline fill and a store, capped by
   the SM's shared tensor cores and its load port.
4. Whole-kernel caps: DRAM bytes (each operand fetched again for every new swizzle group unless
   it fits in L2) over achievable HBM bandwidth, and L2-to-SM bytes (every CTA loads its whole
   x and W panels) over L2 bandwidth. The three bounds combine as a p-norm (soft max).
5. Launch and the drain of the last stores.

Every efficiency is at most 1 and every byte count at least the minimum, so no config beats the
roofline ``max(2MNK / peak, min_bytes / HBM) + launch``; every term grows with the work, so a
bigger shape is never faster under the same config. Times are microseconds; configs that cannot
launch get ``inf``.

Hardware constants are datasheet or microbenchmark figures. Five were tuned, each within its
physical range, so that the behaviours DESIGN.md section 8 requires hold together
(tests/unit/problems/gemm_tiling/test_gemm_cost_model.py pins them): DRAM_LATENCY_S and
K_STEP_OVERHEAD_CLK set how far small-M configs spread; SINGLE_WARPGROUP_EFFICIENCY and
L2_BYTES_PER_S set how much big 8-warp tiles gain at mid and large M; LAUNCH_S and BOUND_NORM set
how many decode configs tie. The GPU backend's calibration reports how far the model is from a real
H200.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from codevolve.problems.gemm_tiling import space as space_module
from codevolve.problems.gemm_tiling.shapes import GemmShape, all_shapes, validation_shapes
from codevolve.problems.gemm_tiling.space import (
    BYTES_PER_ELEMENT,
    REGISTER_OVERHEAD,
    THREADS_PER_WARP,
    ConfigArrays,
    GemmConfig,
    config_space,
)
from codevolve.problems.gemm_tiling.table_cache import cached_table

FloatArray = npt.NDArray[np.float64]

# --- Hardware: H100 SXM5 -------------------------------------------------------------------------
SMS = 132  # streaming multiprocessors (NVIDIA H100 SXM5 datasheet)
PEAK_FLOPS = 989e12  # FLOP/s, dense bf16 tensor cores (datasheet; 1979 is the sparse figure)
CLOCK_HZ = 1.83e9  # sustained clock under load: 989e12 = 132 SMs * 4096 FLOP/clk * 1.83e9
HBM_BYTES_PER_S = 3.35e12  # HBM3 peak (datasheet)
HBM_EFFICIENCY = 0.9  # fraction of peak a streaming read achieves (research 2.2, calibrate)
# L2-to-SM bandwidth: chipsandcheese measured ~5.5 TB/s on H100 PCIe (114 SMs, 1.755 GHz); scaled
# to the SXM5's 132 SMs and clocks that is ~7 TB/s.
L2_BYTES_PER_S = 7e12
SM_LOAD_BYTES_PER_CLK = 64  # L2-to-SM bytes per clock per SM (the SM's load port)
L2_REUSE_BYTES = 25e6  # of the 50 MB L2: one of its two partitions keeps reused data across waves
# HBM load latency for Little's law. Only configs that cannot saturate HBM are latency-bound, so
# this is the lightly loaded latency (pointer-chase figures for H100 are ~0.4-0.5 us), not the
# 0.6-0.9 us research 2.3 quotes under load.
DRAM_LATENCY_S = 500e-9
LAUNCH_S = 4e-6  # kernel launch as CUDA events see it (research 2.3: 3 to 5 us)

# --- SM resources: compute capability 9.0 (CUDA programming guide) -------------------------------
SMEM_PER_SM = 233_472  # bytes, 228 KiB
SMEM_RESERVED_PER_CTA = 1024  # bytes the driver keeps per resident CTA
REGISTERS_PER_SM = 65_536
REGISTER_GRANULE = 8  # registers are allocated per thread in multiples of 8
MAX_WARPS_PER_SM = 64
MAX_CTAS_PER_SM = 32

# --- Kernel efficiencies --------------------------------------------------------------------------
# Without wgmma (BM % 64 or W % 4, Triton supportMMA v3) Triton falls back to mma.sync, which
# reaches roughly 0.5 to 0.65 of Hopper's peak (research 2.3, calibrate).
MMA_SYNC_EFFICIENCY = 0.6
# Operand reuse r = BM*BN/(BM+BN) FLOP per byte staged through shared memory; efficiency
# r / (r + TILE_REUSE_HALF): 16x16 runs at half rate, 128x128 at 0.89, 256x128 at 0.91.
TILE_REUSE_HALF = 8.0
# One warpgroup alone cannot overlap its epilogue and address math with its MMAs; a second
# resident warpgroup (ping-pong) can. Four resident warps reach this fraction, eight reach 1.
SINGLE_WARPGROUP_EFFICIENCY = 0.7  # tuned, 0.7-0.85
WARPS_PER_WARPGROUP = 4  # one warp per SM sub-partition (tensor core)
K_STEP_OVERHEAD_CLK = 100  # clocks per K iteration: barrier, waits, address math (tuned, 40-200)
# The SM pipeline, DRAM and L2 bounds overlap imperfectly: they combine as a p-norm, the max when
# one dominates and 2**(1/p) times it when two balance (each resource stalls the other a little).
BOUND_NORM = 6  # tuned, 3-6


def model_times(shape: GemmShape, configs: ConfigArrays | None = None) -> FloatArray:
    """Model time (microseconds) of one shape under each config; ``inf`` where not launchable."""
    space = config_space() if configs is None else configs
    return kernel_time_us(np.float64(shape.m), np.float64(shape.n), np.float64(shape.k), space)


def model_time(shape: GemmShape, config: GemmConfig) -> float:
    """Model time (microseconds) of one shape under one config; ``inf`` if it cannot launch.

    A reference for tests and scripts; the problem itself reads :func:`time_table`."""
    return float(model_times(shape, ConfigArrays.of([config]))[0])


def paired_times(shapes: tuple[GemmShape, ...], configs: ConfigArrays) -> FloatArray:
    """Model time (microseconds) of ``shapes[i]`` under config ``i``, for each i.

    A reference for tests and scripts; the problem itself reads :func:`time_table`."""
    dims = np.array([(s.m, s.n, s.k) for s in shapes], dtype=np.float64).reshape(-1, 3)
    return kernel_time_us(dims[:, 0], dims[:, 1], dims[:, 2], configs)


@functools.cache
def time_table() -> FloatArray:
    """Model times (microseconds), shape (583, 6000): rows as :func:`all_shapes`, columns
    as :func:`~codevolve.problems.gemm_tiling.space.all_configs`. Computed once per process, or
    read from the table cache (table_cache.py)."""
    return _cached("times", all_shapes())


@functools.cache
def validation_time_table() -> FloatArray:
    """The same for the validation shapes, shape (408, 6000), rows as :func:`validation_shapes`."""
    return _cached("validation_times", validation_shapes())


def _cached(name: str, shapes: Sequence[GemmShape]) -> FloatArray:
    dims = [(s.m, s.n, s.k) for s in shapes]
    sources = (__file__, str(space_module.__file__))  # the model and the config space
    return cached_table(name, dims, len(config_space()), lambda: times_of(shapes), sources)


def times_of(shapes: Sequence[GemmShape]) -> FloatArray:
    """Model times (microseconds) of each shape under each config, shape (shapes, 6000), frozen."""
    dims = np.array([(s.m, s.n, s.k) for s in shapes], dtype=np.float64).reshape(-1, 3)
    table = kernel_time_us(dims[:, 0:1], dims[:, 1:2], dims[:, 2:3], config_space())
    table.setflags(write=False)
    return table


def roofline_us(shape: GemmShape) -> float:
    """The floor no config can beat: launch plus the larger of peak compute and minimum traffic.

    A reference: the tests check every entry of :func:`time_table` against it."""
    m, n, k = shape.m, shape.n, shape.k
    min_bytes = BYTES_PER_ELEMENT * (m * k + n * k + m * n)
    return 1e6 * (LAUNCH_S + max(2.0 * m * n * k / PEAK_FLOPS, min_bytes / HBM_BYTES_PER_S))


Dim = FloatArray | np.float64


def kernel_time_us(m: Dim, n: Dim, k: Dim, configs: ConfigArrays) -> FloatArray:
    """The model. ``m, n, k`` broadcast against the config arrays, e.g. (shapes, 1) x (configs,)."""
    grid = _Grid(m, n, k, configs)
    bounds = np.stack(np.broadcast_arrays(_sm_time(grid), _dram_time(grid), _l2_time(grid)))
    # Near a balance each bound stalls the others a little: a p-norm, not a hard max.
    main_s = np.linalg.norm(bounds, ord=BOUND_NORM, axis=0)
    total_us = 1e6 * (LAUNCH_S + main_s + DRAM_LATENCY_S)  # the last stores drain after the loop
    result: FloatArray = np.where(configs.launchable, total_us, np.inf)
    return result


class _Grid:
    """Tiles, occupancy and the footprint of the CTAs resident at once, for one broadcast batch."""

    def __init__(self, m: Dim, n: Dim, k: Dim, configs: ConfigArrays) -> None:
        bm, bn, bk, warps, stages, group = (
            a.astype(np.float64)
            for a in (
                configs.block_m,
                configs.block_n,
                configs.block_k,
                configs.num_warps,
                configs.num_stages,
                configs.group_m,
            )
        )
        self.m, self.n, self.k = m, n, k
        self.bm, self.bn, self.bk, self.warps, self.stages = bm, bn, bk, warps, stages
        self.rows = np.ceil(m / 16.0) * 16.0  # M padded to the 16-row tensor-core minimum
        self.tiles_m = np.ceil(m / bm)
        self.tiles_n = np.ceil(n / bn)
        self.tiles = self.tiles_m * self.tiles_n
        self.k_steps = np.ceil(k / bk)
        self.ctas_per_sm = _ctas_per_sm(bm, bn, bk, warps, stages)
        self.tiles_per_sm = np.ceil(self.tiles / SMS)
        self.resident = np.minimum(self.ctas_per_sm, self.tiles_per_sm)  # CTAs sharing an SM
        self.active = np.minimum(self.tiles, SMS * self.ctas_per_sm)  # CTAs running at once
        # Launch order walks swizzle groups of `group` M-tiles, column-major inside a group, so
        # the CTAs running at once span `active_m` M-tiles.
        group_m = np.minimum(group, self.tiles_m)
        group_ctas = group_m * self.tiles_n
        self.active_m = np.where(
            self.active <= group_ctas,
            np.minimum(group_m, self.active),
            np.minimum(self.tiles_m, group_m * np.ceil(self.active / group_ctas)),
        )
        self.loads_in_flight = np.minimum(np.maximum(stages - 1.0, 1.0), self.k_steps)
        self.stage_bytes = (bm + bn) * bk * BYTES_PER_ELEMENT  # one x tile and one W tile


def _ctas_per_sm(
    bm: FloatArray, bn: FloatArray, bk: FloatArray, warps: FloatArray, stages: FloatArray
) -> FloatArray:
    smem = stages * (bm + bn) * bk * BYTES_PER_ELEMENT + SMEM_RESERVED_PER_CTA
    registers = bm * bn / (THREADS_PER_WARP * warps) + REGISTER_OVERHEAD
    allocated = np.ceil(registers / REGISTER_GRANULE) * REGISTER_GRANULE
    by_registers = np.floor(REGISTERS_PER_SM / (allocated * THREADS_PER_WARP * warps))
    ctas = np.minimum.reduce(
        [
            np.floor(SMEM_PER_SM / smem),
            by_registers,
            np.floor(MAX_WARPS_PER_SM / warps),
            np.full_like(bm, MAX_CTAS_PER_SM),
        ]
    )
    result: FloatArray = np.maximum(ctas, 1.0)  # configs that do not fit: inf, by the caller
    return result


def warp_efficiency(resident_warps: FloatArray) -> FloatArray:
    """Tensor-core issue rate (fraction of peak) by the warps resident on an SM.

    Below one warpgroup some sub-partitions idle (rate proportional to warps); between one and two
    warpgroups the ping-pong benefit grows linearly. Rate per warp never rises with more warps,
    so adding work to an SM never makes it finish sooner.
    """
    group = WARPS_PER_WARPGROUP
    below = resident_warps / group * SINGLE_WARPGROUP_EFFICIENCY
    between = (
        SINGLE_WARPGROUP_EFFICIENCY
        + (1.0 - SINGLE_WARPGROUP_EFFICIENCY) * (resident_warps - group) / group
    )
    result: FloatArray = np.where(resident_warps < group, below, np.minimum(1.0, between))
    return result


def _sm_time(grid: _Grid) -> FloatArray:
    """Seconds the busiest SM needs: its CTA rounds, capped by its tensor cores and load port."""
    sm_load_bytes_per_s = SM_LOAD_BYTES_PER_CLK * CLOCK_HZ
    wgmma = (np.mod(grid.bm, 64.0) == 0) & (np.mod(grid.warps, 4.0) == 0)
    reuse = grid.bm * grid.bn / (grid.bm + grid.bn)  # FLOP per shared-memory byte
    tile_rate = (
        PEAK_FLOPS
        / SMS
        * np.where(wgmma, 1.0, MMA_SYNC_EFFICIENCY)
        * (reuse / (reuse + TILE_REUSE_HALF))
    )  # FLOP/s of an SM fully occupied by such tiles
    step_flops = 2.0 * grid.bm * grid.bn * grid.bk
    issue_s = step_flops / (tile_rate * warp_efficiency(grid.warps)) + (
        K_STEP_OVERHEAD_CLK / CLOCK_HZ
    )
    load_s = DRAM_LATENCY_S + grid.stage_bytes / sm_load_bytes_per_s
    step_s = np.where(
        grid.stages == 1, issue_s + load_s, np.maximum(issue_s, load_s / grid.loads_in_flight)
    )
    # Each round of resident CTAs fills its pipeline and stores its tiles before the next starts.
    fill_s = (
        DRAM_LATENCY_S
        + (grid.loads_in_flight * grid.stage_bytes + BYTES_PER_ELEMENT * grid.bm * grid.bn)
        / sm_load_bytes_per_s
    )
    rounds = np.ceil(grid.tiles_per_sm / grid.resident)
    pipelined_s = rounds * (fill_s + grid.k_steps * step_s)
    steps = grid.tiles_per_sm * grid.k_steps
    tensor_s = steps * step_flops / (tile_rate * warp_efficiency(grid.resident * grid.warps))
    port_s = steps * grid.stage_bytes / sm_load_bytes_per_s
    result: FloatArray = np.maximum.reduce([pipelined_s, tensor_s, port_s])
    return result


def _dram_time(grid: _Grid) -> FloatArray:
    """Seconds to move the kernel's DRAM traffic at achievable HBM bandwidth.

    The x rows of the running M-tiles stay in L2 while their group walks the N-tiles (unless that
    slice is too big); W is fetched again for every new set of running M-tiles unless it all fits.
    """
    b = BYTES_PER_ELEMENT
    x_bytes = b * grid.rows * grid.k
    w_bytes = b * grid.n * grid.k
    y_bytes = b * grid.m * grid.n
    x_slice = b * grid.k * np.minimum(grid.active_m * grid.bm, grid.rows)
    passes = grid.active_m * grid.tiles_n / grid.active  # waves over one set of M-tiles
    x_fetches = np.where(x_slice <= L2_REUSE_BYTES, 1.0, np.maximum(passes, 1.0))
    w_fetches = np.where(w_bytes <= L2_REUSE_BYTES, 1.0, grid.tiles_m / grid.active_m)
    dram_bytes = x_bytes * x_fetches + w_bytes * w_fetches + y_bytes
    result: FloatArray = dram_bytes / (HBM_EFFICIENCY * HBM_BYTES_PER_S)
    return result


def _l2_time(grid: _Grid) -> FloatArray:
    """Seconds for every CTA to load its whole x and W panels through L2 (masked rows reload)."""
    l2_bytes = grid.tiles * BYTES_PER_ELEMENT * grid.k * (grid.bm + grid.bn)
    result: FloatArray = l2_bytes / L2_BYTES_PER_S
    return result
