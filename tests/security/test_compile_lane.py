"""Hostile gemm-kernel-gpu candidates against the compile lane on the CPU: compile runners (no
GPU, Triton compiling for an sm_90 GPU) whose folders the judge copies into the timing runner of
the same source (kernel_compile.py, Runner.seed_kernels).

Source rules off, as in the boundary corpus (tests/security/test_kernel_boundary.py): each
candidate reaches ``os`` and the real builtins through a tensor's class. What the compile lane
must hold: a compile runner sees no GPU, the judge copies no link or hard link it left (a way to
make a root judge read a file for it), and what one program leaves in its folder reaches no other
program's runner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings
from codevolve.problems.gemm_kernel_gpu.device.kernel_compile import (
    CompileLane,
    Target,
)
from codevolve.problems.gemm_kernel_gpu.device.kernel_judge import MeasureSettings
from codevolve.problems.gemm_kernel_gpu.device.kernel_pipeline import (
    Pipeline,
    PipelineSettings,
)
from tests.kernel_judging import hostile_launch

SHAPE = (8, 32, 64)
SECRET = "codevolve-compile-lane-secret-5a91"
RIGHT = "y.copy_(x.float() @ w.float().t())\n"


@pytest.fixture(scope="module")
def pipeline() -> Iterator[Pipeline]:
    runners = RunnerPool(RunnerSettings(device="cpu", rules=False), warm=1)
    settings = PipelineSettings(
        compile_workers=2, target=Target("cuda", 90), compile_timeout_s=60.0
    )
    pipeline = Pipeline(settings, device="cpu", runners=runners)
    yield pipeline
    pipeline.close()
    runners.close()


def _measure(pipeline: Pipeline, source: str) -> dict[str, object]:
    settings = MeasureSettings(shapes=(SHAPE,), samples=3, warmup=1)
    return pipeline.measure(source, settings)


def _problem(reply: dict[str, object]) -> str:
    assert not reply["load_error"], reply
    problems = reply["problems"]
    assert isinstance(problems, list) and problems, reply
    return str(problems[-1])


def test_a_compile_runner_sees_no_gpu_and_is_not_interpreted() -> None:
    lane = CompileLane(width=1, target=Target("cuda", 90), num_sms=4, device="cpu", rules=False)
    body = """
    os = mod(x, "os")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    interpret = os.environ.get("TRITON_INTERPRET")
    raise ValueError(f"visible={visible!r} interpret={interpret!r}")
    """
    try:
        compiled = lane.compile(hostile_launch(body), [SHAPE])
    finally:
        lane.close()
    assert "visible='' interpret=None" in compiled.note, compiled
    assert not compiled.complete and not compiled.load_error  # no verdict from the lane


def test_the_judge_copies_no_link_a_compile_runner_left(pipeline: Pipeline, tmp_path: Path) -> None:
    secret = tmp_path / "judge-secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)  # the judge's: a runner of its own uid cannot read it
    body = f"""
    os = mod(x, "os")
    cache = os.environ["TRITON_CACHE_DIR"]
    if x.device.type == "meta":
        os.makedirs(cache + "/sub", exist_ok=True)
        os.symlink({str(secret)!r}, cache + "/sub/leak.cubin")
        os.symlink({str(tmp_path)!r}, cache + "/dir")
        try:
            os.link({str(secret)!r}, cache + "/sub/hard.cubin")
        except builtin(x, "OSError"):
            pass
        with builtin(x, "open")(cache + "/sub/mine.cubin", "w") as out:
            out.write("its own kernel")
        return
    names = []
    for root, _dirs, files in os.walk(cache):
        for name in files:
            names.append(name)
            with builtin(x, "open")(os.path.join(root, name)) as seen:
                if {SECRET!r} in seen.read():
                    raise ValueError("the judge copied " + name)
    if "mine.cubin" not in names:
        raise ValueError("its own kernel was not copied: " + ",".join(names))
    {RIGHT}"""
    reply = _measure(pipeline, hostile_launch(body))
    assert reply["problems"] == [""], reply
    assert reply["compiled_ahead"] == 1


def test_what_one_program_leaves_in_its_folder_reaches_no_other_programs_runner(
    pipeline: Pipeline,
) -> None:
    looks = f"""
    os = mod(x, "os")
    if x.device.type != "meta":
        for root, _dirs, files in os.walk(os.environ["TRITON_CACHE_DIR"]):
            if "poison.cubin" in files:
                raise ValueError("another program's file reached this runner")
    {RIGHT}"""
    victim = hostile_launch(looks)
    assert _measure(pipeline, victim)["problems"] == [""]  # its folder exists now
    folder = hashlib.sha256(victim.encode()).hexdigest()[:32]  # the victim's, by its name
    poisons = f"""
    os = mod(x, "os")
    if x.device.type == "meta":
        cache = os.environ["TRITON_CACHE_DIR"]
        for target in (cache, os.path.join(os.path.dirname(cache), {folder!r})):
            try:
                with builtin(x, "open")(os.path.join(target, "poison.cubin"), "w") as out:
                    out.write("poison")
            except builtin(x, "OSError"):
                pass
        return
    {RIGHT}"""
    assert _measure(pipeline, hostile_launch(poisons))["problems"] == [""]
    assert _measure(pipeline, victim)["problems"] == [""]  # seeded from its own folder again
