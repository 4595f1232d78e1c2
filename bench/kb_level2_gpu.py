"""KernelBench Level-2 files on a GPU: each file's ``fuse`` and ``epilogue`` children, right and
how fast against eager (and ``torch.compile``).

For every ``NN_Name.py`` of ``--dir`` (a KernelBench Level-2 folder: the user's files, outside
the repository), the reference's ``Model`` and each child ``ModelNew`` the simulated proposer
makes from it (``fuse``, ``epilogue``; ``problems/kernelbench/chain.py``) are built from the same
seed, in training mode as the judge builds them, and run on the file's inputs (``get_inputs()``)
and on the same inputs with random signs: outputs compared at atol = rtol = 1e-4 (fp32; on the
signed inputs atol scaled by the reference output's RMS, as the judge does), then both timed with
CUDA events (median of ``--reps`` calls after three, L2 not flushed); with ``--compile``,
``torch.compile`` of the reference too. One line per child:

    PASS  14_Gemm_Divide_Sum_Scaling  fuse  eager 2.710 ms  new 0.051 ms  53.14x  compile ...

then a summary. A quick look that costs minutes: the figures that count are the judge's
(``codevolve kernelbench --level 2``). Exits 1 when a child is wrong or fails to run.

    python3 bench/kb_level2_gpu.py --dir .kb/level2 [--problems 1-20,40] [--compile]
    python3 bench/kb_level2_gpu.py --dir small/ --cpu   # Triton's interpreter: small files only
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

if "--cpu" in sys.argv:  # before triton's first import: its standard library is jitted then
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import torch

from codevolve.core.diff import Applied
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.kernelbench.format import read_problem
from codevolve.problems.kernelbench.mutations import kernel_mutations
from codevolve.prompt_sampler.search_replace import apply_answer

KINDS = ("fuse", "epilogue")
TOLERANCE = 1e-4


def numbers(ranges: str) -> set[int]:
    found: set[int] = set()
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        found |= set(range(int(low), int(high or low) + 1))
    return found


def load(path: Path, name: str) -> ModuleType:
    """A module from a file (Triton's jit reads its kernels' source from one)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def child(kind: str, program: str) -> str | None:
    mutation = {m.kind: m for m in kernel_mutations()}[kind]
    parent = ProgramView(id="parent", source=program, score=1.0)
    prompt = Prompt("bench", "kernelbench", 0, 0, parent, (), {}, context="", text="")
    answer = mutation.propose(prompt, np.random.default_rng(0))
    if answer is None:
        return None
    applied = apply_answer(program, answer)
    return applied.source if isinstance(applied, Applied) else None


def on(device: str, values: list[Any]) -> list[Any]:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def signed(values: list[Any], generator: torch.Generator) -> list[Any]:
    return [
        v * torch.where(torch.rand(v.shape, generator=generator) < 0.5, -1.0, 1.0).to(v)
        if isinstance(v, torch.Tensor) and v.is_floating_point()
        else v
        for v in values
    ]


