"""How alike two programs are: one measure for the ``diversity`` feature and the novelty filter.

The measure compares the programs' editable code (the EVOLVE-BLOCK regions; the whole source when
it has no markers) as sequences of Python tokens, comments, blank lines and indentation-only
changes left out: a child that only reformats or re-comments its parent is identical to it.
``similarity`` is difflib's ratio of the two token sequences, ``2 * matched / (len(a) + len(b))``:
1.0 for the same tokens, 0.0 for nothing in common. Source that does not tokenize (an unclosed
string) falls back to whitespace-separated words.
"""

from __future__ import annotations

import difflib
import functools
import io
import math
import tokenize
from collections.abc import Sequence

from codevolve.core.evolve_block import layout

Tokens = tuple[str, ...]

_SKIPPED = frozenset(
    {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
)


@functools.lru_cache(maxsize=256)  # parents and inspirations recur from proposal to proposal
def code_tokens(source: str) -> Tokens:
    """The tokens of ``source``'s editable code that the measure compares."""
    text = "\n".join(layout(source).region_texts())
    try:
        return tuple(
            token.string
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type not in _SKIPPED and token.string
        )
    except (tokenize.TokenError, SyntaxError):  # IndentationError is a SyntaxError
        return tuple(text.split())


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """Token-sequence similarity in [0, 1]; two empty sequences are identical."""
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def distance_feature(tokens: Sequence[str], reference: Sequence[str]) -> float:
    """``sqrt(1 - similarity)``, in [0, 1]: the square root spreads the small distances that most
    edits make (a token changed in a 200-token block is 0.07, not 0.005), so that bins of equal
    width separate programs a few edits apart and still hold those that moved far."""
    return math.sqrt(max(0.0, 1.0 - similarity(tokens, reference)))


def most_similar(source: str, others: Sequence[tuple[str, str]]) -> tuple[float, str] | None:
    """The highest similarity of ``source`` to one of ``others`` (id, source), with that one's
    id; None when there are none."""
    tokens = code_tokens(source)
    scored = [(similarity(tokens, code_tokens(text)), name) for name, text in others]
    return max(scored, key=lambda pair: pair[0]) if scored else None
