"""KernelBench convolutions: which templates each module gets, and that each computes what the
module computes.

The pure-torch templates (cuDNN's settings, the product over unfolded patches) run here as they
are. The Triton ones (implicit GEMM, depthwise) run in Triton's interpreter in a child process
(test_kb_mutations.py's driver), on the judge's three input distributions, and their kernels are
compiled for sm_90 with the launch signatures the interpreter saw. Reference and candidate are
built from one seed, as the judge builds them: a template's ``__init__`` lines must not change
the weights.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from codevolve.problems.kernelbench.template_text import MARKER
from tests.unit.problems.kernelbench.test_kb_mutations import (
    COMPILER,
    DRIVER,
    MUTATIONS,
    _child_process,
    child,
    load,
    program,
    prompt,
)

torch = pytest.importorskip("torch")

GEMM, DEPTHWISE, CUDNN, UNFOLD = "conv_gemm", "conv_depthwise", "conv_cudnn", "conv_unfold"
SEEDS = range(40)  # template draws: every template of a convolution shows among these


def conv_program(module: str, init_args: str = "") -> str:
    return program("conv", "x", "return self.conv(x)", init_args, f"self.conv = {module}")


def template_name(source: str) -> str:
    line = next(line for line in source.split("\n") if line.startswith(MARKER))
    return line.split()[2]


def conv_child(parent: str, name: str) -> str:
    """The ``template`` child of ``parent`` holding the template ``name``."""
    for seed in SEEDS:
        built = child("template", parent, seed)
        if template_name(built) == name:
            return built
    raise AssertionError(f"no {name} child")


def pair(
    parent: str, source: str, tmp_path: Path, tag: str, init: tuple[Any, ...] = ()
) -> tuple[Any, Any]:
    """The parent's and the child's ModelNew, each built after seeding as the judge does."""
    torch.manual_seed(0)
    reference = load(parent, tmp_path, f"reference_{tag}").ModelNew(*init)
    torch.manual_seed(0)
    candidate = load(source, tmp_path, f"candidate_{tag}").ModelNew(*init)
    return reference, candidate


# --- which templates each form gets ------------------------------------------------------------

FORMS = {
    "conv2d": ("nn.Conv2d(3, 8, 3)", "", {GEMM, CUDNN, UNFOLD}),
    "conv2d_groups_1_positional": ("nn.Conv2d(3, 8, 3, 1, 0, 1, 1)", "", {GEMM, CUDNN, UNFOLD}),
    "depthwise": ("nn.Conv2d(c, c, 3, groups=c)", ", c: int = 4", {DEPTHWISE, CUDNN}),
    "depthwise_1d_keywords": (
        "nn.Conv1d(in_channels=c, out_channels=2 * c, kernel_size=3, groups=c)",
        ", c: int = 4",
        {DEPTHWISE, CUDNN},
    ),
    "groups_from_init": (
        "nn.Conv2d(c, 8, 3, groups=groups)",
        ", c: int = 4, groups: int = 1",
        {GEMM, DEPTHWISE, CUDNN, UNFOLD},
    ),
    "conv3d": ("nn.Conv3d(3, 8, 3)", "", {CUDNN}),
    "transposed2d": ("nn.ConvTranspose2d(3, 8, 3, groups=1)", "", {CUDNN}),
    "transposed1d": ("nn.ConvTranspose1d(3, 8, 3)", "", {CUDNN}),
}


@pytest.mark.parametrize("form", FORMS)
def test_each_convolution_form_gets_its_templates(form: str) -> None:
    module, init_args, expected = FORMS[form]
    parent = conv_program(module, init_args)
    seen = {template_name(child("template", parent, seed)) for seed in SEEDS}
    assert seen == expected


def test_a_template_child_is_left_to_tune() -> None:
    templated = conv_child(conv_program("nn.Conv2d(3, 8, 3)"), GEMM)
    assert MUTATIONS["template"].propose(prompt(templated), np.random.default_rng(0)) is None
    tunable = re.compile(r"^(\w+) = (\d+)  # tune: ([\d|]+)$", re.MULTILINE)
    before = {m[1]: m[2] for m in tunable.finditer(templated)}
    moved = set()
    for seed in SEEDS:
        after = {m[1]: m[2] for m in tunable.finditer(child("tune", templated, seed))}
        moved |= {name for name in before if after[name] != before[name]}
    assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_WARPS", "NUM_STAGES", "FP32_TF32X3"} <= moved


# --- the pure-torch templates: cuDNN's settings, the product over unfolded patches --------------

randn = torch.randn
# name: (module, input, templates run here)
CONVS: dict[str, tuple[str, Callable[[], Any], tuple[str, ...]]] = {
    "conv2d": (
        "nn.Conv2d(3, 8, 3, stride=2, padding=1, dilation=2)",
        lambda: randn(2, 3, 17, 20),
        (CUDNN, UNFOLD),
    ),
    "conv2d_asymmetric": (
        "nn.Conv2d(4, 6, (3, 5), stride=(1, 2), padding=(1, 2), dilation=(2, 1), bias=False)",
        lambda: randn(2, 4, 15, 18),
        (CUDNN, UNFOLD),
    ),
    "conv1d_dilated": (
        "nn.Conv1d(5, 7, 3, stride=3, dilation=4)",
        lambda: randn(3, 5, 200),
        (CUDNN, UNFOLD),
    ),
    "conv2d_pointwise": (
        "nn.Conv2d(6, 9, kernel_size=1)",
        lambda: randn(2, 6, 13, 11),
        (CUDNN, UNFOLD),
    ),
    "depthwise": ("nn.Conv2d(4, 4, 3, padding=1, groups=4)", lambda: randn(2, 4, 9, 11), (CUDNN,)),
    "conv3d": (
        "nn.Conv3d(3, 5, (3, 2, 3), stride=(1, 2, 1), padding=1)",
        lambda: randn(2, 3, 6, 7, 8),
        (CUDNN,),
    ),
    "transposed2d": (
        "nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=2)",
        lambda: randn(2, 4, 7, 8),
        (CUDNN,),
    ),
    "transposed3d": (
        "nn.ConvTranspose3d(3, 4, 3, stride=2, bias=False)",
        lambda: randn(2, 3, 4, 5, 3),
        (CUDNN,),
    ),
    "transposed1d": (
        "nn.ConvTranspose1d(3, 4, 5, stride=3, padding=2)",
        lambda: randn(2, 3, 30),
        (CUDNN,),
    ),
    "reflect": (
        "nn.Conv2d(3, 5, 3, padding=1, padding_mode='reflect')",
        lambda: randn(2, 3, 9, 9),
        (CUDNN,),
    ),
    "same": ("nn.Conv2d(3, 5, 3, padding='same')", lambda: randn(2, 3, 9, 9), (CUDNN,)),
}
TORCH_RUNS = [
    (name, template) for name, (_, _, templates) in CONVS.items() for template in templates
]


@pytest.mark.parametrize(("name", "template"), TORCH_RUNS)
def test_pure_torch_templates_compute_what_the_module_computes(
    name: str, template: str, tmp_path: Path
) -> None:
    module, inputs, _ = CONVS[name]
    parent = conv_program(module)
    reference, candidate = pair(
        parent, conv_child(parent, template), tmp_path, f"{name}_{template}"
    )

    def refuse(*args: Any) -> Any:
        raise AssertionError("fell back to the parent's forward")

    candidate.forward_torch = refuse
    for seed in (0, 1):
        torch.manual_seed(seed)
        x = inputs()
        got, want = candidate(x), reference(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_cudnn_template_converts_the_weight_once_and_the_input_per_call(tmp_path: Path) -> None:
    parent = conv_program(CONVS["conv2d"][0])
    source = conv_child(parent, CUDNN)
    assert "torch.backends.cudnn.benchmark = bool(CUDNN_BENCHMARK)" in source
    reference, candidate = pair(parent, source, tmp_path, "layout")
    weight = candidate.conv.weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    torch.testing.assert_close(weight, reference.conv.weight, atol=0, rtol=0)
    x = randn(2, 3, 17, 20)
    got = candidate(x)
    assert got.is_contiguous(memory_format=torch.channels_last)  # the judge compares values
    torch.testing.assert_close(got, reference(x), atol=1e-4, rtol=1e-4)
    plain = source.replace("CHANNELS_LAST = 1  #", "CHANNELS_LAST = 0  #")
    _, unconverted = pair(parent, plain, tmp_path, "no_layout")
    assert unconverted.conv.weight.is_contiguous() and unconverted(x).is_contiguous()


@pytest.mark.parametrize("name", ["unbatched", "grouped"])
def test_unfold_template_falls_back_for_settings_it_does_not_compute(
    name: str, tmp_path: Path
) -> None:
    module, x = {
        "unbatched": ("nn.Conv1d(3, 5, 3)", randn(3, 40)),
        "grouped": ("nn.Conv2d(4, 8, 3, groups=groups)", randn(2, 4, 9, 9)),
    }[name]
    parent = conv_program(module, ", groups: int = 2")
    reference, candidate = pair(parent, conv_child(parent, UNFOLD), tmp_path, f"unfold_{name}")
    torch.testing.assert_close(candidate(x), reference(x))


# --- the Triton templates, in Triton's interpreter ---------------------------------------------

# name: (module, __init__'s extra parameters, init inputs, input shape, template)
TRITON: dict[str, tuple[str, str, tuple[Any, ...], tuple[int, ...], str]] = {
    # the judge's CPU test problem's settings: stride 2, padding 1, dilation 2, a bias
    "gemm_s2_p1_d2": (
        "nn.Conv2d(5, 12, 3, stride=2, padding=1, dilation=2)",
        "",
        (),
        (2, 5, 19, 23),
        GEMM,
    ),
    "gemm_asymmetric": (
        "nn.Conv2d(4, 6, (3, 5), stride=(1, 2), padding=(1, 2), dilation=(2, 1), bias=False)",
        "",
        (),
        (2, 4, 15, 18),
        GEMM,
    ),
    "gemm_large_kernel": (
        "nn.Conv2d(3, 20, 11, stride=4, padding=2)",
        "",
        (),
        (2, 3, 40, 37),
        GEMM,
    ),  # problem 50's form
    "gemm_pointwise": ("nn.Conv2d(24, 40, 1)", "", (), (2, 24, 9, 7), GEMM),
    "gemm_1d": ("nn.Conv1d(5, 7, 3, stride=3, dilation=4)", "", (), (3, 5, 200), GEMM),
    "gemm_groups_from_init": (
        "nn.Conv2d(c, 16, 3, padding=1, groups=groups)",
        ", c: int = 4, groups: int = 1",
        (4, 1),
        (2, 4, 9, 10),
        GEMM,
    ),
    "depthwise": (
        "nn.Conv2d(c, c, 3, padding=1, groups=c)",
        ", c: int = 4",
        (4,),
        (2, 4, 9, 11),
        DEPTHWISE,
    ),
    "depthwise_multiplier": (
        "nn.Conv2d(c, 2 * c, (3, 2), stride=2, padding=(1, 0), dilation=(1, 2), groups=c)",
        ", c: int = 3",
        (3,),
        (2, 3, 10, 12),
        DEPTHWISE,
    ),
    "depthwise_1d": (
        "nn.Conv1d(c, c, 5, padding=2, groups=c, bias=False)",
        ", c: int = 4",
        (4,),
        (2, 4, 50),
        DEPTHWISE,
    ),
    "depthwise_groups_from_init": (
        "nn.Conv2d(c, c, 3, stride=2, groups=groups)",
        ", c: int = 4, groups: int = 4",
        (4, 4),
        (2, 4, 11, 9),
        DEPTHWISE,
    ),
}
# settings a kernel does not take: the module computes them (no launch)
TRITON_FALLBACKS = {
    "gemm_grouped": (
        "nn.Conv2d(c, 8, 3, groups=groups)",
        ", c: int = 4, groups: int = 2",
        (4, 2),
        (2, 4, 9, 9),
        GEMM,
    ),
    "gemm_reflect": (
        "nn.Conv2d(3, 5, 3, padding=1, padding_mode='reflect')",
        "",
        (),
        (2, 3, 9, 9),
        GEMM,
    ),
    "depthwise_grouped": (
        "nn.Conv2d(c, 8, 3, groups=groups)",
        ", c: int = 4, groups: int = 2",
        (4, 2),
        (2, 4, 9, 9),
        DEPTHWISE,
    ),
    "depthwise_unbatched": (
        "nn.Conv1d(c, c, 3, groups=c)",
        ", c: int = 4",
        (4,),
        (4, 30),
        DEPTHWISE,
    ),
}
DISTRIBUTIONS = {"kernelbench": None, "signed": 1.0, "wide": 100.0}  # the judge's three


def run_triton(
    directory: Path,
    cases: dict[str, tuple[str, str, tuple[Any, ...], tuple[int, ...], str]],
    *,
    compile_kernels: bool,
) -> dict[str, dict[str, Any]]:
    """Each case's Triton child run by the interpreter on each distribution's input (the
    judge's: torch.rand, then a random sign, then x 100), beside the reference's output."""
    pytest.importorskip("triton")
    manifest, results = [], {}
    for name, (module, init_args, init, shape, template) in cases.items():
        parent = conv_program(module, init_args)
        path = directory / f"candidate_{name}.py"
        path.write_text(conv_child(parent, template))
        torch.manual_seed(0)
        reference = load(parent, directory, f"reference_{name}").ModelNew(*init)
        for distribution, scale in DISTRIBUTIONS.items():
            key = f"{name}-{distribution}"
            torch.manual_seed(len(key))
            x = torch.rand(*shape)
            if scale is not None:
                x = x * torch.where(torch.rand(shape) < 0.5, -scale, scale)
            data = directory / f"{key}.pt"
            torch.save((init, [x.clone()], reference.state_dict()), data)
            results[key] = {"want": reference(x).detach(), "scaled": scale is not None}
            manifest.append(
                {
                    "name": key,
                    "candidate": str(path),
                    "data": str(data),
                    "out": str(directory / f"{key}.out"),
                }
            )
    listing = directory / "cases.json"
    listing.write_text(json.dumps(manifest))
    _child_process(directory, DRIVER, "driver.py", listing)
    for case in manifest:
        out = torch.load(case["out"])
        results[case["name"]].update(out)
        case["launches"] = out.get("launches", [])
    if compile_kernels:
        listing.write_text(json.dumps(manifest))
        compiled = json.loads(_child_process(directory, COMPILER, "compiler.py", listing))
        for name, kernels in compiled.items():
            results[name]["compiled"] = kernels
    return results


def check(run: dict[str, Any], *, launched: bool = True) -> None:
    """The judge's comparison: atol = rtol = 1e-4, atol scaled by the output's RMS (at least 1)
    on signed and wide inputs."""
    assert "error" not in run, run.get("error")
    got, want = run["result"], run["want"]
    assert got.shape == want.shape and got.dtype == want.dtype
    atol = 1e-4 * (max(1.0, float(want.double().pow(2).mean().sqrt())) if run["scaled"] else 1.0)
    torch.testing.assert_close(got, want, atol=atol, rtol=1e-4)
    assert bool(run["launches"]) == launched, run["launches"]


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run_triton(
        tmp_path_factory.mktemp("convs"), {**TRITON, **TRITON_FALLBACKS}, compile_kernels=False
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", TRITON)
def test_triton_template_computes_what_the_module_computes(
    name: str, interpreted: dict[str, dict[str, Any]]
) -> None:
    for distribution in DISTRIBUTIONS:
        try:
            check(interpreted[f"{name}-{distribution}"])
        except AssertionError as error:
            raise AssertionError(distribution) from error


@pytest.mark.slow
@pytest.mark.parametrize("name", TRITON_FALLBACKS)
def test_triton_template_falls_back_for_settings_its_kernel_does_not_take(
    name: str, interpreted: dict[str, dict[str, Any]]
) -> None:
    check(interpreted[f"{name}-kernelbench"], launched=False)


@pytest.mark.slow
def test_gemm_tiles_narrow_to_the_output_channels_and_the_patch(
    interpreted: dict[str, dict[str, Any]],
) -> None:
    (launch,) = interpreted["gemm_s2_p1_d2-kernelbench"]["launches"]
    constants = launch["constexprs"]
    assert (constants["BLOCK_N"], constants["BLOCK_K"]) == (16, 32)  # 12 channels, 45 = 5 x 3 x 3
    assert (constants["SH"], constants["PH"], constants["DH"], constants["HAS_BIAS"]) == (
        2,
        1,
        2,
        True,
    )
    assert constants["PRECISION"] == "tf32x3"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_triton_conv_kernels_compile_for_hopper(tmp_path: Path) -> None:
    chosen = {name: TRITON[name] for name in ("gemm_s2_p1_d2", "gemm_1d", "depthwise_multiplier")}
    runs = run_triton(tmp_path, chosen, compile_kernels=True)
    for key, run in runs.items():
        check(run)
        assert len(run["compiled"]) == len(run["launches"]), key