def agree(got: Any, want: Any, *, scaled: bool) -> str:
    """ "" when ``got`` matches ``want``, else what differs."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        shape = getattr(got, "shape", type(got).__name__)
        return f"shape/dtype {shape} {getattr(got, 'dtype', '')} vs {want.shape} {want.dtype}"
    atol = TOLERANCE * (float(want.float().pow(2).mean().sqrt()) if scaled else 1.0)
    atol = max(atol, TOLERANCE) if scaled else atol
    if torch.allclose(got, want, atol=atol, rtol=TOLERANCE, equal_nan=True):
        return ""
    return f"max|err| {float((got - want).abs().max()):.3g}"


def timed(run: Callable[[], Any], device: str, reps: int) -> float:
    """Median milliseconds per call."""
    if device != "cuda":
        return float("nan")
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def judge_file(path: Path, args: argparse.Namespace, work: Path) -> list[tuple[str, str]]:
    """(kind, line) for each child of the file."""
    device = "cpu" if args.cpu else "cuda"
    source = path.read_text()
    program = read_problem(source, name=path.stem).initial_program
    reference = load(path, f"ref_{path.stem}")
    init = reference.get_init_inputs()
    torch.manual_seed(0)
    model = reference.Model(*init).to(device)
    torch.manual_seed(1)
    inputs = on(device, reference.get_inputs())
    draws = [("kernelbench", inputs), ("signed", signed(inputs, torch.Generator().manual_seed(2)))]
    lines = []
    with torch.no_grad():
        wants = [model(*values) for _, values in draws]
        eager = timed(lambda: model(*inputs), device, args.reps)
        compiled = float("nan")
        if args.compile:
            try:
                fast = torch.compile(model)
                compiled = timed(lambda: fast(*inputs), device, args.reps)
            except Exception as error:  # noqa: BLE001 (a reference torch.compile cannot take: reported)
                print(f"      {path.stem}: torch.compile failed: {error}".splitlines()[0])
        for kind in KINDS:
            text = child(kind, program)
            if text is None:
                continue
            file = work / f"{kind}_{path.stem}.py"
            file.write_text(text)
            try:
                torch.manual_seed(0)
                new = load(file, f"{kind}_{path.stem}").ModelNew(*init).to(device)
                new.load_state_dict(model.state_dict())
                wrong = [
                    f"{name}: {problem}"
                    for (name, values), want in zip(draws, wants, strict=True)
                    if (problem := agree(new(*values), want, scaled=name != "kernelbench"))
                ]
                mine = timed(lambda new=new: new(*inputs), device, args.reps)
            except Exception:  # noqa: BLE001 (a child that fails to run: reported)
                lines.append((kind, f"FAIL  {path.stem}  {kind}  {traceback.format_exc(-1)}"))
                continue
            verdict = "WRONG" if wrong else "PASS "
            figures = f"eager {eager:.3f} ms  new {mine:.3f} ms  {eager / mine:.2f}x"
            if args.compile:
                figures += f"  compile {compiled:.3f} ms {compiled / mine:.2f}x"
            detail = f"  ({'; '.join(wrong)})" if wrong else ""
            lines.append((kind, f"{verdict} {path.stem[:44]:44}  {kind:8}  {figures}{detail}"))
            del new
    if device == "cuda":
        torch.cuda.empty_cache()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="a folder of NN_Name.py files")
    parser.add_argument("--problems", default="", help="numbers and ranges: 1-20,40 (all)")
    parser.add_argument("--reps", type=int, default=20, help="timed calls per model")
    parser.add_argument("--compile", action="store_true", help="time torch.compile too")
    parser.add_argument("--cpu", action="store_true", help="in Triton's interpreter (no timing)")
    args = parser.parse_args()
    wanted = numbers(args.problems) if args.problems else None
    files = sorted(
        (p for p in args.dir.glob("*.py") if re.match(r"^\d+_", p.name)),
        key=lambda p: int(p.name.split("_")[0]),
    )
    files = [p for p in files if wanted is None or int(p.name.split("_")[0]) in wanted]
    results: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as directory:
        for path in files:
            try:
                found = judge_file(path, args, Path(directory))
            except Exception:  # noqa: BLE001 (a file that fails to run: reported)
                found = [("", f"FAIL  {path.stem}  reference: {traceback.format_exc(-1)}")]
            for _, line in found:
                print(line, flush=True)
            results += found
    passed = [line for _, line in results if line.startswith("PASS")]
    print(f"\n{len(passed)} of {len(results)} children right over {len(files)} files")
    for kind in KINDS:
        speedups = [
            float(m.group(1))
            for k, line in results
            if k == kind
            and line.startswith("PASS")
            and (m := re.search(r"new [\d.]+ ms  ([\d.]+)x", line))
        ]
        faster = sum(s > 1.0 for s in speedups)
        print(f"  {kind}: {len(speedups)} right, {faster} faster than eager")
    return 0 if len(passed) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
