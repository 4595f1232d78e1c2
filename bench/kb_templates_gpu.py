"""KernelBench templates on a GPU: is each one right, and is it faster than PyTorch eager?

For one example problem of each recognised pattern (KernelBench Level-1 shapes, scaled to about
0.5-1 GB per input), the ``template`` mutation (and, where one applies, the ``rewrite`` mutation)
builds a child ModelNew from the reference's class exactly as the simulated proposer does; the
child is imported from a file, run on the same inputs as the reference and compared with it
(atol = rtol = 1e-4 for fp32, 1e-2 for bf16, KernelBench's tolerances), then both are timed with
CUDA events (median of --reps calls after warm-up). One line per case:

    PASS  softmax  template  (4096, 32768) float32  max|err| 3.0e-09  eager 1.1 ms  new 0.9 ms  1.21x

and a summary. Exits 1 if any child is wrong or fails to run, 0 otherwise. A pattern with several
templates (a convolution) has each built and timed, labelled ``template:<name>``. fp32 computes in
fp32 here as in the judge (TF32 off for cuDNN and cuBLAS); a child that switches cuDNN's
algorithm search on has it for its own calls only.

    python3 bench/kb_templates_gpu.py                 # all cases on cuda
    python3 bench/kb_templates_gpu.py -k softmax cumsum
    python3 bench/kb_templates_gpu.py --cpu           # Triton's interpreter, tiny shapes (a check)
"""

# ruff: noqa: E501  (the example problems are one-line programs)
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if "--cpu" in sys.argv:  # before triton's first import: its standard library is jitted then
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import torch

from codevolve.core.diff import Applied
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.kernelbench.device.kb_precision import fp32_in_fp32
from codevolve.problems.kernelbench.mutations import kernel_mutations
from codevolve.problems.kernelbench.template_text import MARKER
from codevolve.prompt_sampler.search_replace import apply_answer

HEAD = '''"""KernelBench-style problem {name}."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

dim = 1

# EVOLVE-BLOCK-START
class ModelNew(nn.Module):
    def __init__(self{init_args}):
        super().__init__()
{init_body}
    def forward(self, {forward_args}):
{body}
# EVOLVE-BLOCK-END
'''

Inputs = Callable[[Callable[..., torch.Tensor]], list[Any]]


@dataclass(frozen=True)
class Case:
    name: str
    forward_args: str
    body: str
    inputs: Inputs  # given a factory (shape -> tensor on the device), the forward's arguments
    init: tuple[Any, ...] = ()
    init_args: str = ""
    init_body: str = ""
    tolerance: float = 1e-4

    def source(self) -> str:
        return HEAD.format(
            name=self.name,
            init_args=self.init_args,
            init_body="".join(f"        {line}\n" for line in self.init_body.split("\n") if line),
            forward_args=self.forward_args,
            body="\n".join(f"        {line}" for line in self.body.split("\n")),
        )


DIM = {"init_args": ", dim: int = 1", "init_body": "self.dim = dim"}


