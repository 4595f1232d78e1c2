"""The device process: pinning, expected errors, faults that recycle it, and jobs from several
loops at once (fake backend)."""

from __future__ import annotations

import threading
import time
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


def _together(device: DeviceProcess, jobs: list[tuple[str, Any, float]]) -> list[DeviceReply]:
    """Run ``(job, payload, timeout_s)`` each from a thread of its own (the worker's loops),
    started in order a little apart; their replies in the same order."""
    replies: list[DeviceReply | None] = [None] * len(jobs)

    def run(index: int) -> None:
        job, payload, timeout_s = jobs[index]
        replies[index] = device.run(job, payload, timeout_s=timeout_s)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
        time.sleep(0.1)
    for thread in threads:
        thread.join(timeout=60)
    assert all(reply is not None for reply in replies)
    return [reply for reply in replies if reply is not None]


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_jobs_from_several_loops_hold_the_device_one_at_a_time() -> None:
    with DeviceProcess(None, jobs=FAKE) as device:
        _value(device.run("whoami", None, timeout_s=60))
        first, second = _together(device, [("hold", 0.6, 60), ("hold", 0.6, 60)])
        assert not _overlap(_value(first), _value(second))


def test_a_concurrent_job_runs_while_an_ordinary_one_holds_the_device() -> None:
    with DeviceProcess(None, jobs=FAKE) as device:
        _value(device.run("whoami", None, timeout_s=60))
        held, shared = _together(device, [("hold", 1.0, 60), ("pipelined", {"s": 0.5}, 60)])
        assert _overlap(_value(held), _value(shared))


def test_a_concurrent_job_that_says_it_is_alive_outlives_its_timeout() -> None:
    with DeviceProcess(None, jobs=FAKE) as device:
        _value(device.run("whoami", None, timeout_s=60))  # started: the timeouts are the jobs'
        moving = device.run("pipelined", {"s": 5.0, "every": 0.2}, timeout_s=2.0)
        assert moving.ok, moving.error
        silent = device.run("pipelined", {"s": 10.0}, timeout_s=2.0)
        assert silent.fault and "timed out" in silent.error


@pytest.mark.slow
def test_a_hung_job_fails_the_jobs_in_flight_with_it_and_the_next_gets_a_fresh_process() -> None:
    with DeviceProcess(None, jobs=FAKE) as device:
        pid = _value(device.run("whoami", None, timeout_s=60))["pid"]
        hung, beside = _together(device, [("hang", 30.0, 1.0), ("pipelined", {"s": 20.0}, 60)])
        assert hung.fault and "timed out" in hung.error
        assert beside.fault and "did not finish" in beside.error
        assert _value(device.run("whoami", None, timeout_s=60))["pid"] != pid
        assert device.restarts == 1


def test_the_generic_info_job_answers_while_another_job_holds_the_device() -> None:
    pytest.importorskip("torch")
    with DeviceProcess(None, jobs={"hold": FAKE["hold"]}) as device:
        _value(device.run("info", None, timeout_s=120))  # torch imported
        answered: list[float] = []

        def ask_info() -> None:
            time.sleep(0.5)  # the hold has the device by now
            _value(device.run("info", None, timeout_s=60))
            answered.append(time.monotonic())

        asking = threading.Thread(target=ask_info)
        asking.start()
        held = _value(device.run("hold", 3.0, timeout_s=60))
        asking.join(timeout=60)
        assert answered and answered[0] < held[1]  # while the hold still held the device


def test_a_job_queued_for_the_device_is_not_timed_out_while_it_waits() -> None:
    with DeviceProcess(None, jobs=FAKE) as device:
        _value(device.run("whoami", None, timeout_s=60))
        first, second = _together(device, [("hold", 1.5, 2.5), ("hold", 1.5, 2.5)])
        assert not _overlap(_value(first), _value(second))  # the second ran 3 s after it was sent
