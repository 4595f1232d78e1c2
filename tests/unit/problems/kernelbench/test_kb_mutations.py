"""KernelBench mutations: each pattern's template and rewrite applies, passes the rules and
computes what the parent computes.

Rewrites run on the CPU with torch. Templates run in Triton's interpreter (TRITON_INTERPRET=1) on
CPU tensors, and their kernels are compiled for sm_90 with the launch signatures the interpreter
saw (Triton compiles without a GPU), so a kernel that would not build on an H100/H200 fails here.
"""

# ruff: noqa: E501  (the cases are one-line programs)
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from codevolve.core.diff import Applied
from codevolve.core.kernel_rules import check_model_new
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.kernelbench.mutations import kernel_mutations
from codevolve.problems.kernelbench.template_text import MARKER
from codevolve.prompt_sampler.search_replace import apply_answer

torch = pytest.importorskip("torch")

HEAD = """\"\"\"KernelBench problem {name}: ModelNew must compute what the reference Model computes.\"\"\"

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
dim = 1

# EVOLVE-BLOCK-START
class ModelNew(nn.Module):
    def __init__(self{init_args}):
        super().__init__()
{init_body}
    def forward(self, {forward_args}):
        \"\"\"The reference's computation.\"\"\"
{body}
# EVOLVE-BLOCK-END
"""


def program(name: str, forward_args: str, body: str, init_args: str = "", init: str = "") -> str:
    return HEAD.format(
        name=name,
        init_args=init_args,
        init_body="".join(f"        {line}\n" for line in init.split("\n") if line),
        forward_args=forward_args,
        body="\n".join(f"        {line}" for line in body.split("\n")),
    )


def rand(*shape: int) -> Any:
    return torch.rand(*shape)


def randn(*shape: int) -> Any:
    return torch.randn(*shape)


def class_targets(rows: int, classes: int, ignore_index: int = -100) -> Any:
    """Class indices, about a quarter of them ``ignore_index`` (rows cross-entropy must skip)."""
    targets = torch.randint(0, classes, (rows,))
    return torch.where(torch.rand(rows) < 0.25, ignore_index, targets)


