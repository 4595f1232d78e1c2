"""The tile-configuration space of the bf16 GEMM and the rule that decides what can launch.

A configuration is six integers: ``(block_m, block_n, block_k, num_warps, num_stages, group_m)``.
The space is every combination of the value sets below: 5 * 5 * 4 * 4 * 5 * 3 = 6000 configs, of
which 4026 are launchable.

The launch rule has three parts, all from the same source of truth, Triton as PyTorch inductor
prunes it (pytorch/pytorch ``torch/_inductor/template_heuristics/triton.py``):

1. Registers: ``block_m * block_n / (32 * num_warps) + 40 <= 255`` per thread. The first term is
   the fp32 accumulator spread over the CTA's threads (inductor's spill bound); 40 covers
   addresses, loop state and operand fragments. Past 255 the kernel spills; we call it
   not launchable rather than modelling spill traffic.
2. Shared memory: ``num_stages * (block_m + block_n) * block_k * 2`` bytes <= 227 KiB, the
   opt-in maximum per block on Hopper (232,448 B): each pipeline stage buffers one bf16 tile of
   x and one of W.
3. Warps: ``num_warps <= block_m * block_n / 256``, so every warp owns at least one 16x16
   accumulator tile (inductor's ``_finalize_mm_configs`` clamp). A warp with less has no
   tensor-core instruction of its own to issue; inductor never launches such a config.

Rules 1 and 2 alone (as DESIGN.md section 8 first wrote them) admit 4626 configs; the clamp
removes 600 configs that only add idle warps, leaving 4026. An earlier reference model counted
3744, which no single documented rule reproduces, so we do not follow it.

Candidates return plain lists of six ints; :func:`validate` turns such an untrusted value into a
:class:`GemmConfig` (or a reason why it is not one) and :meth:`GemmConfig.launch_problem` says
whether it can launch.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

BLOCK_M_VALUES = (16, 32, 64, 128, 256)  # rows of x per tile
BLOCK_N_VALUES = (16, 32, 64, 128, 256)  # rows of W per tile
BLOCK_K_VALUES = (16, 32, 64, 128)  # reduction step
NUM_WARPS_VALUES = (1, 2, 4, 8)
NUM_STAGES_VALUES = (1, 2, 3, 4, 5)  # software-pipeline depth
GROUP_M_VALUES = (1, 4, 8)  # M-tiles per swizzle group

FIELDS = ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m")
VALUE_SETS = (
    BLOCK_M_VALUES,
    BLOCK_N_VALUES,
    BLOCK_K_VALUES,
    NUM_WARPS_VALUES,
    NUM_STAGES_VALUES,
    GROUP_M_VALUES,
)
SPACE_SIZE = 6000  # a reference (DESIGN.md section 8): the tests check the space against it

BYTES_PER_ELEMENT = 2  # bf16
THREADS_PER_WARP = 32
MAX_REGISTERS_PER_THREAD = 255  # Hopper, compute capability 9.0
REGISTER_OVERHEAD = 40  # registers beyond the accumulator: addresses, loop state, fragments
MAX_SHARED_MEMORY_PER_BLOCK = 232_448  # bytes, 227 KiB opt-in on H100/H200
MIN_ACCUMULATOR_PER_WARP = 256  # elements: one 16x16 tile

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def registers_per_thread(block_m: int, block_n: int, num_warps: int) -> int:
    """Estimated registers per thread: the fp32 accumulator share plus a fixed overhead."""
    return block_m * block_n // (THREADS_PER_WARP * num_warps) + REGISTER_OVERHEAD


def shared_memory_bytes(block_m: int, block_n: int, block_k: int, num_stages: int) -> int:
    """Bytes of shared memory the software pipeline buffers (one x and one W tile per stage)."""
    return num_stages * (block_m + block_n) * block_k * BYTES_PER_ELEMENT


@dataclass(frozen=True, slots=True, order=True)
class GemmConfig:
    """One tile configuration, trusted side. Build untrusted ones through :func:`validate`."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        return (
            self.block_m,
            self.block_n,
            self.block_k,
            self.num_warps,
            self.num_stages,
            self.group_m,
        )

    @property
    def registers(self) -> int:
        return registers_per_thread(self.block_m, self.block_n, self.num_warps)

    @property
    def shared_memory(self) -> int:  # bytes
        return shared_memory_bytes(self.block_m, self.block_n, self.block_k, self.num_stages)

    def launch_problem(self) -> str | None:
        """Why this config cannot launch, or None when it can."""
        if self.registers > MAX_REGISTERS_PER_THREAD:
            return f"needs {self.registers} registers per thread (max {MAX_REGISTERS_PER_THREAD})"
        if self.shared_memory > MAX_SHARED_MEMORY_PER_BLOCK:
            return (
                f"needs {self.shared_memory} B of shared memory "
                f"(max {MAX_SHARED_MEMORY_PER_BLOCK} B)"
            )
        if self.num_warps * MIN_ACCUMULATOR_PER_WARP > self.block_m * self.block_n:
            return (
                f"{self.num_warps} warps for a {self.block_m}x{self.block_n} tile leave a warp "
                "less than a 16x16 accumulator"
            )
        return None

    @property
    def launchable(self) -> bool:
        return self.launch_problem() is None

    def __str__(self) -> str:
        return "GemmConfig({}, {}, {}, {}, {}, {})".format(*self.as_tuple())


