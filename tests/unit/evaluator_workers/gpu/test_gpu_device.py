"""The device process: pinning, expected errors, and faults that recycle it (fake backend)."""

from __future__ import annotations

from typing import Any

import pytest

from codevolve.core.device import DeviceReply
from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
from tests.unit.evaluator_workers.gpu.fake_device_jobs import TARGETS as FAKE


def _value(reply: DeviceReply) -> Any:
    assert reply.ok, reply.error
    return reply.value


def test_the_device_process_sees_only_its_gpu_and_records_its_index() -> None:
    with DeviceProcess("3", index=3, jobs=FAKE) as device:
        seen = _value(device.run("whoami", None, timeout_s=60))
        assert (seen["visible"], seen["index"], device.index) == ("3", "3", 3)


@pytest.mark.slow
def test_a_fault_fails_that_job_and_recycles_the_process_for_the_next() -> None:
    with DeviceProcess(None, jobs=FAKE) as device:
        first = _value(device.run("whoami", None, timeout_s=60))["pid"]
        fault = device.run("fault", None, timeout_s=60)
        assert fault.fault and "illegal memory access" in fault.error
        assert _value(device.run("whoami", None, timeout_s=60))["pid"] != first
        crash = device.run("crash", None, timeout_s=60)  # the process dies without a word
        assert crash.fault and "died" in crash.error
        hang = device.run("hang", 30.0, timeout_s=0.5)
        assert hang.fault and "timed out" in hang.error
        pair = [16, 4096, 4096, 16, 64, 128, 2, 4, 1]
        measured = _value(device.run("gemm.measure", {"pairs": [pair]}, timeout_s=60))
        assert measured["timings"][0]["status"] == "ok"
        assert device.restarts == 3


def test_a_malformed_payload_is_an_error_and_keeps_the_process() -> None:
    with DeviceProcess(None, jobs=FAKE) as device:
        pid = _value(device.run("whoami", None, timeout_s=60))["pid"]
        bad = device.run("gemm.measure", {"pairs": "not a list"}, timeout_s=60)
        unknown = device.run("no-such-job", None, timeout_s=60)
        assert not bad.ok and not bad.fault and "pairs" in bad.error
        assert not unknown.ok and not unknown.fault
        assert _value(device.run("whoami", None, timeout_s=60))["pid"] == pid
        assert device.restarts == 0
