"""Domain mutations of matmul-tensor for the simulated proposer.

A program in this problem's shape has a driver ``find_decomposition`` (fresh random starts
until an exact answer or the deadline), an ``optimise`` function (a continuous search of real
factors) and a ``finish`` function (turns real factors into integers), plus UPPER_CASE numeric
constants at module level or inside those functions. The mutations, each one SEARCH/REPLACE hunk
inside the EVOLVE block:

- ``hyperparameter``: scale one constant (steps, learning rate, init scale, ridge, tolerance...),
  by factors of which no two multiply to 1, so that two moves do not lead back to a program
  already seen;
- ``optimiser``: swap ``optimise`` for another from library.txt (Adam, Adam with a sparsity phase
  and an annealed integer penalty, alternating least squares, ALS with an annealed pull towards
  {-1, 0, 1}, the same on a batch of starts solved together);
- ``rounding``: swap ``finish`` (plain rounding, rounding into {-1, 0, 1}, progressive rounding
  with refitting);
- ``loss_term``: switch on or rescale a loss or schedule term (sparsity weight and phase, integer
  penalty, attraction strength, balancing of the terms' scales);
- ``noise``: switch on or rescale the noise of the optimiser's early phase;
- ``borrow``: copy ``optimise`` or ``finish`` from an inspiration.

No known decomposition is ever written into a program: the mutations only edit search code.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import numpy as np

from codevolve.core.diff import Diff, unique_line_hunk
from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START
from codevolve.core.problem import Mutation
from codevolve.core.prompt import Prompt
from codevolve.core.pysource import parse_python

SLOTS = ("optimise", "finish")
LOSS_TERMS = frozenset({"SPARSITY", "SPARSE_PHASE", "PENALTY", "ATTRACT", "BALANCE"})
ENABLE_VALUES: dict[str, tuple[float, ...]] = {  # values tried when a term is switched on from 0
    "NOISE": (0.001, 0.01, 0.05),
    "SPARSITY": (0.0001, 0.001, 0.01),
    "SPARSE_PHASE": (0.2, 0.3, 0.5),
    "PENALTY": (0.1, 1.0, 10.0),
    "ATTRACT": (0.01, 0.1, 1.0),
    "BALANCE": (1.0,),
}
# No product of two factors is within 0.09 of 1: scaling down then up (or the reverse) lands on
# a new value, counts of 20 or more included after rounding.
SCALES = (0.5, 0.7, 1.3, 1.7)
_CONSTANT = re.compile(r"^(\s*)([A-Z][A-Z0-9_]*) = (-?[0-9][0-9_.eE+-]*)(\s*#.*)?$")


@dataclass(frozen=True, slots=True)
class Constant:
    line: int  # 0-based
    indent: str
    name: str
    value: float
    integral: bool
    comment: str

    def render(self, value: float) -> str:
        text = str(max(1, round(value))) if self.integral else f"{value:.6g}"
        if not self.integral and "." not in text and "e" not in text:
            text += ".0"
        return f"{self.indent}{self.name} = {text}{self.comment}"


@dataclass(frozen=True, slots=True)
class Source:
    """A parent, read: its lines, EVOLVE block region, constants and slot functions."""

    text: str
    lines: list[str]
    region: tuple[int, int]  # lines [first, stop) strictly inside the markers
    constants: tuple[Constant, ...]
    functions: dict[str, tuple[int, int]]  # module-level def name -> lines [start, end)

    def hunk(self, start: int, end: int, new_lines: list[str]) -> str | None:
        hunk = unique_line_hunk(
            self.text, start=start, end=end, new_lines=new_lines, region=self.region
        )
        return None if hunk is None else Diff((hunk,)).render()


def read_source(text: str) -> Source | None:
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == EVOLVE_START]
    ends = [i for i, line in enumerate(lines) if line.strip() == EVOLVE_END]
    if len(starts) != 1 or len(ends) != 1 or starts[0] >= ends[0]:
        return None
    first, stop = starts[0] + 1, ends[0]
    try:
        tree = parse_python(text)
    except SyntaxError:
        return None
    functions = {
        node.name: (node.lineno - 1, node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and first <= node.lineno - 1 < stop
    }
    constants = []
    for index in range(first, stop):
        match = _CONSTANT.match(lines[index])
        if match is None:
            continue
        raw = match.group(3)
        try:
            value = float(raw)
        except ValueError:
            continue
        integral = re.fullmatch(r"-?[0-9_]+", raw) is not None
        constants.append(
            Constant(index, match.group(1), match.group(2), value, integral, match.group(4) or "")
        )
    return Source(text, lines, (first, stop), tuple(constants), functions)


@functools.cache
def library() -> dict[str, dict[str, str]]:
    """slot -> variant name -> the function's source, from library.txt and the initial program."""
    package = resources.files("codevolve.problems.matmul_tensor")
    text = package.joinpath("library.txt").read_text(encoding="utf-8")
    variants: dict[str, dict[str, str]] = {slot: {} for slot in SLOTS}
    for block in re.split(r"^# variant: ", text, flags=re.MULTILINE)[1:]:
        head, body = block.split("\n", 1)
        slot, name = head.split()
        variants[slot][name] = body.strip("\n")
    initial = read_source(package.joinpath("initial_program.txt").read_text(encoding="utf-8"))
    assert initial is not None
    for slot, name in (("optimise", "adam"), ("finish", "round")):
        start, end = initial.functions[slot]
        variants[slot][name] = "\n".join(initial.lines[start:end])
    return variants


