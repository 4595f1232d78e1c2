"""gemm-kernel-gpu's kernel variants run in Triton's interpreter on the CPU (TRITON_INTERPRET=1,
bf16 ``tl.dot`` fixed by tests/cli/bf16_dot_interpreter.py), in a subprocess: each variant's
program writes x @ w.T into a NaN-filled output with a NaN-filled workspace, on small shapes whose
tile counts leave a partial last wave over the few "SMs" passed in, so that tail_split's split
tiles and its reduction run. The GPU tests (tests/gpu/test_kernel_harness.py) judge the same
variants on the device.

One subprocess serves the module's tests (importing torch and Triton costs seconds): each program
is loaded from its own file as a module of its own; a subprocess that dies or a test that stops
mid-answer starts the next test on a fresh one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    VARIANTS,
    add_rule,
    apply_hunks,
    initial_program,
)

pytest.importorskip("triton")
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[4]
# (M, N, K, SMs), tail_split's 32 x 32 tiles (two 16-row chunks to sum): 3 tiles over 5 SMs,
# split 3 ways (K has 3 steps); 1 tile over 3 SMs, split 3 ways, K = 200 not a multiple of 32;
# 6 tiles over 4 SMs, the 2 tail tiles split 2 ways; 2 tiles over 7 SMs, split 2 ways; 4 and 6
# tiles over 4 and 3 SMs: no tail.
SPLIT = [(17, 80, 96, 5), (16, 32, 200, 3), (64, 96, 256, 4), (1, 40, 64, 7)]
SHAPES = [*SPLIT, (48, 64, 512, 4), (40, 96, 160, 3)]
ARGS = {
    "tail_split": (32, 32, 32, 4, 3, 2),
    "stream_k": (32, 32, 32, 4, 3, 2),
    "persistent_tail": (32, 32, 32, 4, 3, 2, 1),
    "persistent_stream_k": (32, 32, 32, 4, 3, 2, 1),
    "persistent_stream_k_fused": (32, 32, 32, 4, 3, 2, 1),
    # (its tail pieces wait for each other, which programs run one by one cannot: on the CPU its
    # launcher splits no tile, so this checks the whole-tile path alone)
    "persistent_tail_shared": (32, 32, 32, 4, 3, 2, 1),
    "split_k_fused": (16, 32, 32, 4, 3, 3),
    "plain": (16, 32, 32, 4, 3, 2),
    "gemv": (2, 16, 32, 4, 2),
    "tma_wide": (16, 32, 32, 4, 2, 2, 16),  # 48 wide: N = 80 and 40 end in the second dot
    "tma_persistent_wide": (16, 32, 32, 4, 2, 2, 0, 16),
    "tma_wide_split": (64, 32, 32, 4, 2, 2, 3, 16),  # 3 K splits; sums in two 32-row chunks
}

SCRIPT = """
import importlib.util, json, math, sys
import tests.cli.bf16_dot_interpreter  # noqa: F401
import torch
for count, line in enumerate(sys.stdin):
    path, shapes = json.loads(line)
    spec = importlib.util.spec_from_file_location(f"program_{count}", path)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    torch.manual_seed(0)
    errors = []
    for m, n, k, sms in shapes:
        x = torch.randn(m, k).to(torch.bfloat16)
        w = (torch.randn(n, k) / math.sqrt(k)).to(torch.bfloat16)
        y = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        workspace = torch.full((max(4 * m * n, 1 << 14),), float("nan"))
        program.matmul(x, w, y, workspace, sms)
        ref = x.float() @ w.float().t()
        error = (y.float() - ref).abs().max().item()  # NaN if anything was left unwritten
        if not error <= 0.016 * ref.abs().max().item() + 1e-3:
            errors.append([m, n, k, sms, error])
    print("errors:", json.dumps(errors), flush=True)
"""


ANSWER = "errors: "


class Interpreter:
    """The subprocess that runs programs in Triton's interpreter, one request a line."""

    def __init__(self, folder: Path) -> None:
        self._stderr = folder / "interpreter.stderr"
        self._process: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self._process is None or self._process.poll() is not None:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
            with self._stderr.open("w") as stderr:
                self._process = subprocess.Popen(
                    [sys.executable, "-c", SCRIPT],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                    text=True, cwd=ROOT, env=env,
                )  # fmt: skip
        return self._process

    def errors(self, path: Path) -> list[list[float]]:
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        answered = False
        try:
            process.stdin.write(json.dumps([str(path), SHAPES]) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
            while line and not line.startswith(ANSWER):  # what the program itself printed
                line = process.stdout.readline()
            answered = bool(line)
        finally:
            if not answered:  # it died, or the test stopped mid-answer: the next starts afresh
                self.close()
        assert answered, self._stderr.read_text()[-2000:]
        errors: list[list[float]] = json.loads(line.removeprefix(ANSWER))
        return errors

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.communicate()  # reaps it and closes its pipes
            self._process = None


@pytest.fixture(scope="module")
def interpreter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Interpreter]:
    server = Interpreter(tmp_path_factory.mktemp("interpreter"))
    try:
        yield server
    finally:
        server.close()


def _program(variant: str, args: tuple[int, ...]) -> str:
    source = initial_program()
    return apply_hunks(source, add_rule(source, "True", VARIANTS[variant], args) or [])


def _changed(variant: str, old: str, new: str) -> str:
    """The variant's program with one piece of its source replaced (which must be there)."""
    source = _program(variant, ARGS[variant])
    changed = source.replace(old, new)
    assert changed != source
    return changed


