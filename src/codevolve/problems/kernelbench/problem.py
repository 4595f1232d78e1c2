"""A KernelBench-format problem: evolve ``ModelNew`` until it beats the reference ``Model``.

Task: the user's file defines a PyTorch ``Model`` and its inputs (format.py); the program defines
``ModelNew`` with the same constructor and forward, in Triton and/or torch, computing the same
outputs faster on the worker's GPU. The initial program is the reference's own class.

Metric: t_eager / t_ModelNew, both timed by the trusted judge on the same fresh inputs, with the
L2 flushed, interleaved round by round, medians; ``torch.compile``'s time is reported beside it
when the problem asks for it. A program that is wrong on any of the judge's input distributions
scores nothing (stages.py). KernelBench's ``fast_p`` over a set of problems is computed from the
best program of each problem's job (results.py).

Cascade: the source rules (any CPU worker), then the judge on a device. Mutations for the
simulated proposer (mutations.py) recognise common operator patterns in the forward and propose
Triton kernels or exact torch rewrites for them, then tune them; problems it does not recognise
are left to the LLM proposer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.core.kernel_rules import check_model_new
from codevolve.core.problem import FeatureSpec, Mutation, ProblemSpec, SourceCheckStage
from codevolve.problems.kernelbench.spec import KernelSpec
from codevolve.problems.kernelbench.stages import JudgeStage
from codevolve.problems.openevolve.bundle import Bundle

FEATURES = (
    FeatureSpec(name="uses_triton", low=0.0, high=1.0, bins=2),
    FeatureSpec(name="speedup_eager", low=0.0, high=4.0, bins=8),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelBenchProblem(ProblemSpec):
    """One KernelBench-format file as a problem, with the files it was built from."""

    spec: KernelSpec
    bundle: Bundle  # the stored files (reference, initial program, settings)

    @property
    def title(self) -> str:
        """The problem file's name, for people (``19_ReLU``)."""
        return self.spec.name


def kernelbench_problem(spec: KernelSpec, bundle: Bundle) -> KernelBenchProblem:
    """The problem of one KernelBench-format file; built from its bundle (spec.py)."""
    return KernelBenchProblem(
        name=bundle.name,
        description=_description(spec),
        initial_program=spec.initial_program,
        # the source rules (core/kernel_rules.py), then the judge
        stages=(SourceCheckStage(check_model_new), JudgeStage(spec)),
        features=FEATURES,
        domain_mutations=_mutations,
        spec=spec,
        bundle=bundle,
    )


def _description(spec: KernelSpec) -> str:
    settings = spec.settings
    forbid = (
        f" It must not run these aten operators: {', '.join(settings.forbid)}."
        if settings.forbid
        else ""
    )
    return (
        f"KernelBench problem {spec.name}. Write ModelNew, a faster drop-in "
        "replacement of the reference Model below (same constructor arguments, same forward "
        "inputs, same outputs, dtype and shape), in Triton kernels and/or PyTorch. Score: "
        "PyTorch eager time of Model / time of ModelNew on the GPU, on fresh inputs, with "
        "the L2 cache flushed between rounds. Outputs are checked on several seeds with "
        "KernelBench's inputs, the same with random signs, and those times 100 (atol = rtol = "
        "1e-4 for fp32, 1e-2 for fp16/bf16). Only torch, torch.nn, torch.nn.functional, "
        "triton, triton.language and math may be imported; no streams, threads, RNG "
        "seeding, torch.compile, try/except, caching of results or writing into the "
        f"inputs.{forbid}\n\nThe reference:\n\n{spec.reference}"
    )


def _mutations() -> Sequence[Mutation]:
    from codevolve.problems.kernelbench.mutations import kernel_mutations

    return kernel_mutations()