DIM = (", dim: int = 1", "self.dim = dim")
# name: (program, init inputs, inputs); sizes small enough for Triton's interpreter
CASES: dict[str, tuple[str, tuple[Any, ...], Callable[[], list[Any]]]] = {
    "swish": (program("swish", "x: torch.Tensor", "return x * torch.sigmoid(x)"), (), lambda: [randn(5, 300)]),
    "leaky_relu": (
        program(
            "leaky_relu",
            "x",
            "return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)",
            ", negative_slope: float = 0.01",
            "self.negative_slope = negative_slope",
        ),
        (0.05,),
        lambda: [randn(5, 300)],
    ),
    "gelu_tanh": (
        program(
            "gelu_tanh",
            "x",
            "return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))",
        ),
        (),
        lambda: [randn(5, 300) * 3],
    ),
    "selu": (program("selu", "x", "return torch.selu(x)"), (), lambda: [randn(5, 300)]),
    "softplus": (program("softplus", "x", "return F.softplus(x)"), (), lambda: [randn(5, 300) * 10]),
    "hardsigmoid": (program("hardsigmoid", "x", "return F.hardsigmoid(x)"), (), lambda: [randn(5, 300) * 4]),
    "elu": (
        program("elu", "x", "return F.elu(x, alpha=self.alpha)", ", alpha: float = 1.0", "self.alpha = alpha"),
        (0.7,),
        lambda: [randn(5, 300)],
    ),
    "hardtanh": (program("hardtanh", "x", "return F.hardtanh(x, min_val=-1., max_val=1.)"), (), lambda: [randn(5, 300) * 2]),
    "softsign": (program("softsign", "x", "return x / (1 + torch.abs(x))"), (), lambda: [randn(5, 300)]),
    "scalar_multiply": (program("scalar_multiply", "A: torch.Tensor, s: float", "return A * s"), (), lambda: [randn(5, 300), 3.5]),
    "softmax": (program("softmax", "x", "return torch.softmax(x, dim=self.dim)", *DIM), (1,), lambda: [randn(6, 5000)]),
    "log_softmax": (program("log_softmax", "x", "return torch.log_softmax(x, dim=self.dim)", *DIM), (1,), lambda: [randn(6, 5000)]),
    "sum_keepdim": (
        program("sum_keepdim", "x", "return torch.sum(x, dim=self.dim, keepdim=True)", *DIM),
        (1,),
        lambda: [rand(3, 70, 45)],
    ),
    "mean": (program("mean", "x", "return torch.mean(x, dim=self.dim)", *DIM), (1,), lambda: [rand(3, 70, 45)]),
    "max": (program("max", "x", "return torch.max(x, dim=self.dim)[0]", *DIM), (1,), lambda: [randn(3, 70, 45)]),
    "min_last": (program("min_last", "x", "return torch.min(x, dim=self.dim)[0]", *DIM), (2,), lambda: [randn(3, 70, 45)]),
    "rms_norm": (
        program(
            "rms_norm",
            "x",
            "rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)\nreturn x / rms",
            ", num_features: int, eps: float = 1e-5",
            "self.num_features = num_features\nself.eps = eps",
        ),
        (16,),
        lambda: [rand(3, 16, 9, 7)],
    ),
    "l1_norm": (program("l1_norm", "x", "return x / torch.mean(torch.abs(x), dim=1, keepdim=True)"), (), lambda: [rand(7, 5000)]),
    "l2_norm": (program("l2_norm", "x", "return x / torch.norm(x, p=2, dim=1, keepdim=True)"), (), lambda: [rand(7, 5000)]),
    "frobenius": (program("frobenius", "x", "norm = torch.norm(x, p='fro')\nreturn x / norm"), (), lambda: [rand(3, 4, 50, 60)]),
    "layer_norm": (
        program(
            "layer_norm",
            "x",
            "return self.ln(x)",
            ", normalized_shape: tuple",
            "self.ln = nn.LayerNorm(normalized_shape=normalized_shape)",
        ),
        ((4, 20, 30),),
        lambda: [rand(3, 4, 20, 30) + 5],
    ),
    "mse": (
        program("mse", "predictions, targets", "return torch.mean((predictions - targets) ** 2)"),
        (),
        lambda: [randn(40, 300), randn(40, 300)],
    ),
    "hinge": (
        program("hinge", "predictions, targets", "return torch.mean(torch.clamp(1 - predictions * targets, min=0))"),
        (),
        lambda: [randn(300, 300), torch.randint(0, 2, (300,)).float() * 2 - 1],
    ),
    "huber": (
        program("huber", "predictions, targets", "return torch.nn.functional.smooth_l1_loss(predictions, targets)"),
        (),
        lambda: [randn(40, 300) * 2, randn(40, 300)],
    ),
    "kl_div": (
        program(
            "kl_div",
            "predictions, targets",
            "return torch.nn.functional.kl_div(torch.log(predictions), targets, reduction='batchmean')",
        ),
        (),
        lambda: [rand(64, 300).softmax(-1), rand(64, 300).softmax(-1)],
    ),
    "cumsum": (program("cumsum", "x", "return torch.cumsum(x, dim=self.dim)", *DIM), (1,), lambda: [rand(5, 5000)]),
    "cumsum_reverse": (
        program("cumsum_reverse", "x", "return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)", *DIM),
        (1,),
        lambda: [rand(5, 5000)],
    ),
    "cumsum_exclusive": (
        program(
            "cumsum_exclusive",
            "x",
            "exclusive_cumsum = torch.cat((torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim)), x), "
            "dim=self.dim).narrow(self.dim, 0, x.size(dim))\nreturn torch.cumsum(exclusive_cumsum, dim=self.dim)",
            *DIM,
        ),
        (1,),
        lambda: [rand(5, 5000)],
    ),
    "cumsum_masked": (
        program("cumsum_masked", "x, mask", "return torch.cumsum(x * mask, dim=self.dim)", *DIM),
        (1,),
        lambda: [rand(5, 5000), torch.randint(0, 2, (5, 5000)).bool()],
    ),
    # pooling: settings as the KernelBench problems write them (padding, dilation, stride)
    "max_pool1d": (
        program("max_pool1d", "x", "return self.maxpool(x)", "", "self.maxpool = nn.MaxPool1d(kernel_size=8, stride=1, padding=4, dilation=3)"),
        (),
        lambda: [randn(2, 3, 300)],
    ),
    "max_pool2d": (
        program("max_pool2d", "x", "return self.pool(x)", "", "self.pool = nn.MaxPool2d(kernel_size=4, stride=1, padding=1)"),
        (),
        lambda: [randn(2, 3, 20, 23)],
    ),
    "max_pool3d": (
        program("max_pool3d", "x", "return self.pool(x)", "", "self.pool = nn.MaxPool3d(3, stride=2, padding=1, dilation=3)"),
        (),
        lambda: [randn(2, 2, 13, 14, 15)],
    ),
    "avg_pool2d": (
        program("avg_pool2d", "x", "return self.pool(x)", "", "self.pool = nn.AvgPool2d(kernel_size=5, padding=2)"),
        (),
        lambda: [randn(2, 3, 21, 26)],
    ),
    "avg_pool1d": (
        program("avg_pool1d", "x", "return self.avg_pool(x)", "", "self.avg_pool = nn.AvgPool1d(kernel_size=8, stride=1, padding=4)"),
        (),
        lambda: [randn(2, 3, 300)],
    ),
    "avg_pool3d": (
        program("avg_pool3d", "x", "return self.pool(x)", "", "self.pool = nn.AvgPool3d(3, stride=2, padding=1)"),
        (),
        lambda: [randn(2, 2, 9, 10, 11)],
    ),
    # KernelBench's own exclusive cumsum (92): [:-1] drops the last row, not the last column
    "cumsum_shifted_rows": (
        program(
            "cumsum_shifted_rows",
            "x",
            "e = torch.cat((torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim)), x), dim=self.dim)[:-1]\n"
            "return torch.cumsum(e, dim=self.dim)",
            *DIM,
        ),
        (1,),
        lambda: [rand(6, 5000)],
    ),
    # factors near 1, so the running product over three blocks of the row stays away from zero
    "cumprod": (program("cumprod", "x", "return torch.cumprod(x, dim=self.dim)", *DIM), (1,), lambda: [rand(5, 5000) * 0.2 + 0.9]),
    "cumprod_reverse": (
        program("cumprod_reverse", "x", "return torch.cumprod(x.flip(self.dim), dim=self.dim).flip(self.dim)", *DIM),
        (1,),
        lambda: [rand(5, 5000) * 0.2 + 0.9],
    ),
    "diag_matmul": (program("diag_matmul", "A, B", "return torch.diag(A) @ B"), (), lambda: [rand(70), rand(70, 50)]),
    "matmul": (program("matmul", "A, B", "return torch.matmul(A, B)"), (), lambda: [rand(70, 90), rand(90, 50)]),
    "matmul_transposed": (
        program("matmul_transposed", "A, B", "return torch.matmul(A.T, B.T)"),
        (),
        lambda: [rand(90, 70), rand(50, 90)],
    ),
    "bmm": (program("bmm", "A, B", "return torch.bmm(A, B)"), (), lambda: [rand(3, 70, 90), rand(3, 90, 50)]),
    # few tiles over a long K: the K loop is split and added atomically
    "matmul_large_k": (program("matmul_large_k", "A, B", "return torch.matmul(A, B)"), (), lambda: [rand(20, 3000), rand(3000, 18)]),
    "matvec": (program("matvec", "A, B", "return torch.matmul(A, B)"), (), lambda: [rand(40, 600), rand(600, 1)]),
    "triu_matmul": (
        program("triu_matmul", "A, B", "return torch.triu(torch.matmul(A, B))"),
        (),
        lambda: [torch.triu(rand(130, 130)), torch.triu(rand(130, 130))],
    ),
    "tril_matmul": (
        program("tril_matmul", "A, B", "return torch.tril(torch.matmul(A, B))"),
        (),
        lambda: [torch.tril(rand(130, 130)), torch.tril(rand(130, 130))],
    ),
    "cross_entropy": (
        program("cross_entropy", "predictions, targets", "return self.loss(predictions, targets)", "", "self.loss = nn.CrossEntropyLoss()"),
        (),
        lambda: [randn(6, 5000), class_targets(6, 5000)],
    ),
    "cross_entropy_functional": (
        program("cross_entropy_functional", "predictions, targets", "return torch.nn.functional.cross_entropy(predictions, targets)"),
        (),
        lambda: [rand(37, 300), class_targets(37, 300)],
    ),
    "cross_entropy_sum": (
        program("cross_entropy_sum", "predictions, targets", "return F.cross_entropy(predictions, targets, ignore_index=3, reduction='sum')"),
        (),
        lambda: [randn(37, 20), class_targets(37, 20, ignore_index=3)],
    ),
    "triplet_margin": (
        program(
            "triplet_margin",
            "anchor, positive, negative",
            "return self.loss_fn(anchor, positive, negative)",
            ", margin=1.0",
            "self.loss_fn = torch.nn.TripletMarginLoss(margin=margin)",
        ),
        (0.7,),
        lambda: [rand(5, 5000) * 0.3, rand(5, 5000), rand(5, 5000)],
    ),
    "triplet_margin_functional": (
        program("triplet_margin_functional", "anchor, positive, negative", "return F.triplet_margin_loss(anchor, positive, negative, margin=2.5)"),
        (),
        lambda: [randn(37, 300), randn(37, 300), randn(37, 300)],
    ),
    "triplet_margin_sum": (
        program(
            "triplet_margin_sum",
            "anchor, positive, negative",
            "return self.triplet(anchor, positive, negative)",
            "",
            "self.triplet = nn.TripletMarginLoss(5.0, eps=1e-3, reduction='sum')",
        ),
        (),
        lambda: [randn(300), randn(300), randn(300)],
    ),
}  # fmt: skip
TEMPLATED = [name for name in CASES if name != "diag_matmul"]
REWRITTEN = ["swish", "gelu_tanh", "max", "min_last", "cumsum_exclusive", "diag_matmul"]
CONVOLUTION = program(  # a convolution of a computed expression: no pattern (test_kb_convs.py)
    "conv", "x", "return self.conv(x * 2)", ", c: int = 3", "self.conv = nn.Conv3d(c, c, 3)"
)
MUTATIONS = {m.kind: m for m in kernel_mutations()}


