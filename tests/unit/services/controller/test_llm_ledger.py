"""The controller's ledger: the cost budget, prompt logging, and outcomes fed to the learners."""

from __future__ import annotations

import numpy as np

from codevolve.core.config import ModelConfig, ProposerConfig, RunConfig
from codevolve.core.program import Evaluation, ProgramStatus, StageResult
from codevolve.core.prompt import ProgramView, Prompt, Proposal
from codevolve.program_db.usage import UsageRow
from codevolve.services.controller.proposal_ledger import ProposalLedger


class Learner:
    name = "learner"
    reads_prompt_text = True
    cpu_bound = False  # it waits on an API

    def __init__(self) -> None:
        self.seen: list[tuple[str, float, float]] = []
        self.calls = 0

    async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal:
        raise AssertionError("not called")

    def observe(
        self, proposer: str, *, cost_usd: float, improvement: float, calls: int = 1
    ) -> None:
        self.seen.append((proposer, cost_usd, improvement))
        self.calls += calls


def config(**proposer: object) -> RunConfig:
    section = ProposerConfig.model_validate(
        {"kind": "llm", "models": (ModelConfig(name="m"),)} | proposer
    )
    return RunConfig(problem="gemm-tiling", proposer=section)


PROMPT = Prompt(
    job_id="j",
    problem="p",
    proposal_index=0,
    island=0,
    parent=ProgramView(id="parent", source="x = 1\n", score=1.0),
    inspirations=(),
    best_cases={},
    context="",
    text="the prompt",
    variant="focused:task0-parent-first",
)


def evaluation(program_id: str, score: float | None, status: ProgramStatus) -> Evaluation:
    stage = StageResult(stage="s", passed=status is ProgramStatus.EVALUATED, score=score)
    return Evaluation(program_id=program_id, job_id="j", status=status, stages=(stage,))


def test_outcomes_reach_the_learner_and_the_style_sampler() -> None:
    learner = Learner()
    ledger = ProposalLedger(config(), learner)
    answer = Proposal(text="a", proposer="llm:m", cost_usd=0.25)
    ledger.settled(PROMPT, answer, child=None, parent_score=1.0)  # did not apply
    ledger.settled(PROMPT, answer, child="c1", parent_score=1.0)
    ledger.settled(PROMPT, answer, child="c2", parent_score=1.0)
    assert len(learner.seen) == 1  # children wait for their evaluation
    ledger.evaluated(evaluation("c1", 1.5, ProgramStatus.EVALUATED))
    ledger.evaluated(evaluation("c2", None, ProgramStatus.FAILED))
    ledger.evaluated(evaluation("seed", 1.0, ProgramStatus.EVALUATED))  # not a proposal's child
    assert learner.seen == [("llm:m", 0.25, 0.0), ("llm:m", 0.25, 0.5), ("llm:m", 0.25, 0.0)]
    assert ledger.styles is not None
    focused = ledger.styles.stats["focused"]
    assert (focused.tries, focused.successes) == (3, 1)
    assert ledger.cost_usd == 0.75


def test_the_budget_is_reached_at_the_limit_and_texts_are_kept_for_llm_runs() -> None:
    ledger = ProposalLedger(config(max_cost_usd=1.0), Learner())
    answer = Proposal(text="the answer", proposer="llm:m", cost_usd=0.5)
    ledger.settled(PROMPT, answer, child=None, parent_score=1.0)
    assert not ledger.over_budget()
    ledger.settled(PROMPT, answer, child=None, parent_score=1.0)
    assert ledger.over_budget()
    assert ledger.texts(PROMPT, answer) == ("the prompt", "the answer")
    quiet = ProposalLedger(config(log_prompts=False), Learner())
    assert quiet.texts(PROMPT, answer) == ("", "")


def test_a_simulated_run_has_no_styles_no_learner_and_no_budget() -> None:
    ledger = ProposalLedger(RunConfig(problem="gemm-tiling"), Learner())
    assert ledger.styles is None and not ledger.over_budget()
    assert ledger.texts(PROMPT, Proposal(text="a", proposer="simulated")) == ("", "")


def test_a_resumed_job_takes_back_its_spend_and_what_was_learnt() -> None:
    learner = Learner()
    ledger = ProposalLedger(config(max_cost_usd=2.0), learner)
    ledger.warm_start(
        [
            UsageRow("llm:m", "focused:task0-parent-first", 4, 3, 2, 0.3, 4000, 400, 1.5),
            UsageRow("llm:m", "diff:task1-parent-first", 2, 1, 0, 0.0, 2000, 200, 0.5),
            UsageRow("simulated:constant", "task0-parent-first", 5, 5, 1, 0.1, 0, 0, 0.0),
        ]
    )
    assert ledger.cost_usd == 2.0 and ledger.over_budget()
    assert learner.seen == [("llm:m", 2.0, 0.3), ("simulated:constant", 0.0, 0.1)]
    assert learner.calls == 6 + 5
    assert ledger.styles is not None
    assert (ledger.styles.stats["focused"].tries, ledger.styles.stats["focused"].successes) == (
        4,
        2,
    )
    assert ledger.styles.stats["diff"].tries == 2