def validate(values: object) -> GemmConfig | str:
    """Turn an untrusted return value into a config, or say why it is not one.

    Accepts a list or tuple of exactly six ints (not bools, not floats), each in its value set.
    Launchability is a separate question: see :meth:`GemmConfig.launch_problem`.
    """
    if not isinstance(values, list | tuple):
        return f"expected a list of 6 ints, got {type(values).__name__}"
    if len(values) != len(FIELDS):
        return f"expected 6 values, got {len(values)}"
    for field, allowed, value in zip(FIELDS, VALUE_SETS, values, strict=True):
        if type(value) is not int:
            return f"{field} must be an int, got {type(value).__name__} {value!r}"
        if value not in allowed:
            return f"{field}={value} is not one of {allowed}"
    return GemmConfig(*values)


@dataclass(frozen=True, slots=True)
class ConfigArrays:
    """Configs as parallel int64 arrays (one entry per config), for vectorised cost models."""

    block_m: IntArray
    block_n: IntArray
    block_k: IntArray
    num_warps: IntArray
    num_stages: IntArray
    group_m: IntArray

    def __len__(self) -> int:
        return len(self.block_m)

    @property
    def launchable(self) -> BoolArray:
        registers = (
            self.block_m * self.block_n // (THREADS_PER_WARP * self.num_warps) + REGISTER_OVERHEAD
        )
        smem = self.num_stages * (self.block_m + self.block_n) * self.block_k * BYTES_PER_ELEMENT
        enough_work = self.num_warps * MIN_ACCUMULATOR_PER_WARP <= self.block_m * self.block_n
        launchable: BoolArray = (
            (registers <= MAX_REGISTERS_PER_THREAD)
            & (smem <= MAX_SHARED_MEMORY_PER_BLOCK)
            & enough_work
        )
        return launchable

    @classmethod
    def of(cls, configs: tuple[GemmConfig, ...] | list[GemmConfig]) -> ConfigArrays:
        rows = np.array([c.as_tuple() for c in configs], dtype=np.int64).reshape(-1, len(FIELDS))
        return cls(*(rows[:, i].copy() for i in range(len(FIELDS))))


@functools.cache
def all_configs() -> tuple[GemmConfig, ...]:
    """The 6000 configs in a fixed order (block_m slowest, group_m fastest)."""
    return tuple(GemmConfig(*values) for values in itertools.product(*VALUE_SETS))


@functools.cache
def config_space() -> ConfigArrays:
    """The 6000 configs as arrays, in the order of :func:`all_configs`."""
    return ConfigArrays.of(all_configs())


@functools.cache
def _index_by_config() -> dict[GemmConfig, int]:
    return {config: i for i, config in enumerate(all_configs())}


def config_index(config: GemmConfig) -> int:
    """Position of a config in :func:`all_configs`."""
    return _index_by_config()[config]


def launchable_configs() -> tuple[GemmConfig, ...]:
    """The configs that can launch, in :func:`all_configs` order; a reference for tests and
    scripts (the problem reads ``config_space().launchable``)."""
    mask = config_space().launchable
    return tuple(c for c, ok in zip(all_configs(), mask, strict=True) if ok)