Errors = Callable[[str], list[list[float]]]  # a program's source -> the shapes it gets wrong


@pytest.fixture
def run(interpreter: Interpreter, tmp_path: Path) -> Errors:
    """The shapes a program gets wrong: ``[M, N, K, SMs, error]`` each."""

    def errors(source: str) -> list[list[float]]:
        path = tmp_path / "program.py"
        path.write_text(source)
        return interpreter.errors(path)

    return errors


@pytest.mark.parametrize("variant", list(ARGS))
def test_the_variant_computes_the_product(variant: str, run: Errors) -> None:
    assert run(_program(variant, ARGS[variant])) == []


@pytest.mark.parametrize(
    ("variant", "old", "new"),
    [
        # tail_split's second kernel leaves the first piece out of its sum.
        ("tail_split", "for piece in range(0, splits):", "for piece in range(1, splits):"),
        # persistent_tail's last piece leaves the first piece's partial out of its sum.
        ("persistent_tail", "for other in range(0, splits):", "for other in range(1, splits):"),
        # persistent_stream_k's fix-up leaves out the stretch of the program where a tile starts.
        (
            "persistent_stream_k",
            "acc = tl.load(ws_ptr + (2 * owner + 1) * block + inner)",
            "acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)",
        ),
        # persistent_stream_k_fused's last arrival leaves out the program where a tile starts.
        (
            "persistent_stream_k_fused",
            "for program in range(owner, final + 1):",
            "for program in range(owner + 1, final + 1):",
        ),
    ],
)
def test_a_split_tail_that_drops_a_piece_of_the_split_tiles_is_wrong(
    variant: str, old: str, new: str, run: Errors
) -> None:
    wrong = run(_changed(variant, old, new))
    # Only the shapes whose tail tiles are split go wrong: the split path ran on those.
    assert sorted(tuple(shape[:4]) for shape in wrong) == sorted(SPLIT)


@pytest.mark.parametrize("variant", ["persistent_tail", "persistent_stream_k_fused"])
def test_a_last_arrival_that_sums_only_its_first_rows_is_wrong(variant: str, run: Errors) -> None:
    # The last arrival sums a shared tile 16 rows at a time (32-row tiles here): summing the
    # first chunk alone leaves the rest of the tile unwritten, which only the split shapes with
    # more than 16 rows in a shared tile show.
    wrong = run(
        _changed(variant, "for chunk in range(0, BLOCK_M // ROWS):", "for chunk in range(0, 1):")
    )
    assert sorted(tuple(shape[:4]) for shape in wrong) == sorted(s for s in SPLIT if s[0] > 16)


def test_a_stream_k_that_drops_the_first_program_of_a_shared_tile_is_wrong(run: Errors) -> None:
    dropped = _changed(
        "stream_k",
        "acc = tl.load(ws_ptr + (2 * owner + 1) * block + inner)",
        "acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)",
    )
    wrong = {tuple(shape[:4]) for shape in run(dropped)}
    # 2 x 3 tiles of 5 K steps over 3 programs: 10 steps, two whole tiles each, nothing shared.
    assert wrong and (40, 96, 160, 3) not in wrong


def test_a_fused_split_k_whose_last_split_skips_a_partial_is_wrong(run: Errors) -> None:
    dropped = _changed("split_k_fused", "if other != split:", "if (other != split) & (other != 0):")
    assert len(run(dropped)) == len(SHAPES)  # every shape is split three ways


@pytest.mark.parametrize("variant", ["tma_wide", "tma_persistent_wide", "tma_wide_split"])
def test_a_wide_tile_whose_second_dot_reads_the_first_parts_rows_is_wrong(
    variant: str, run: Errors
) -> None:
    dropped = _changed(
        variant,
        "w_extra_desc.load([off_n + BLOCK_N, step * BLOCK_K])",
        "w_extra_desc.load([off_n, step * BLOCK_K])",
    )
    wrong = sorted(tuple(shape[:4]) for shape in run(dropped))
    # Only N = 32 fits in the first 32 columns of one tile: every other shape needs the second
    # part of a tile.
    assert wrong == sorted(shape for shape in SHAPES if shape[1] > 32)


def test_a_wide_split_whose_last_split_skips_a_partial_is_wrong(run: Errors) -> None:
    dropped = _changed(
        "tma_wide_split", "for other in range(0, splits):", "for other in range(1, splits):"
    )
    # Every shape has two K steps at least, so every tile is split and summed.
    assert len(run(dropped)) == len(SHAPES)


def test_a_wide_split_that_sums_only_the_first_chunk_of_rows_is_wrong(run: Errors) -> None:
    dropped = _changed(
        "tma_wide_split", "for chunk in range(0, BLOCK_M // ROWS):", "for chunk in range(0, 1):"
    )
    wrong = sorted(tuple(shape[:4]) for shape in run(dropped))
    # 64-row tiles summed in 32-row chunks: only shapes of more than 32 rows need the second.
    assert wrong == sorted(shape for shape in SHAPES if shape[0] > 32)


def test_a_gemv_whose_programs_all_take_the_first_tokens_is_wrong(run: Errors) -> None:
    dropped = _changed(
        "gemv", "rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)", "rows = tl.arange(0, ROWS)"
    )
    wrong = sorted(tuple(shape[:4]) for shape in run(dropped))
    # Up to two tokens a program: only the one-token shape needs no second row of programs.
    assert wrong == sorted(shape for shape in SHAPES if shape[0] > ARGS["gemv"][0])
