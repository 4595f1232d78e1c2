"""The shape features a kernel engineer tunes by, and the buckets of shapes they define.

For a shape (M, N, K) and a launch (a variant of :data:`~.kernel_source.VARIANTS` and its
integer parameters): how many tiles it makes, how many waves of them the SMs run (one tile per
SM at a time; a split launch's pieces count as tiles), how full the last wave is, how many K
elements each tile (or piece) reduces, the shape's arithmetic intensity, and the shared memory
one pipeline stage of the launch takes, with the deepest pipeline that fits. The figures
(research/gemm_gpu.md, section 7): 132 SMs on the H100 and the H200, 228 KiB of shared memory
per SM, of which one block may ask 227 KiB (232,448 bytes).

Rules written on these features carry to shapes no run has measured (the held-out model
families' projections); rules on exact (N, K) pairs do not. A :class:`Bucket` groups shapes by
three of them (the M regime, the waves its usual tile makes, the length of K) and writes its
membership as a test of ``M``, ``N`` and ``K`` that a dispatch rule can hold (launches.py reads
it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from codevolve.core.prompt import ProgramView
from codevolve.problems.gemm_kernel_gpu.kernel_source import LAUNCH_ARGS, VARIANTS
from codevolve.problems.gemm_tiling.rule_program import parse_shape

Shape = tuple[int, int, int]  # (M, N, K)

SMS = 132  # the H100's and the H200's SM count: the default where the device's is unknown
SMS_METRIC = "device_sms"  # the metric in which the GPU stage records the device's SM count
SHARED_PER_BLOCK = 232_448  # bytes one block may ask for (228 KiB per SM less 1 KiB reserved)
BF16 = 2  # bytes per element
# Tiles two dots wide along N: block_n plus their last parameter, extra_n.
WIDE = frozenset({"tma_wide", "tma_persistent_wide", "tma_wide_split"})
# Persistent TMA kernels hold a tile's bf16 output in shared memory beside their pipeline.
STAGED_EPILOGUE = frozenset(
    {
        "tma_persistent",
        "tma_persistent_wide",
        "persistent_tail",
        "persistent_tail_shared",
        "persistent_stream_k",
        "persistent_stream_k_fused",
    }
)


@dataclass(frozen=True, slots=True)
class Launch:
    """A variant and its parameters; every variant's first five are the tile's rows (a gemv's
    tokens per program), block_n, block_k, warps and stages."""

    variant: str
    args: tuple[int, ...]

    def param(self, name: str) -> int:
        return self.args[VARIANTS[self.variant].params.index(name)]

    @property
    def block_m(self) -> int:
        return self.args[0]

    @property
    def block_k(self) -> int:
        return self.args[2]

    @property
    def stages(self) -> int:
        return self.args[4]

    @property
    def width(self) -> int:
        """The tile's extent along N."""
        return self.args[1] + (self.args[-1] if self.variant in WIDE else 0)

    @property
    def split(self) -> int:
        """Pieces each tile's K is split into (1 for unsplit variants)."""
        return self.param("split_k") if "split_k" in VARIANTS[self.variant].params else 1

    @property
    def call(self) -> str:
        """The launch as a dispatch rule returns it."""
        launcher = VARIANTS[self.variant].launcher
        return f"{launcher}({LAUNCH_ARGS}, {', '.join(map(str, self.args))})"

    def with_param(self, name: str, value: int) -> Launch:
        at = VARIANTS[self.variant].params.index(name)
        return Launch(self.variant, (*self.args[:at], value, *self.args[at + 1 :]))

    def __str__(self) -> str:
        return f"{self.variant}({', '.join(map(str, self.args))})"


def tiles(launch: Launch, shape: Shape) -> int:
    m, n, _ = shape
    return math.ceil(m / launch.block_m) * math.ceil(n / launch.width)


def tiles_per_wave(launch: Launch, shape: Shape, sms: int = SMS) -> float:
    """Tiles (split pieces) per SM: below 1 some SMs idle, however fast each tile runs."""
    return tiles(launch, shape) * launch.split / sms


def waves(launch: Launch, shape: Shape, sms: int = SMS) -> int:
    return math.ceil(tiles(launch, shape) * launch.split / sms)


def wave_fill(launch: Launch, shape: Shape, sms: int = SMS) -> float:
    """How full the waves are on average, 1.0 when the last wave is full."""
    return tiles_per_wave(launch, shape, sms) / waves(launch, shape, sms)


def k_per_tile(launch: Launch, shape: Shape) -> int:
    """K elements one tile (one split piece) reduces."""
    return math.ceil(shape[2] / launch.split)


def intensity(shape: Shape) -> float:
    """Flops per byte moved, bf16 in and out once: 2MNK / 2(MK + NK + MN)."""
    m, n, k = shape
    return m * n * k / (m * k + n * k + m * n)


