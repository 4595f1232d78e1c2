"""The judge's output comparison read a chunk at a time: the same verdicts as whole tensors.

The chunk is set to a few elements so that every case spans several; the figures are checked
against the whole-tensor formulas."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from codevolve.problems.kernelbench.device import kb_compare  # noqa: E402
from codevolve.problems.kernelbench.device.kb_compare import all_finite, compare  # noqa: E402


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kb_compare, "CHUNK", 7)


def test_a_wrong_element_in_the_last_chunk_is_counted_with_the_largest_error() -> None:
    ref = torch.linspace(-3.0, 3.0, 60).reshape(3, 4, 5)
    out = ref.clone()
    out[2, 3, 4] += 0.5
    out[0, 0, 1] += 5e-5  # inside the tolerance
    result = compare(out, ref, None)
    assert result.problem == "output: 1 of 60 elements wrong (max abs error 0.5)"
    assert result.max_abs_error == pytest.approx(0.5, rel=1e-6)
    assert compare(ref.clone(), ref, None).problem == ""


def test_nans_where_the_reference_has_none_are_named_and_matching_nans_pass() -> None:
    ref = torch.arange(30, dtype=torch.float32)
    ref[3] = float("nan")
    out = ref.clone()
    assert compare(out, ref, None).problem == ""  # NaN where the reference has NaN
    out[20] = float("nan")
    out[25] = float("inf")
    result = compare(out, ref, None)
    assert result.problem.startswith("output: 2 of 30 elements wrong")
    assert result.problem.endswith("; 1 NaN where the reference has none")


def test_the_scaled_tolerance_uses_the_rms_of_the_finite_reference_elements() -> None:
    ref = torch.full((50,), 100.0)
    ref[7] = float("inf")  # left out of the RMS
    assert kb_compare._rms(ref) == pytest.approx(100.0)
    assert kb_compare._rms(torch.full((9,), float("nan"))) == 1.0
    signed = torch.tensor([3.0, -4.0] * 20)
    assert kb_compare._rms(signed) == pytest.approx(math.sqrt(12.5))
    out = ref.clone()
    out[40] += 0.015  # over 1e-4 + 1e-4 * 100, under 1e-4 * rms (100) + 1e-4 * 100
    assert compare(out, ref, None).problem != ""
    assert compare(out, ref, None, scaled=True).problem == ""


def test_integer_outputs_match_exactly_and_finiteness_is_read_in_chunks() -> None:
    ref = torch.arange(40)
    out = ref.clone()
    out[33] = -1
    assert compare(out, ref, None).problem == "output: 1 of 40 elements differ"
    values = torch.ones(40)
    assert all_finite([values, ref])
    values[39] = float("inf")
    assert not all_finite(values)


def test_a_deferred_check_counts_wrong_elements_across_chunks() -> None:
    ref = torch.rand(45)
    out = ref.clone()
    out[0] += 1
    out[44] -= 1
    assert kb_compare.deferred_check(out, ref, None)() == "2 elements wrong"
    assert kb_compare.deferred_check(ref.clone(), ref, None)() == ""
