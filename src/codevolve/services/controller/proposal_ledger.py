"""The controller's book of what proposals cost and what they achieved.

It holds the job's spend against ``ProposerConfig.max_cost_usd``, decides whether prompts and
answers are stored, picks prompt styles (LLM proposer only, so simulated runs draw exactly what
they always drew), and feeds outcomes back to whatever learns from them: an adaptive proposer
(improvement per cost per model) and the prompt-style sampler (success rate per style).

A proposal settles twice: when its answer is applied (cost known; no child is an outcome of 0),
and, for a child, when its evaluation lands (improvement over the parent known). The learning
state lives in memory; a resumed job rebuilds it, and its spend, from the proposals table
(:meth:`ProposalLedger.warm_start`), so the budget and what was learnt span resumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.core.config import RunConfig
from codevolve.core.program import Evaluation, ProgramId, ProgramStatus
from codevolve.core.prompt import Prompt, Proposal
from codevolve.program_db.usage import UsageRow
from codevolve.prompt_sampler.variants import StyleSampler
from codevolve.proposers.base import LearningProposer, Proposer


@dataclass(frozen=True, slots=True)
class _Awaiting:
    proposer: str
    variant: str
    cost_usd: float
    parent_score: float | None


class ProposalLedger:
    def __init__(self, config: RunConfig, proposer: Proposer) -> None:
        self._budget = config.proposer.max_cost_usd
        self.logs_prompts = config.proposer.logs_prompts
        self.styles = (
            StyleSampler(adaptive=config.proposer.adaptive)
            if config.proposer.kind == "llm"
            else None
        )
        self._learner = proposer if isinstance(proposer, LearningProposer) else None
        self._awaiting: dict[ProgramId, _Awaiting] = {}
        self.cost_usd = 0.0  # USD spent by the job, all runs; the controller loads it at start

    def warm_start(self, usage: Sequence[UsageRow]) -> None:
        """Take in the job's earlier proposals (a resumed job): spend, and what was learnt."""
        self.cost_usd = sum(row.cost_usd for row in usage)
        per_proposer: dict[str, list[UsageRow]] = {}
        for row in usage:
            per_proposer.setdefault(row.proposer, []).append(row)
            if self.styles is not None:
                self.styles.record_counts(
                    row.prompt_variant, tries=row.proposals, successes=row.improved
                )
        if self._learner is None:
            return
        for proposer, rows in per_proposer.items():
            self._learner.observe(
                proposer,
                cost_usd=sum(row.cost_usd for row in rows),
                improvement=sum(row.gain for row in rows),
                calls=sum(row.proposals for row in rows),
            )

    def over_budget(self) -> bool:
        return self._budget is not None and self.cost_usd >= self._budget

    def texts(self, prompt: Prompt, proposal: Proposal) -> tuple[str, str]:
        """``(prompt, answer)`` to store with the proposal: empty unless prompts are logged."""
        return (prompt.text, proposal.text) if self.logs_prompts else ("", "")

    def settled(
        self,
        prompt: Prompt,
        proposal: Proposal,
        *,
        child: ProgramId | None,
        parent_score: float | None,
    ) -> None:
        """The answer was applied (or not): count its cost; a proposal without a child is done."""
        self.cost_usd += proposal.cost_usd
        if child is None:
            self._learn(proposal.proposer, prompt.variant, proposal.cost_usd, improvement=None)
        else:
            self._awaiting[child] = _Awaiting(
                proposal.proposer, prompt.variant, proposal.cost_usd, parent_score
            )

    def evaluated(self, evaluation: Evaluation) -> None:
        """A child's result landed: learn how much it gained over its parent."""
        awaiting = self._awaiting.pop(evaluation.program_id, None)
        if awaiting is None:
            return  # the seed, or a child of an earlier run of the job
        improvement = None
        score = evaluation.score
        if evaluation.status is ProgramStatus.EVALUATED and score is not None:
            base = awaiting.parent_score
            improvement = score - base if base is not None else 0.0
        self._learn(awaiting.proposer, awaiting.variant, awaiting.cost_usd, improvement=improvement)

    def _learn(
        self, proposer: str, variant: str, cost_usd: float, *, improvement: float | None
    ) -> None:
        gain = max(improvement or 0.0, 0.0)
        if self._learner is not None:
            self._learner.observe(proposer, cost_usd=cost_usd, improvement=gain)
        if self.styles is not None:
            self.styles.record(variant, success=gain > 0)