def stage_bytes(launch: Launch) -> int:
    """Shared memory one pipeline stage takes: a bf16 block of x and of w (0 for gemv, which
    runs on the CUDA cores)."""
    if launch.variant == "gemv":
        return 0
    return (launch.block_m + launch.width) * launch.block_k * BF16


def shared_bytes(launch: Launch) -> int:
    """Shared memory the launch asks for: its stages, plus the output tile a persistent TMA
    kernel keeps."""
    epilogue = launch.block_m * launch.width * BF16 if launch.variant in STAGED_EPILOGUE else 0
    return launch.stages * stage_bytes(launch) + epilogue


def max_stages(launch: Launch, limit: int = SHARED_PER_BLOCK) -> int:
    """The deepest pipeline among the variant's depths whose shared memory fits ``limit`` (the
    shallowest when none does; the launch's own depth for gemv)."""
    if launch.variant == "gemv":
        return launch.stages
    depths = VARIANTS[launch.variant].values[VARIANTS[launch.variant].params.index("stages")]
    fitting = [d for d in depths if shared_bytes(launch.with_param("stages", d)) <= limit]
    return max(fitting) if fitting else min(depths)


def tiles_expr(block_m: int, width: int) -> str:
    """The number of block_m x width tiles of y, as arithmetic of ``M`` and ``N``."""
    return f"(M + {block_m - 1}) // {block_m} * ((N + {width - 1}) // {width})"


# M regimes: (name, lowest M, highest M or None, the usual tile there as (rows, width)).
REGIMES: tuple[tuple[str, int, int | None, tuple[int, int]], ...] = (
    ("decode", 1, 16, (16, 64)),
    ("small", 17, 128, (64, 128)),
    ("mid", 129, 1023, (128, 128)),
    ("prefill", 1024, None, (128, 128)),
)
WAVE_BANDS = ("under one wave", "one to four waves", "four waves or more")
MANY_WAVES = 4
LONG_K = 4096  # K above this: long reductions, where splitting K pays


@dataclass(frozen=True, slots=True, order=True)
class Bucket:
    """Shapes alike in M regime, in the waves of the regime's usual tile, and in K's length."""

    regime: int  # index into REGIMES
    band: int  # index into WAVE_BANDS
    long_k: bool

    @property
    def name(self) -> str:
        return REGIMES[self.regime][0]

    def test(self, sms: int = SMS) -> str:
        """Membership as a dispatch rule's test of M, N and K."""
        rows, width = REGIMES[self.regime][3]
        count = tiles_expr(rows, width)
        band = (
            f"{count} < {sms}",
            f"{count} >= {sms} and {count} < {MANY_WAVES * sms}",
            f"{count} >= {MANY_WAVES * sms}",
        )[self.band]
        k_test = f"K > {LONG_K}" if self.long_k else f"K <= {LONG_K}"
        return f"{regime_test(self.regime)} and {band} and {k_test}"

    def label(self) -> str:
        _, low, high, (rows, width) = REGIMES[self.regime]
        ms = f"M {low}-{high}" if high is not None else f"M >= {low}"
        k = f"K > {LONG_K}" if self.long_k else f"K <= {LONG_K}"
        return f"{self.name} ({ms}), {WAVE_BANDS[self.band]} of {rows}x{width} tiles, {k}"


def bucket_of(shape: Shape, sms: int = SMS) -> Bucket:
    m, n, k = shape
    regime = regime_of(m)
    rows, width = REGIMES[regime][3]
    count = math.ceil(m / rows) * math.ceil(n / width)
    band = 0 if count < sms else 1 if count < MANY_WAVES * sms else 2
    return Bucket(regime, band, k > LONG_K)


def regime_of(m: int) -> int:
    """The index into :data:`REGIMES` of the regime M falls in."""
    return next(i for i, (_, low, high, _) in enumerate(REGIMES) if low <= m <= (high or m))


def regime_test(regime: int) -> str:
    """The regime's range of M, as a test."""
    _, low, high, _ = REGIMES[regime]
    if high is None:
        return f"M >= {low}"
    return f"M <= {high}" if low == 1 else f"M >= {low} and M <= {high}"


def case_shapes(view: ProgramView) -> list[Shape]:
    """The shapes of a program's per-shape cases (``"gpu M=.. N=.. K=.."``), in case order."""
    return [s for s in (parse_shape(case.key) for case in view.cases) if s is not None]


def sms_of(view: ProgramView) -> int:
    """The SM count of the GPU that measured the program (:data:`SMS` when not recorded)."""
    sms = view.metrics.get(SMS_METRIC)
    return int(sms) if sms is not None and sms >= 1 else SMS
