"""kernel.measure's payload: what a malformed one is told, before any runner starts."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

from codevolve.problems.gemm_kernel_gpu.device.kernel_jobs import (
    KernelJobError,
    settings_from,
)


def test_a_payload_gives_the_source_and_the_settings() -> None:
    payload = {"source": "s", "shapes": [[1, 2, 3]], "check_shapes": [[4, 5, 6]], "samples": 5}
    source, settings = settings_from(payload)
    assert source == "s" and settings.shapes == ((1, 2, 3),)
    assert settings.check_shapes == ((4, 5, 6),) and settings.samples == 5 and settings.time


def test_a_payload_may_only_check_when_a_store_answered_every_timed_shape() -> None:
    _, settings = settings_from({"source": "s", "shapes": [], "check_shapes": [[4, 5, 6]]})
    assert settings.shapes == () and settings.check_shapes == ((4, 5, 6),)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([], "needs a dict with a string 'source'"),
        ({"source": "s"}, "needs a list 'shapes'"),
        ({"source": "s", "shapes": []}, "needs a shape in 'shapes' or 'check_shapes'"),
        ({"source": "s", "shapes": [[1, 2]]}, "three ints"),
        ({"source": "s", "shapes": [[0, 2, 3]]}, "positive"),
        ({"source": "s", "shapes": [[1, 2, 3]], "samples": 0}, "'samples' is an int"),
        ({"source": "s", "shapes": [[1, 2, 3]], "seed": "x"}, "'seed' is an int"),
    ],
)
def test_a_malformed_payload_is_refused_in_one_line(payload: Any, message: str) -> None:
    with pytest.raises(KernelJobError, match=message):
        settings_from(payload)
