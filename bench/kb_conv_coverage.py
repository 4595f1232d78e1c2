"""Which KernelBench convolution problems each convolution proposal applies to.

Every file of a folder is read as codevolve reads it (its initial program); for each one whose
forward is a convolution module (and each file whose name says ``conv``), the simulated
proposer's ``template`` move is asked which templates it proposes, and each template's child is
run on the problem's own settings and shapes to see what it does there: a Triton kernel that
launches, the product over unfolded patches, cuDNN (with the channels-last layout or not), or a
fall back to the module. The children run on meta tensors (shapes, no memory, no GPU) with
their kernels replaced by a recorder, so this takes seconds on any machine.

    python bench/kb_conv_coverage.py --dir KernelBench/KernelBench/level1

One line per problem, then per template the problems where it computes. Reads the problem files
(the user's own trusted code) and runs their ``get_inputs``/``get_init_inputs`` on meta tensors.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from codevolve.core.diff import Applied
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.kernelbench.convs import Conv
from codevolve.problems.kernelbench.format import KernelProblemError, read_problem
from codevolve.problems.kernelbench.mutations import kernel_mutations
from codevolve.problems.kernelbench.patterns import recognise
from codevolve.problems.kernelbench.template_text import MARKER
from codevolve.problems.kernelbench.templates import templates_for
from codevolve.prompt_sampler.search_replace import apply_answer

KERNELS = ("conv_gemm_kernel", "conv_depthwise_kernel")
TEMPLATE = next(m for m in kernel_mutations() if m.kind == "template")
SEEDS = range(60)  # template draws: every template of a convolution shows among these


def load(path: Path, source: str) -> ModuleType:
    path.write_text(source)  # triton.jit reads a kernel's source from its file
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def children(initial: str) -> dict[str, str]:
    """The template move's children of ``initial``, by template name."""
    parent = ProgramView(id="initial", source=initial, score=1.0)
    prompt = Prompt("bench", "kernelbench", 0, 0, parent, (), {}, context="", text="")
    found: dict[str, str] = {}
    for seed in SEEDS:
        answer = TEMPLATE.propose(prompt, np.random.default_rng(seed))
        applied = apply_answer(initial, answer) if answer is not None else None
        if isinstance(applied, Applied):
            marker = next(line for line in applied.source.split("\n") if line.startswith(MARKER))
            found.setdefault(marker.split()[2], applied.source)
    return found


class Recorder:
    """Stands for a kernel or the fallback: records that it was reached, computes nothing."""

    def __init__(self) -> None:
        self.reached = False

    def __getitem__(self, grid: Any) -> Recorder:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.reached = True


def outcome(name: str, module: ModuleType, conv: Conv, problem: ModuleType) -> str:
    """What the child ``module`` (template ``name``) does on the problem's settings and shapes."""
    with torch.device("meta"):
        init = problem.get_init_inputs()
        model = module.ModelNew(*init)
        inputs = problem.get_inputs()
    kernels = {k: Recorder() for k in KERNELS if hasattr(module, k)}
    for kernel, recorder in kernels.items():
        setattr(module, kernel, recorder)
    fallback = Recorder()
    model.forward_torch = fallback
    with torch.no_grad():
        model(*inputs)
    if fallback.reached:
        return "falls back"
    if any(r.reached for r in kernels.values()):
        return "kernel"
    if name == "conv_cudnn":
        layout = conv.dims in (2, 3) and getattr(module, "CHANNELS_LAST", 0)
        return "cuDNN, channels-last" if layout else "cuDNN"
    return "product"


def number(path: Path) -> int:
    found = re.match(r"(\d+)_", path.name)
    return int(found.group(1)) if found else 10**9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="a folder of problem files")
    args = parser.parse_args()
    files = sorted(args.dir.glob("*.py"), key=number)
    computes: dict[str, list[int]] = {}
    unrecognised: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            source = path.read_text()
            try:
                initial = read_problem(source, name=path.stem).initial_program
            except KernelProblemError as error:
                print(f"{path.stem}: not read: {error}")
                continue
            found = recognise(ast.parse(initial))
            if found is None or not isinstance(found.pattern, Conv):
                if "conv" in path.stem.lower():
                    unrecognised.append(path.stem)
                    print(f"{path.stem}: no convolution pattern (no template proposed)")
                continue
            conv = found.pattern
            problem = load(Path(tmp) / f"problem_{number(path)}.py", source)
            named = [t.name for t in templates_for(conv, found.forward)]
            built = children(initial)
            assert sorted(built) == sorted(named), (path.stem, sorted(built), named)
            results = []
            for name in named:
                child = load(Path(tmp) / f"{name}_{number(path)}.py", built[name])
                what = outcome(name, child, conv, problem)
                results.append(f"{name}: {what}")
                if what != "falls back":
                    computes.setdefault(name, []).append(number(path))
            form = f"{'transposed ' if conv.transposed else ''}{conv.dims}-D, groups {conv.groups}"
            print(f"{path.stem}: {form}: " + "; ".join(results))
    print()
    for name in ("conv_gemm", "conv_depthwise", "conv_unfold", "conv_cudnn"):
        numbers = computes.get(name, [])
        print(f"{name} computes {len(numbers)} problems: {' '.join(map(str, numbers))}")
    print(f"no template: {len(unrecognised)}: {' '.join(unrecognised)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