def cases(s: int) -> list[Case]:
    """The example problems; ``s`` divides the large sizes (1 on a GPU, small on the CPU)."""

    def d(size: int) -> int:
        return max(1, size // s)

    rows, cols = d(4096), d(65536)

    def elementwise(name: str, body: str, **kw: Any) -> Case:
        return Case(name, "x", body, lambda r: [r(rows, cols, signed=True) * 3], **kw)

    def pair(name: str, body: str, make: Inputs) -> Case:
        return Case(name, "predictions, targets", body, make)

    def matrices(name: str, body: str, make: Inputs, **kw: Any) -> Case:
        return Case(name, "A, B", body, make, **kw)

    def conv(name: str, module: str, make: Inputs) -> Case:
        return Case(name, "x", "return self.conv(x)", make, init_body=f"self.conv = {module}")

    n = d(4096)
    side = 224 if s == 1 else 48  # problem 50's images, smaller in the interpreter
    return [
        elementwise("swish", "return x * torch.sigmoid(x)"),
        elementwise(
            "gelu_tanh",
            "return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))",
        ),
        elementwise(
            "leaky_relu",
            "return F.leaky_relu(x, negative_slope=self.slope)",
            init=(0.01,),
            init_args=", slope: float = 0.01",
            init_body="self.slope = slope",
        ),
        elementwise("selu", "return torch.selu(x)"),
        elementwise("softplus", "return F.softplus(x)"),
        elementwise("hardsigmoid", "return F.hardsigmoid(x)"),
        elementwise("elu", "return F.elu(x, alpha=1.0)"),
        elementwise("hardtanh", "return F.hardtanh(x, min_val=-1.0, max_val=1.0)"),
        elementwise("softsign", "return x / (1 + torch.abs(x))"),
        elementwise("relu", "return torch.relu(x)"),
        Case("scalar_multiply", "A: torch.Tensor, s: float", "return A * s", lambda r: [r(rows, cols), 3.5]),
        Case("softmax", "x", "return torch.softmax(x, dim=self.dim)", lambda r: [r(d(4096), d(32768), signed=True)], (1,), **DIM),
        Case("log_softmax", "x", "return torch.log_softmax(x, dim=self.dim)", lambda r: [r(d(4096), d(32768), signed=True)], (1,), **DIM),
        Case("sum_dim1", "x", "return torch.sum(x, dim=self.dim, keepdim=True)", lambda r: [r(d(64), d(4096), d(1024))], (1,), **DIM),
        Case("mean_dim1", "x", "return torch.mean(x, dim=self.dim)", lambda r: [r(d(64), d(4096), d(1024))], (1,), **DIM),
        Case("max_dim1", "x", "return torch.max(x, dim=self.dim)[0]", lambda r: [r(d(64), d(4096), d(1024))], (1,), **DIM),
        Case("min_last_dim", "x", "return torch.min(x, dim=self.dim)[0]", lambda r: [r(d(64), d(4096), d(1024))], (2,), **DIM),
        Case(
            "rms_norm",
            "x",
            "rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)\nreturn x / rms",
            lambda r: [r(d(32), 64, d(256), d(256))],
            (64,),
            ", features: int, eps: float = 1e-5",
            "self.features = features\nself.eps = eps",
        ),
        Case("l1_norm", "x", "return x / torch.mean(torch.abs(x), dim=1, keepdim=True)", lambda r: [r(d(8192), d(16384))]),
        Case("l2_norm", "x", "return x / torch.norm(x, p=2, dim=1, keepdim=True)", lambda r: [r(d(8192), d(16384))]),
        Case("frobenius", "x", "norm = torch.norm(x, p='fro')\nreturn x / norm", lambda r: [r(d(16), 64, d(256), d(256))]),
        Case(
            "layer_norm",
            "x",
            "return self.ln(x)",
            lambda r: [r(d(16), 64, d(256), d(256))],
            ((64, d(256), d(256)),),
            ", shape: tuple",
            "self.ln = nn.LayerNorm(normalized_shape=shape)",
        ),
        pair("mse", "return torch.mean((predictions - targets) ** 2)", lambda r: [r(d(8192), d(16384)), r(d(8192), d(16384))]),
        pair("huber", "return F.smooth_l1_loss(predictions, targets)", lambda r: [r(d(8192), d(16384)) * 2, r(d(8192), d(16384))]),
        pair(
            "hinge",
            "return torch.mean(torch.clamp(1 - predictions * targets, min=0))",
            lambda r: [r(d(16384), d(16384), signed=True), (r(d(16384)) > 0.5).float() * 2 - 1],
        ),
        pair(
            "kl_div",
            "return F.kl_div(torch.log(predictions), targets, reduction='batchmean')",
            lambda r: [r(d(8192), d(8192)).softmax(-1), r(d(8192), d(8192)).softmax(-1)],
        ),
        Case(
            "cross_entropy",
            "predictions, targets",
            "return self.loss(predictions, targets)",
            lambda r: [r(d(32768), d(4096), signed=True) * 10, class_targets(r, d(32768), d(4096))],
            init_body="self.loss = nn.CrossEntropyLoss()",
        ),
        Case(
            "triplet_margin",
            "anchor, positive, negative",
            "return self.loss_fn(anchor, positive, negative)",
            lambda r: [r(d(32768), d(8192)) * 0.5, r(d(32768), d(8192)), r(d(32768), d(8192))],
            (1.0,),
            ", margin: float = 1.0",
            "self.loss_fn = nn.TripletMarginLoss(margin=margin)",
        ),
        Case("cumsum", "x", "return torch.cumsum(x, dim=self.dim)", lambda r: [r(d(8192), d(16384))], (1,), **DIM),
        Case(
            "cumsum_reverse",
            "x",
            "return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)",
            lambda r: [r(d(8192), d(16384))],
            (1,),
            **DIM,
        ),
        Case(
            "cumsum_exclusive",
            "x",
            "e = torch.cat((torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim)), x), dim=self.dim)"
            ".narrow(self.dim, 0, x.size(dim))\nreturn torch.cumsum(e, dim=self.dim)",
            lambda r: [r(d(8192), d(16384))],
            (1,),
            **DIM,
        ),
        Case("cumprod", "x", "return torch.cumprod(x, dim=self.dim)", lambda r: [r(d(8192), d(16384)) * 0.2 + 0.9], (1,), **DIM),
        Case(
            "max_pool2d",
            "x",
            "return self.pool(x)",
            lambda r: [r(d(32), 64, d(512), d(512), signed=True)],
            init_body="self.pool = nn.MaxPool2d(kernel_size=4, stride=1, padding=1)",
        ),
        Case(
            "max_pool3d",
            "x",
            "return self.pool(x)",
            lambda r: [r(d(16), d(32), max(16, d(128)), max(16, d(128)), max(16, d(128)), signed=True)],
            init_body="self.pool = nn.MaxPool3d(3, stride=2, padding=1, dilation=3)",
        ),
        Case(
            "avg_pool1d",
            "x",
            "return self.pool(x)",
            lambda r: [r(d(64), 128, d(65536), signed=True)],
            init_body="self.pool = nn.AvgPool1d(kernel_size=8, stride=1, padding=4)",
        ),
        Case(
            "cumsum_masked",
            "x, mask",
            "return torch.cumsum(x * mask, dim=self.dim)",
            lambda r: [r(d(8192), d(16384)), r(d(8192), d(16384)) > 0.5],
            (1,),
            **DIM,
        ),
        matrices("diag_matmul", "return torch.diag(A) @ B", lambda r: [r(n), r(n, n)]),
        matrices("matmul_fp32", "return torch.matmul(A, B)", lambda r: [r(n, n), r(n, n)]),
        matrices(
            "matmul_bf16",
            "return torch.matmul(A, B)",
            lambda r: [r(n, n).bfloat16(), r(n, n).bfloat16()],
            tolerance=1e-2,
        ),
        matrices("matmul_transposed", "return torch.matmul(A.T, B.T)", lambda r: [r(n, n), r(n, n)]),
        matrices("bmm", "return torch.bmm(A, B)", lambda r: [r(d(32), d(1024), d(1024)), r(d(32), d(1024), d(1024))]),
        matrices(
            "triu_matmul",
            "return torch.triu(torch.matmul(A, B))",
            lambda r: [torch.triu(r(n, n)), torch.triu(r(n, n))],
        ),
        matrices(
            "tril_matmul",
            "return torch.tril(torch.matmul(A, B))",
            lambda r: [torch.tril(r(n, n)), torch.tril(r(n, n))],
        ),
        # convolutions (Level-1 problems' shapes): every template of each is built and timed
        conv("conv2d_3x3", "nn.Conv2d(64, 128, 3)", lambda r: [r(d(8), 64, d(512), d(1024))]),  # 55
        conv(
            "conv2d_dilated",
            "nn.Conv2d(32, 64, (5, 9), padding=(2, 4), dilation=(2, 3), bias=False)",
            lambda r: [r(d(8), 32, max(48, d(512)), max(48, d(512)))],
        ),  # 80
        conv("conv2d_11x11_s4", "nn.Conv2d(3, 96, 11, stride=4, padding=2)", lambda r: [r(d(256), 3, side, side)]),  # 50
        conv("conv2d_pointwise", "nn.Conv2d(64, 128, 1, bias=False)", lambda r: [r(d(16), 64, d(1024), d(1024))]),  # 87
        conv("conv1d_s3_d4", "nn.Conv1d(64, 128, 3, stride=3, dilation=4)", lambda r: [r(d(64), 64, d(524280))]),  # 76
        conv("conv2d_depthwise", "nn.Conv2d(64, 64, 3, groups=64, bias=False)", lambda r: [r(d(16), 64, d(512), d(512))]),  # 82
        conv("conv3d", "nn.Conv3d(3, 64, 3)", lambda r: [r(d(16), 3, max(8, d(64)), max(8, d(64)), max(8, d(64)))]),  # 54
        conv("conv_transposed2d", "nn.ConvTranspose2d(64, 64, 3)", lambda r: [r(d(8), 64, d(1024), d(1024))]),  # 57
    ]  # fmt: skip


def class_targets(r: Callable[..., torch.Tensor], rows: int, classes: int) -> torch.Tensor:
    """Class indices on the device, about a tenth of them -100 (cross_entropy's ignore_index)."""
    targets = (r(rows) * classes).long().clamp(max=classes - 1)
    return torch.where(r(rows) < 0.1, -100, targets)


def children(source: str, kind: str) -> dict[str, str]:
    """The children the ``kind`` mutation makes of ``source``, by label: ``kind``, or for a
    pattern with several templates (a convolution) ``template:<name>`` for each; empty when it
    does not apply."""
    mutation = next(m for m in kernel_mutations() if m.kind == kind)
    parent = ProgramView(id="parent", source=source, score=1.0)
    prompt = Prompt("bench", "kernelbench", 0, 0, parent, (), {}, context="", text="")
    found: dict[str, str] = {}
    for seed in range(40 if kind == "template" else 1):  # a template draw per seed
        answer = mutation.propose(prompt, np.random.default_rng(seed))
        if answer is None:
            return found
        applied = apply_answer(source, answer)
        if not isinstance(applied, Applied):
            raise RuntimeError(f"the {kind} answer did not apply: {applied}")
        marker = next((ln for ln in applied.source.split("\n") if ln.startswith(MARKER)), "")
        name = marker.split()[2] if marker else kind
        found.setdefault(name, applied.source)
    if len(found) == 1:
        return {kind: next(iter(found.values()))}
    return {f"{kind}:{name}": built for name, built in found.items()}


def load(source: str, directory: Path, name: str) -> Any:
    path = directory / f"{name}.py"  # triton.jit reads a kernel's source from its file
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def milliseconds(fn: Callable[[], Any], device: str, reps: int) -> float:
    """Median wall time of ``fn`` in ms (CUDA events on a GPU), after three warm-up calls."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - began) * 1e3)
    return statistics.median(samples)


Outcome = tuple[bool, str, float | None]  # correct, the line to print, eager / template time


def run_case(case: Case, kind: str, built: str, device: str, reps: int, directory: Path) -> Outcome:
    source = case.source()
    generator = torch.Generator(device="cpu").manual_seed(0)

    def tensor(*shape: int, signed: bool = False) -> torch.Tensor:
        values = torch.rand(*shape, generator=generator)
        return (values * 2 - 1 if signed else values).to(device)

    inputs = case.inputs(tensor)
    reference = load(source, directory, f"reference_{case.name}").ModelNew(*case.init).to(device)
    module = f"{kind.replace(':', '_')}_{case.name}"
    model = load(built, directory, module).ModelNew(*case.init).to(device)
    # the child's module may switch cuDNN's algorithm search on (the cuDNN template): its own
    # calls run with it, eager's without, as in the judge's separate processes
    search = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    if case.name == "layer_norm":  # affine weights away from 1 and 0, shared by both
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.copy_(torch.rand_like(parameter))
        reference.load_state_dict(model.state_dict())
    else:  # one set of weights (a convolution's), in each model's own layout
        model.load_state_dict(reference.state_dict())
    with torch.no_grad():
        want = reference(*inputs)
        first = next(i for i in inputs if isinstance(i, torch.Tensor))
        shape = f"{tuple(first.shape)} {str(first.dtype).removeprefix('torch.')}"
        label = f"{case.name:18s} {kind:24s}  {shape:26s}"
        torch.backends.cudnn.benchmark = search
        got = model(*inputs)  # first call: cuDNN's search, if on, happens here
        if got.shape != want.shape or got.dtype != want.dtype:
            return (
                False,
                f"FAIL  {label}  output {tuple(got.shape)} {got.dtype}, reference {tuple(want.shape)} {want.dtype}",
                None,
            )
        error = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
        tol = case.tolerance
        if not torch.allclose(got.float(), want.float(), atol=tol, rtol=tol, equal_nan=True):
            return False, f"FAIL  {label}  max|err| {error:.1e} over atol=rtol={tol:g}", None
        torch.backends.cudnn.benchmark = False
        eager = milliseconds(lambda: reference(*inputs), device, reps)
        torch.backends.cudnn.benchmark = search
        new = milliseconds(lambda: model(*inputs), device, reps)
        torch.backends.cudnn.benchmark = False
    line = f"PASS  {label}  max|err| {error:.1e}  eager {eager:8.3f} ms  new {new:8.3f} ms  "
    return True, line + f"{eager / new:5.2f}x", eager / new


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-k", nargs="*", default=[], help="run only cases whose name has one of these"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="Triton's interpreter on the CPU, tiny shapes"
    )
    parser.add_argument("--reps", type=int, default=20, help="timed calls per measurement")
    args = parser.parse_args()
    fp32_in_fp32()  # as the judge computes: no TF32 in cuDNN's convolutions (kb_precision.py)
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run on a GPU machine, or pass --cpu for the interpreter check")
        return 2
    scale = 32 if args.cpu else 1
    reps = 2 if args.cpu else args.reps
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU (Triton interpreter)"
    print(f"# KernelBench templates on {where}; torch {torch.__version__}")
    print("# status case kind shape dtype max|err| eager-time template-time eager/template")
    selected = [c for c in cases(scale) if not args.k or any(k in c.name for k in args.k)]
    failures, speedups = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for case in selected:
            if args.cpu and "bf16" in case.name:
                # the interpreter multiplies bf16 bit patterns in tl.dot (triton-lang/triton#11584)
                print(f"SKIP  {case.name:18s} bf16 tl.dot is wrong in Triton's interpreter")
                continue
            built = {**children(case.source(), "template"), **children(case.source(), "rewrite")}
            for kind, source in built.items():
                try:
                    ok, line, speedup = run_case(case, kind, source, device, reps, Path(tmp))
                except Exception as error:  # noqa: BLE001 (a broken child is a result, not a stop)
                    ok, speedup = False, None
                    line = f"FAIL  {case.name:18s} {kind:24s}  raised {type(error).__name__}: "
                    line += str(error)[:300]
                if line:
                    print(line, flush=True)
                if not ok:
                    failures.append(f"{case.name} ({kind})")
                if speedup is not None:
                    speedups.append(speedup)
                if device == "cuda":
                    torch.cuda.empty_cache()
    mean = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else float("nan")
    print(
        f"# {len(speedups)} children correct, {len(failures)} wrong or failed; "
        f"geometric mean of eager/new time {mean:.2f}x"
    )
    if failures:
        print("# WRONG OR FAILED: " + ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
