"""Which GPUs a host offers, which a --gpus value selects, and how workers are pinned."""

from __future__ import annotations

import pytest

from codevolve.core.device import GPU
from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
from codevolve.evaluator_workers.gpu.pinning import (
    GpuSelectionError,
    embedded_gpus,
    open_devices,
    pinned_commands,
    pinned_env,
    select_gpus,
    visible_gpus,
    worker_slots,
)


class _GpuStage:
    capability = GPU


class _CpuStage:
    pass


def test_visible_gpus_follow_cuda_visible_devices_else_the_driver() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,5"}, query=lambda: ["0"]) == ["2", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, query=lambda: ["0"]) == []
    assert visible_gpus({}, query=lambda: ["0", "1", "2", "3"]) == ["0", "1", "2", "3"]


def test_select_gpus_takes_all_none_or_named_ids_and_refuses_unknown_ones() -> None:
    visible = ["0", "1", "2", "3"]
    assert select_gpus("all", visible) == visible
    assert select_gpus("none", visible) == []
    assert select_gpus("3,1", visible) == ["3", "1"]
    with pytest.raises(GpuSelectionError, match="no GPU 7"):
        select_gpus("1,7", visible)
    with pytest.raises(GpuSelectionError, match="twice"):
        select_gpus("1,1", visible)


def test_each_worker_is_pinned_to_one_gpu_and_records_its_index() -> None:
    env = pinned_env("2", 0, base={"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "2", "CODEVOLVE_DEVICE_INDEX": "2"}
    uuid = pinned_env("GPU-8e3f", 1, base={})
    assert uuid["CODEVOLVE_DEVICE_INDEX"] == "1"  # a UUID id records its position
    devices = open_devices(["0", "1", "2", "3"], jobs=())
    assert [d.index for d in devices] == [0, 1, 2, 3]


def test_embedded_runs_use_one_gpu_when_a_stage_needs_it_or_those_asked_for() -> None:
    four = ["0", "1", "2", "3"]
    assert embedded_gpus([_CpuStage(), _GpuStage()], None, visible=four) == ["0"]
    assert embedded_gpus([_CpuStage()], None, visible=four) == []
    assert embedded_gpus([_CpuStage(), _GpuStage()], None, visible=[]) == []
    assert embedded_gpus([_GpuStage()], "all", visible=four) == four


def test_worker_slots_give_each_device_its_own_worker() -> None:
    assert worker_slots(2, []) == [("local", 2, None)]
    devices = [DeviceProcess(str(i), index=i) for i in range(4)]
    slots = worker_slots(2, devices)
    assert [(name, loops) for name, loops, _ in slots] == [
        ("local-gpu0", 1),
        ("local-gpu1", 1),
        ("local-gpu2", 1),
        ("local-gpu3", 1),
    ]
    assert [device for _, _, device in slots] == devices


def test_a_multi_gpu_worker_command_becomes_one_command_per_gpu() -> None:
    argv = ["worker", "--redis", "redis://h", "--capability", "gpu", "--gpus", "all", "-v"]
    commands = pinned_commands(argv, ["0", "2"])
    assert [c[-2:] for c in commands] == [["--gpus", "0"], ["--gpus", "2"]]
    for command in commands:
        assert command[1:3] == ["-m", "codevolve.services.cli"]
        assert command[3:-2] == ["worker", "--redis", "redis://h", "--capability", "gpu", "-v"]
    assert pinned_commands(["worker", "--gpus=all"], ["1"])[0][3:] == ["worker", "--gpus", "1"]
