"""Named prompt styles and the sampler that learns which of them work (meta-prompting).

A style is what the prompt asks for; the builder combines it with its stochastic phrasing (task
line, section order) and records the whole as ``Prompt.variant``, ``"<style>:task<i>-<order>"``:

- ``diff``: SEARCH/REPLACE blocks, a full rewrite also accepted (the default ask);
- ``focused``: one small change aimed at the case furthest behind the best seen;
- ``explore``: a different approach, borrowing from the inspirations, still as blocks;
- ``rewrite``: the whole editable code rewritten; offered only when it is short
  (``REWRITE_MAX_LINES``), where a rewrite costs few tokens and blocks gain little.

:class:`StyleSampler` picks a style per prompt. Uniform when not adaptive; adaptive, it draws by
Thompson sampling on each style's success rate (a success: the child beat its parent), so the
styles that work for this problem and model are asked more often, and the others are still tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.prompt_sampler.errors import PromptSamplerError

STYLES = ("diff", "focused", "explore", "rewrite")
REWRITE_MAX_LINES = 60  # editable lines up to which a full rewrite is offered

EXPLORE_ALONE = (  # the explore ask of a prompt that shows no other program
    "Try a different approach from the current one: restructure the logic or change the "
    "method, rather than nudging a constant."
)
STYLE_ASKS = {
    "diff": "",
    "focused": (
        "Make one small, targeted change aimed at the case furthest behind the best seen; keep "
        "everything else as it is."
    ),
    "explore": (
        "Try a different approach from the current one: borrow ideas from the other programs "
        "shown, or restructure the logic, rather than nudging a constant."
    ),
    "rewrite": (
        "The editable code is short: answer with a full rewrite of it in a single ```python "
        "block rather than SEARCH/REPLACE blocks."
    ),
}


def style_of(variant: str) -> str:
    """The style part of a variant name (``"focused:task0-parent-first"`` -> ``"focused"``)."""
    return variant.split(":", 1)[0]


@dataclass(slots=True)
class StyleStats:
    tries: int = 0
    successes: int = 0


class StyleSampler:
    """Chooses the style of each prompt; ``record`` feeds it outcomes when ``adaptive``."""

    def __init__(self, styles: Sequence[str] = STYLES, *, adaptive: bool = False) -> None:
        unknown = set(styles) - set(STYLES)
        if not styles or unknown:
            raise PromptSamplerError(f"styles must be a non-empty subset of {STYLES}: {styles}")
        self._styles = tuple(styles)
        self._adaptive = adaptive
        self.stats = {style: StyleStats() for style in self._styles}

    def choose(self, rng: np.random.Generator, *, rewrite_allowed: bool) -> str:
        eligible = [s for s in self._styles if rewrite_allowed or s != "rewrite"]
        if not eligible:
            eligible = list(self._styles)  # only "rewrite" configured: ask for it anyway
        if not self._adaptive:
            return eligible[int(rng.integers(len(eligible)))]
        draws = [
            rng.beta(1 + self.stats[s].successes, 1 + self.stats[s].tries - self.stats[s].successes)
            for s in eligible
        ]
        return eligible[int(np.argmax(draws))]

    def record(self, variant: str, *, success: bool) -> None:
        self.record_counts(variant, tries=1, successes=int(success))

    def record_counts(self, variant: str, *, tries: int, successes: int) -> None:
        """Several outcomes at once (a resumed job's history)."""
        stats = self.stats.get(style_of(variant))
        if stats is None:
            return  # not one of this sampler's styles (a simulated proposal): nothing to learn
        stats.tries += tries
        stats.successes += successes