def prompt(source: str) -> Prompt:
    parent = ProgramView(id="parent", source=source, score=1.0)
    return Prompt("job", "kernelbench", 0, 0, parent, (), {}, context="", text="")


def child(kind: str, source: str, seed: int = 0) -> str:
    answer = MUTATIONS[kind].propose(prompt(source), np.random.default_rng(seed))
    assert answer is not None, f"{kind} did not apply"
    applied = apply_answer(source, answer)
    assert isinstance(applied, Applied), applied
    assert "class ModelNew(nn.Module):" in applied.source
    assert check_model_new(applied.source) == ""
    return applied.source


def load(source: str, tmp_path: Path, name: str) -> ModuleType:
    """Import ``source`` from a file (triton.jit reads its kernels' source from one)."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compare(name: str, candidate: str, tmp_path: Path) -> None:
    """The candidate's ModelNew against the parent's on the case's inputs, within 1e-4."""
    parent, init, make = CASES[name]
    torch.manual_seed(0)
    inputs = make()
    reference = load(parent, tmp_path, f"reference_{name}").ModelNew(*init)
    model = load(candidate, tmp_path, f"candidate_{name}").ModelNew(*init)
    if name == "layer_norm":  # weights away from 1 and 0, shared by both
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.rand_like(p))
        reference.load_state_dict(model.state_dict())
    snapshot = [i.clone() if isinstance(i, torch.Tensor) else i for i in inputs]
    want = reference(*inputs)
    got = model(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for before, after in zip(snapshot, inputs, strict=True):
        if isinstance(before, torch.Tensor):
            assert torch.equal(before, after), "the candidate wrote into its inputs"


@pytest.mark.parametrize("name", TEMPLATED)
def test_template_applies_and_keeps_the_rules(name: str) -> None:
    source = child("template", CASES[name][0])
    assert MARKER in source
    assert "import triton.language as tl" in source
    assert "def forward_torch(" in source  # the parent's forward, kept as the fallback


@pytest.mark.parametrize("name", REWRITTEN)
def test_rewrite_computes_what_the_parent_computes(name: str, tmp_path: Path) -> None:
    source = child("rewrite", CASES[name][0])
    assert "triton" not in source
    compare(name, source, tmp_path)


def test_rewrites_name_the_fused_builtins() -> None:
    assert "silu(x)" in child("rewrite", CASES["swish"][0])
    assert "approximate='tanh'" in child("rewrite", CASES["gelu_tanh"][0])
    assert "torch.amax(x" in child("rewrite", CASES["max"][0])
    assert ".unsqueeze(1) * B" in child("rewrite", CASES["diag_matmul"][0])


SCALE_PARAMETER = program(
    "scale", "x", "return x * self.scale", "", "self.scale = nn.Parameter(torch.ones(4, 1))"
)


SUM_OVER_TWO_DIMS = program("sum_dims", "x", "return torch.sum(x, dim=(1, 2))")


def test_nothing_applies_to_an_unrecognised_forward() -> None:
    for kind in ("template", "fuse", "epilogue", "rewrite", "tune"):
        assert MUTATIONS[kind].propose(prompt(CONVOLUTION), np.random.default_rng(0)) is None
    # a reduction over several dimensions is not a row reduction
    assert (
        MUTATIONS["template"].propose(prompt(SUM_OVER_TWO_DIMS), np.random.default_rng(0)) is None
    )
    # a Parameter is a tensor, not a float the kernel could take
    assert MUTATIONS["template"].propose(prompt(SCALE_PARAMETER), np.random.default_rng(0)) is None
    assert (
        MUTATIONS["rewrite"].propose(prompt(CASES["softmax"][0]), np.random.default_rng(0)) is None
    )


def test_tune_moves_one_listed_constant_of_a_template_only() -> None:
    plain = CASES["matmul"][0]
    assert MUTATIONS["tune"].propose(prompt(plain), np.random.default_rng(0)) is None
    templated = child("template", plain)
    assert MUTATIONS["template"].propose(prompt(templated), np.random.default_rng(0)) is None
    tunable = re.compile(r"^(\w+) = (\d+)  # tune: ([\d|]+)$", re.MULTILINE)
    before = {m[1]: (int(m[2]), m[3]) for m in tunable.finditer(templated)}
    moved = set()
    for seed in range(40):
        after = {m[1]: (int(m[2]), m[3]) for m in tunable.finditer(child("tune", templated, seed))}
        changed = [k for k in before if after[k][0] != before[k][0]]
        assert len(changed) == 1
        value, listed = after[changed[0]]
        assert str(value) in listed.split("|")
        moved.add(changed[0])
    assert {"BLOCK_M", "BLOCK_K", "NUM_WARPS", "NUM_STAGES"} <= moved


def test_mutations_are_deterministic_given_the_generator() -> None:
    templated = child("template", CASES["softmax"][0])
    runs = [
        MUTATIONS["tune"].propose(prompt(templated), np.random.default_rng(7)) for _ in range(2)
    ]
    assert runs[0] == runs[1]


# --- the templates' kernels: run in Triton's interpreter, compiled for sm_90 --------------------

# Triton's interpreter must be switched on before triton is first imported (its standard library
# is jitted at import), so the kernels run in a child process, all cases in one.
DRIVER = r"""
import importlib.util, inspect, json, os, sys, traceback
os.environ["TRITON_INTERPRET"] = "1"
import torch
from triton.runtime.interpreter import InterpretedFunction

launches = []
original = InterpretedFunction.run


def run(self, *args, grid, warmup, **kwargs):
    launches.append((self.fn, args, dict(kwargs)))
    return original(self, *args, grid=grid, warmup=warmup, **kwargs)


InterpretedFunction.run = run
TYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "bool": "i1", "int64": "i64"}


def launch_signature(fn, args, kwargs):
    # what triton.compile needs to build this launch: argument types, constexprs, options
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
    parameters = inspect.signature(fn).parameters
    signature, constexprs = {}, {}
    for name, value in inspect.signature(fn).bind(*args, **kwargs).arguments.items():
        if "constexpr" in str(parameters[name].annotation):
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + TYPES[str(value.dtype).removeprefix("torch.")]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            signature[name] = "i64" if abs(int(value)) >= 2**31 else "i32"
    return {"kernel": fn.__name__, "signature": signature, "constexprs": constexprs,
            "options": options}


for case in json.load(open(sys.argv[1])):
    launches.clear()
    try:
        spec = importlib.util.spec_from_file_location(case["name"], case["candidate"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        init, inputs, state = torch.load(case["data"])
        model = module.ModelNew(*init)
        if state:
            model.load_state_dict(state)
        result = model(*inputs)
        signatures = [launch_signature(fn, args, kwargs) for fn, args, kwargs in launches]
        torch.save({"result": result, "inputs": inputs, "launches": signatures}, case["out"])
    except Exception:
        torch.save({"error": traceback.format_exc()}, case["out"])
"""
# Compiles the launches the interpreter saw for sm_90 (Triton needs no GPU for that), in a
# process where the interpreter is off.
COMPILER = r"""
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

compiled = {}
for case in json.load(open(sys.argv[1])):
    spec = importlib.util.spec_from_file_location(case["name"], case["candidate"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for launch in case["launches"]:
        source = ASTSource(fn=getattr(module, launch["kernel"]), signature=launch["signature"],
                           constexprs=launch["constexprs"])
        binary = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=launch["options"])
        assert binary.asm["cubin"], launch
        compiled.setdefault(case["name"], []).append(launch["kernel"])
print(json.dumps(compiled))
"""


def _child_process(directory: Path, script: str, name: str, manifest: Path) -> str:
    path = directory / name
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, str(path), str(manifest)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


Draw = tuple[str, int, str]  # (case, seed, distribution)
DISTRIBUTIONS = ("kernelbench", "signed", "wide")


def draw(name: str, seed: int, distribution: str) -> list[Any]:
    """The case's inputs under ``seed``, as the judge varies them: ``signed`` puts a random sign
    on every float element, ``wide`` then multiplies by 100; integer inputs (class indices) are
    kept."""
    torch.manual_seed(seed)
    inputs = CASES[name][2]()
    if distribution == "kernelbench":
        return inputs
    scale = 100.0 if distribution == "wide" else 1.0
    return [
        i * torch.where(torch.rand(i.shape) < 0.5, -scale, scale)
        if isinstance(i, torch.Tensor) and i.is_floating_point()
        else i
        for i in inputs
    ]


def run_kernels(
    directory: Path, *, compile_kernels: bool, draws: dict[str, Draw] | None = None
) -> dict[str, dict[str, Any]]:
    """Each draw's candidate (the case's template child) run by the interpreter: its result,
    inputs afterwards, launch count (and kernels compiled for sm_90), with the reference's
    result beside them. By default one draw per templated case, seed 0, its own inputs."""
    pytest.importorskip("triton")
    if draws is None:
        draws = {name: (name, 0, "kernelbench") for name in TEMPLATED}
    cases, references, candidates = [], {}, {}
    for key, (name, seed, distribution) in draws.items():
        parent, init, _ = CASES[name]
        inputs = draw(name, seed, distribution)
        reference = load(parent, directory, f"reference_{name}").ModelNew(*init)
        state = {}
        if name == "layer_norm":  # weights away from 1 and 0, shared by both
            with torch.no_grad():
                for p in reference.parameters():
                    p.copy_(torch.rand_like(p))
            state = reference.state_dict()
        data = directory / f"{key}.pt"
        torch.save(
            (init, [i.clone() if isinstance(i, torch.Tensor) else i for i in inputs], state), data
        )
        references[key] = (reference(*inputs), inputs)
        if name not in candidates:
            candidates[name] = directory / f"candidate_{name}.py"
            candidates[name].write_text(child("template", parent))
        cases.append(
            {
                "name": key,
                "candidate": str(candidates[name]),
                "data": str(data),
                "out": str(directory / f"{key}.out"),
            }
        )
    manifest = directory / "cases.json"
    manifest.write_text(json.dumps(cases))
    _child_process(directory, DRIVER, "driver.py", manifest)
    results = {}
    for case in cases:
        out = torch.load(case["out"])
        out["want"], out["original_inputs"] = references[case["name"]]
        results[case["name"]] = out
        case["launches"] = out.get("launches", [])
    if compile_kernels:
        manifest.write_text(json.dumps(cases))
        compiled = json.loads(_child_process(directory, COMPILER, "compiler.py", manifest))
        for name, kernels in compiled.items():
            results[name]["compiled"] = kernels
    return results


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run_kernels(tmp_path_factory.mktemp("interpreted"), compile_kernels=False)


def check_run(run: dict[str, Any]) -> None:
    assert "error" not in run, run.get("error")
    got, want = run["result"], run["want"]
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert run["launches"], "the template fell back to torch instead of launching its kernels"
    for before, after in zip(run["original_inputs"], run["inputs"], strict=True):
        if isinstance(before, torch.Tensor):
            assert torch.equal(before, after), "the candidate wrote into its inputs"


@pytest.mark.slow
@pytest.mark.parametrize("name", TEMPLATED)
def test_template_computes_what_the_parent_computes(
    name: str, interpreted: dict[str, dict[str, Any]]
) -> None:
    check_run(interpreted[name])


@pytest.mark.slow
def test_matmul_splits_a_long_k_and_narrows_tiles_to_the_matrix(
    interpreted: dict[str, dict[str, Any]],
) -> None:
    (long_k,) = interpreted["matmul_large_k"]["launches"]
    assert long_k["constexprs"]["SPLIT"] > 1
    assert long_k["constexprs"]["BLOCK_M"] == 32 and long_k["constexprs"]["BLOCK_N"] == 32
    (square,) = interpreted["matmul"]["launches"]
    assert square["constexprs"]["SPLIT"] == 1  # K of 90: too short to split
    (matvec,) = interpreted["matvec"]["launches"]
    assert matvec["constexprs"]["BLOCK_N"] == 16


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_template_kernels_compile_for_hopper(tmp_path: Path) -> None:
    runs = run_kernels(tmp_path, compile_kernels=True)
    for name, run in runs.items():
        check_run(run)
        assert len(run["compiled"]) == len(run["launches"]), name


# --- cross-entropy and triplet margin: more draws, the forms not taken, the fallback -------------

ROW_LOSSES = [name for name in CASES if name.startswith(("cross_entropy", "triplet_margin"))]


@pytest.fixture(scope="module")
def interpreted_losses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    draws = {
        f"{name}-{seed}-{distribution}": (name, seed, distribution)
        for name in ROW_LOSSES
        for seed in (1, 2, 3)
        for distribution in DISTRIBUTIONS
    }
    return run_kernels(tmp_path_factory.mktemp("losses"), compile_kernels=False, draws=draws)


@pytest.mark.slow
@pytest.mark.parametrize("name", ROW_LOSSES)
def test_row_loss_templates_match_torch_on_seeds_signed_and_wide_inputs(
    name: str, interpreted_losses: dict[str, dict[str, Any]]
) -> None:
    runs = {key: run for key, run in interpreted_losses.items() if key.startswith(f"{name}-")}
    assert len(runs) == 9
    for key, run in runs.items():
        try:
            check_run(run)
        except AssertionError as error:
            raise AssertionError(key) from error


def test_row_loss_margin_and_ignore_index_are_read_as_written() -> None:
    # an init input: the module's attribute, read in forward; a literal: the literal
    assert "margin = float(self.loss_fn.margin)" in child("template", CASES["triplet_margin"][0])
    functional = child("template", CASES["triplet_margin_functional"][0])
    assert "margin = float(2.5)" in functional
    assert "1e-06, BLOCK=block" in functional  # torch's default eps
    assert "IGNORE_INDEX = -100  #" in child("template", CASES["cross_entropy"][0])
    assert "IGNORE_INDEX = 3  #" in child("template", CASES["cross_entropy_sum"][0])


# name: (forward's parameters, its body, __init__'s body, __init__'s extra parameters)
NOT_TAKEN = {
    "label_smoothing": ("predictions, targets", "return F.cross_entropy(predictions, targets, label_smoothing=0.1)", "", ""),
    "weight": ("predictions, targets", "return F.cross_entropy(predictions, targets, weight=self.w)", "self.w = nn.Parameter(torch.ones(5))", ""),
    "cross_entropy_none": ("predictions, targets", "return F.cross_entropy(predictions, targets, reduction='none')", "", ""),
    "cross_entropy_legacy": ("predictions, targets", "return F.cross_entropy(predictions, targets, size_average=False)", "", ""),
    "ignore_index_variable": ("predictions, targets", "return F.cross_entropy(predictions, targets, ignore_index=self.ignore)", "self.ignore = int(3)", ""),
    "module_label_smoothing": ("predictions, targets", "return self.loss(predictions, targets)", "self.loss = nn.CrossEntropyLoss(label_smoothing=0.1)", ""),
    "module_weight": ("predictions, targets", "return self.loss(predictions, targets)", "self.loss = nn.CrossEntropyLoss(torch.ones(5))", ""),
    "module_none": ("predictions, targets", "return self.loss(predictions, targets)", "self.loss = nn.CrossEntropyLoss(reduction='none')", ""),
    "p1": ("a, p, n", "return F.triplet_margin_loss(a, p, n, p=1)", "", ""),
    "swap": ("a, p, n", "return F.triplet_margin_loss(a, p, n, margin=1.0, swap=True)", "", ""),
    "triplet_none": ("a, p, n", "return F.triplet_margin_loss(a, p, n, reduction='none')", "", ""),
    "margin_parameter": ("a, p, n", "return F.triplet_margin_loss(a, p, n, margin=self.m)", "self.m = nn.Parameter(torch.ones(()))", ""),
    "module_p1": ("a, p, n", "return self.loss(a, p, n)", "self.loss = nn.TripletMarginLoss(margin=1.0, p=1)", ""),
    "module_p_init_input": ("a, p, n", "return self.loss(a, p, n)", "self.loss = nn.TripletMarginLoss(p=order)", ", order=2"),
    "module_swap": ("a, p, n", "return self.loss(a, p, n)", "self.loss = nn.TripletMarginLoss(1.0, 2, 1e-6, True)", ""),
    "module_none_triplet": ("a, p, n", "return self.loss(a, p, n)", "self.loss = nn.TripletMarginLoss(reduction='none')", ""),
}  # fmt: skip


@pytest.mark.parametrize("name", NOT_TAKEN)
def test_row_losses_with_options_the_kernels_do_not_compute_are_not_templated(name: str) -> None:
    forward_args, body, init, init_args = NOT_TAKEN[name]
    source = program(name, forward_args, body, init_args, init)
    assert MUTATIONS["template"].propose(prompt(source), np.random.default_rng(0)) is None


def test_row_loss_templates_fall_back_to_torch_for_inputs_their_kernels_do_not_take(
    tmp_path: Path,
) -> None:
    """Inputs outside the kernels reach the parent's forward (no kernel runs: no interpreter is
    needed, and a launch on CPU tensors would fail)."""
    pytest.importorskip("triton")
    entropy = load(child("template", CASES["cross_entropy"][0]), tmp_path, "fallback_ce").ModelNew()
    logits = randn(4, 5)
    probabilities = randn(4, 5).softmax(1)  # class probabilities, not indices
    spatial, spatial_targets = randn(2, 5, 3), torch.randint(0, 5, (2, 3))  # (N, C, d) logits
    for args in ((logits, probabilities), (spatial, spatial_targets)):
        torch.testing.assert_close(entropy(*args), torch.nn.functional.cross_entropy(*args))
    triplet = load(child("template", CASES["triplet_margin"][0]), tmp_path, "fallback_tm")
    model = triplet.ModelNew(0.7)
    a, p, n = randn(4, 6), randn(4, 6), randn(4, 6).double()  # dtypes differ
    torch.testing.assert_close(model(a, p, n), torch.nn.TripletMarginLoss(margin=0.7)(a, p, n))
    with pytest.raises(ValueError, match="margin"):  # torch's own error for a margin <= 0
        triplet.ModelNew(-1.0)(a, p, a)


def test_pool_template_falls_back_to_torch_for_settings_its_kernel_does_not_take(
    tmp_path: Path,
) -> None:
    """Indices returned, ceil mode, a divisor or padding left out of the average: the module's
    own pooling runs (no kernel: a launch on CPU tensors would fail)."""
    pytest.importorskip("triton")
    x = randn(2, 3, 11, 12)
    for index, module in enumerate(
        (
            "nn.MaxPool2d(3, stride=2, return_indices=True)",
            "nn.MaxPool2d(3, stride=2, ceil_mode=True)",
            "nn.AvgPool2d(3, divisor_override=4)",
            "nn.AvgPool2d(3, padding=1, count_include_pad=False)",
        )
    ):
        parent = program(f"pool{index}", "x", "return self.pool(x)", "", f"self.pool = {module}")
        candidate = load(child("template", parent), tmp_path, f"fallback_pool{index}").ModelNew()
        reference = load(parent, tmp_path, f"reference_pool{index}").ModelNew()
        got, want = candidate(x), reference(x)
        if isinstance(want, tuple):
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w)
        else:
            torch.testing.assert_close(got, want)
