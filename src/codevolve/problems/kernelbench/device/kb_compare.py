"""Comparing a KernelBench candidate's output with the reference's (trusted code).

An output matches when it has the reference's structure (a tensor, or a tuple/list of tensors
and plain values), and each tensor its shape, dtype, device and layout, with NaN and infinities
exactly where the reference has them and every other element within a dtype-aware tolerance
(``torch.isclose``: atol = rtol = 1e-4 for 32- and 64-bit floats, 1e-2 for 16-bit ones; integer
and boolean outputs exactly). A broadcastable shape (``keepdim`` forgotten) or a different dtype
is a wrong output before any value is looked at.

:func:`deferred_check` is the timed rounds' form: it enqueues the elementwise comparison on the
current CUDA stream without waiting, and reads the verdict once the rounds are over.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

DEFAULT_TOLERANCE = 1e-4  # atol and rtol for float32/float64 (and complex) outputs
HALF_TOLERANCE = 1e-2  # atol and rtol for float16/bfloat16 outputs
_HALF = (torch.float16, torch.bfloat16)
# Elements compared at a time. Whole-tensor temporaries (and a boolean mask's index, 8 bytes per
# dimension per element) ran a 7.5 GB output out of an 80 GB GPU; a chunk's stay about 0.5 GB.
CHUNK = 1 << 26
_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)  # exact types: no subclass that lies


@dataclass(frozen=True, slots=True)
class Comparison:
    """Why an output does not match (empty when it does), and the largest absolute error seen
    where both are finite."""

    problem: str
    max_abs_error: float = 0.0


def tolerance_for(dtype: torch.dtype, override: float | None) -> float:
    if override is not None:
        return override
    return HALF_TOLERANCE if dtype in _HALF else DEFAULT_TOLERANCE


def tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors of an output or an argument list (one level of tuple/list)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def all_finite(value: Any) -> bool:
    return all(
        bool(torch.isfinite(part).all())
        for t in tensors_of(value)
        if _is_inexact(t)
        for (part,) in _parts(t)
    )


def aliased_input(output: Any, inputs: Sequence[Any]) -> int | None:
    """The index of an input whose memory an output tensor shares, if any."""
    for index, tensor in enumerate(inputs):
        if not isinstance(tensor, torch.Tensor):
            continue
        storage = tensor.untyped_storage().data_ptr()
        if any(out.untyped_storage().data_ptr() == storage for out in tensors_of(output)):
            return index
    return None


def compare(
    output: Any, expected: Any, tolerance: float | None, *, scaled: bool = False
) -> Comparison:
    """Whether ``output`` matches the reference's ``expected`` output. ``scaled``: the absolute
    tolerance is multiplied by the reference output's RMS (at least 1), for inputs whose sums
    cancel (signed, wide): a reordered reduction's error there is relative to the terms summed,
    not to the small result."""
    pairs, problem = _pairs(output, expected)
    if problem:
        return Comparison(problem)
    worst = 0.0
    for label, out, ref in pairs:
        problem = _metadata_problem(label, out, ref)
        if problem:
            return Comparison(problem, worst)
        if not _is_inexact(ref):
            if not torch.equal(out, ref):
                wrong = int((out != ref).sum())
                return Comparison(f"{label}: {wrong} of {ref.numel()} elements differ", worst)
            continue
        rtol = tolerance_for(ref.dtype, tolerance)
        atol = rtol * _rms(ref) if scaled else rtol
        wrong, stray, error = _differences(out, ref, rtol, atol)
        worst = max(worst, error)
        if wrong:
            text = f"{label}: {wrong} of {ref.numel()} elements wrong (max abs error {worst:.3g})"
            if stray:
                text += f"; {stray} NaN where the reference has none"
            return Comparison(text, worst)
    return Comparison("", worst)


def deferred_check(output: Any, expected: Any, tolerance: float | None) -> Callable[[], str]:
    """The comparison of a timed round, enqueued now on the current stream, read later.

    Structure, shape and dtype are host facts and are judged at once; the elementwise test is
    queued behind the work already on the stream, so work the candidate left on another stream
    is still missing when it runs."""
    pairs, problem = _pairs(output, expected)
    problems = [problem] + [_metadata_problem(label, out, ref) for label, out, ref in pairs]
    first = next((p for p in problems if p), "")
    if first:
        return lambda: first
    counts = []
    for _label, out, ref in pairs:
        tol = tolerance_for(ref.dtype, tolerance)
        for part_out, part_ref in _parts(out, ref):
            if _is_inexact(ref):
                close = torch.isclose(part_out, part_ref, rtol=tol, atol=tol, equal_nan=True)
                counts.append((~close).sum())
            else:
                counts.append((part_out != part_ref).sum())

    def verdict() -> str:
        wrong = sum(int(c) for c in counts)
        return f"{wrong} elements wrong" if wrong else ""

    return verdict


def _is_inexact(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


def _pairs(output: Any, expected: Any) -> tuple[list[tuple[str, Any, torch.Tensor]], str]:
    """(label, candidate value, reference tensor) to compare, or why the structures differ."""
    if isinstance(expected, torch.Tensor):
        return [("output", output, expected)], ""
    if isinstance(expected, tuple | list):
        if not isinstance(output, tuple | list) or len(output) != len(expected):
            kind = f"{type(expected).__name__} of {len(expected)}"
            return [], f"the output is {_describe(output)}, the reference's a {kind}"
        pairs = []
        for index, (out, ref) in enumerate(zip(output, expected, strict=True)):
            if isinstance(ref, torch.Tensor):
                pairs.append((f"output {index}", out, ref))
            elif type(out) is not type(ref) or out != ref:
                return [], f"output {index} is {out!r}, the reference's {ref!r}"
        return pairs, ""
    if type(output) is not type(expected) or output != expected:
        return [], f"the output is {_describe(output)}, the reference's {expected!r}"
    return [], ""


def _describe(value: Any) -> str:
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _metadata_problem(label: str, out: Any, ref: torch.Tensor) -> str:
    if type(out) not in _TENSOR_TYPES:
        return f"{label} is {_describe(out)}, not a tensor"
    if out.shape != ref.shape:
        return f"{label}: shape {tuple(out.shape)}, the reference's {tuple(ref.shape)}"
    if out.dtype != ref.dtype:
        return f"{label}: dtype {out.dtype}, the reference's {ref.dtype}"
    if out.device != ref.device:
        return f"{label}: on {out.device}, the reference's on {ref.device}"
    if out.layout != ref.layout:
        return f"{label}: layout {out.layout}, the reference's {ref.layout}"
    return ""


def _parts(*tensors: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
    """The same ``CHUNK``-element slices of each tensor, flattened (tensors of one shape)."""
    flat = [t.reshape(-1) for t in tensors]
    for start in range(0, flat[0].numel(), CHUNK):
        yield tuple(t[start : start + CHUNK] for t in flat)


def _rms(tensor: torch.Tensor) -> float:
    """The root mean square of the finite elements (1.0 when none is)."""
    total = torch.zeros((), dtype=torch.float64, device=tensor.device)
    count = torch.zeros((), dtype=torch.int64, device=tensor.device)
    for (part,) in _parts(tensor):
        finite = torch.isfinite(part)
        total += torch.where(finite, part.abs(), 0).double().pow(2).sum()
        count += finite.sum()
    if int(count) == 0:
        return 1.0
    return max(1.0, float((total / count).sqrt()))


def _widened(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in _HALF else tensor


def _differences(
    out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float
) -> tuple[int, int, float]:
    """Elements outside the tolerance, NaNs where the reference has none, and the largest
    absolute error where both are finite; read one ``CHUNK`` at a time, so the temporaries stay
    small beside a GB-sized output."""
    wrong = torch.zeros((), dtype=torch.int64, device=ref.device)
    stray = torch.zeros((), dtype=torch.int64, device=ref.device)
    worst = torch.zeros((), dtype=torch.float64, device=ref.device)
    for part_out, part_ref in _parts(out, ref):
        close = torch.isclose(part_out, part_ref, rtol=rtol, atol=atol, equal_nan=True)
        wrong += (~close).sum()
        stray += (torch.isnan(part_out) & ~torch.isnan(part_ref)).sum()
        both = torch.isfinite(part_out) & torch.isfinite(part_ref)
        error = (_widened(part_out) - _widened(part_ref)).abs()
        worst = torch.maximum(worst, torch.where(both, error, 0).max().double())
    return int(wrong), int(stray), min(float(worst), sys.float_info.max)  # finite: JSON