def _function_text(source: Source, name: str) -> str:
    start, end = source.functions[name]
    return "\n".join(source.lines[start:end])


def _scaled(constant: Constant, rng: np.random.Generator) -> str:
    if constant.value == 0:
        options = ENABLE_VALUES.get(constant.name, (0.001, 0.01, 0.1))
        return constant.render(float(rng.choice(options)))
    return constant.render(constant.value * float(rng.choice(SCALES)))


def hyperparameter(source: Source, prompt: Prompt, rng: np.random.Generator) -> str | None:
    del prompt
    options = list(source.constants)
    if not options:
        return None
    constant = options[int(rng.integers(len(options)))]
    return source.hunk(constant.line, constant.line + 1, [_scaled(constant, rng)])


def _named(names: frozenset[str]) -> Callable[[Source, Prompt, np.random.Generator], str | None]:
    def edit(source: Source, prompt: Prompt, rng: np.random.Generator) -> str | None:
        del prompt
        options = [c for c in source.constants if c.name in names]
        if not options:
            return None
        constant = options[int(rng.integers(len(options)))]
        return source.hunk(constant.line, constant.line + 1, [_scaled(constant, rng)])

    return edit


def _swap(slot: str) -> Callable[[Source, Prompt, np.random.Generator], str | None]:
    def edit(source: Source, prompt: Prompt, rng: np.random.Generator) -> str | None:
        del prompt
        if slot not in source.functions:
            return None
        current = _function_text(source, slot)
        options = [text for text in library()[slot].values() if text != current]
        if not options:
            return None
        start, end = source.functions[slot]
        return source.hunk(start, end, options[int(rng.integers(len(options)))].split("\n"))

    return edit


def borrow(source: Source, prompt: Prompt, rng: np.random.Generator) -> str | None:
    donors = [read_source(view.source) for view in prompt.inspirations]
    pairs = [
        (slot, _function_text(donor, slot))
        for donor in donors
        if donor is not None
        for slot in SLOTS
        if slot in donor.functions and slot in source.functions
    ]
    pairs = [(slot, text) for slot, text in pairs if text != _function_text(source, slot)]
    if not pairs:
        return None
    slot, text = pairs[int(rng.integers(len(pairs)))]
    start, end = source.functions[slot]
    return source.hunk(start, end, text.split("\n"))


@dataclass(frozen=True, slots=True)
class MatmulMutation:
    """One named edit of a parent; None when it does not apply or the child would not parse."""

    kind: str
    edit: Callable[[Source, Prompt, np.random.Generator], str | None]

    def propose(self, prompt: Prompt, rng: np.random.Generator) -> str | None:
        source = read_source(prompt.parent.source)
        if source is None:
            return None
        return self.edit(source, prompt, rng)


def matmul_mutations() -> tuple[Mutation, ...]:
    return (
        MatmulMutation("hyperparameter", hyperparameter),
        MatmulMutation("optimiser", _swap("optimise")),
        MatmulMutation("rounding", _swap("finish")),
        MatmulMutation("loss_term", _named(LOSS_TERMS)),
        MatmulMutation("noise", _named(frozenset({"NOISE"}))),
        MatmulMutation("borrow", borrow),
    )
