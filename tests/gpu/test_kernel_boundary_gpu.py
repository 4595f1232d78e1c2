"""gemm-kernel-gpu host code on a real GPU is caged: a launcher that reaches ``os`` through an
attribute chain finds the runner's cage, and one that answers before its GPU work is done is
caught by the judge's read of the poisoned output. Skipped without torch, Triton or a CUDA
device; run with ``pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PRELUDE = """
def _torch(t):
    return t.__class__.__torch_function__.__func__.__globals__["torch"]


def mod(t, name):
    modules = _torch(t).sys.modules
    return modules.get(name) or modules["importlib"].import_module(name)


"""
SECRET = "codevolve-gpu-judge-secret-5d0e"


@pytest.fixture(scope="module")
def loose() -> Iterator[Any]:
    from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings

    os.environ["CODEVOLVE_TEST_SECRET"] = SECRET
    pool = RunnerPool(RunnerSettings(device="cuda", rules=False), warm=1)
    yield pool
    pool.close()
    del os.environ["CODEVOLVE_TEST_SECRET"]


def _measure(pool: Any, body: str, **settings: Any) -> dict[str, Any]:
    from codevolve.problems.gemm_kernel_gpu.device.kernel_judge import MeasureSettings, measure

    source = (
        PRELUDE
        + "def matmul(x, w, y, workspace, num_sms):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
    )
    fields = {"time": False, "samples": 3, **settings}
    return measure(
        source, MeasureSettings(shapes=((64, 256, 512),), **fields), device="cuda", runners=pool
    )


def test_an_honest_host_launch_is_right_and_timed(loose: Any) -> None:
    reply = _measure(loose, "_torch(x).matmul(x, w.t(), out=y)\n", time=True)
    assert reply["problems"] == [""], reply
    row = reply["timings"][0]
    assert row["status"] == "ok" and row["graph"], row
    assert 0.5 < row["cublas_us"] / row["t_us"] < 2.0, row  # the same cuBLAS call, both sides


def test_host_code_that_reaches_os_finds_the_cage(loose: Any, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    tmp_path.chmod(0o777)
    body = f"""
    os = mod(x, "os")
    found = [k for k in os.environ if "SECRET" in k]
    try:
        with mod(x, "builtins").open({str(target)!r}, "w") as f:
            f.write("out")
        found.append("wrote")
    except mod(x, "builtins").OSError:
        pass
    try:
        mod(x, "socket").create_connection(("127.0.0.1", 6379), timeout=2)
        found.append("connected")
    except mod(x, "builtins").OSError:
        pass
    raise ValueError("found=" + ",".join(found))
    """
    reply = _measure(loose, body)
    found = reply["problems"][-1]
    assert found.endswith("found="), reply
    assert not target.exists()
    assert reply["isolation"].get("seccomp"), reply["isolation"]


def test_an_answer_before_the_gpu_work_is_done_is_caught(loose: Any) -> None:
    # The work queued behind ~25 ms of spinning on a stream of its own, and every synchronise
    # of its process (the runner's own included) made a no-op: the runner answers at once.
    body = """
    torch = _torch(x)
    torch.cuda.synchronize = lambda *args: None
    role = mod(x, "codevolve.problems.gemm_kernel_gpu.device.kernel_role")
    role._synchronize = lambda *args: None
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        torch.matmul(x, w.t(), out=y)
    """
    problem = _measure(loose, body)["problems"][-1]
    assert "wrong or unwritten" in problem, problem
