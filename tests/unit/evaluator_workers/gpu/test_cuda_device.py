"""The device record every GPU measurement carries, without a GPU: torch's properties faked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from codevolve.evaluator_workers.gpu.cuda_device import (  # noqa: E402
    INDEX_ENV,
    cuda_device_info,
    device_info,
)

H200 = SimpleNamespace(
    name="NVIDIA H200", multi_processor_count=132, L2_cache_size=60 << 20, total_memory=141 << 30
)


@pytest.fixture
def h200(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: H200)
    monkeypatch.setenv(INDEX_ENV, "3")


@pytest.mark.usefixtures("h200")
def test_the_record_names_the_device_its_host_index_size_and_versions() -> None:
    assert cuda_device_info() == {
        "name": "NVIDIA H200",
        "index": 3,
        "sms": 132,
        "l2_bytes": 60 << 20,
        "memory_bytes": 141 << 30,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
    }


@pytest.mark.usefixtures("h200")
def test_the_kernelbench_judge_records_the_same_device_typed_cuda() -> None:
    assert device_info("cuda") == {"type": "cuda", **cuda_device_info()}
    assert device_info("cpu")["type"] == "cpu"
