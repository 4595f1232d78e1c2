"""Mutations of a KernelBench ``ModelNew`` for the simulated proposer: templates, rewrites, tuning.

- ``template``: the parent's forward computes a recognised pattern
  (:mod:`codevolve.problems.kernelbench.patterns`): the EVOLVE block gets Triton's imports, the
  template's kernels (:mod:`codevolve.problems.kernelbench.templates`) and a forward launching
  them; the parent's forward stays as ``forward_torch``, the fallback for inputs the kernels do
  not take, and ``__init__`` gets the template's once-only lines, if any. A pattern with several
  templates (a convolution) gets one of them, drawn at random. A parent that already holds a
  template is left to ``tune``.
- ``model``: a whole model that builds convolution modules and whose forward no pattern
  recognises (KernelBench Level 3's convolutional nets) behind cuDNN's settings: its algorithm
  search and the channels-last layout
  (:mod:`codevolve.problems.kernelbench.model_cudnn`); its forward kept whole as
  ``forward_torch``.
- ``fuse``: a Level-2 forward (a heavy library call, then elementwise operations and
  reductions) read as a chain (:mod:`codevolve.problems.kernelbench.chain`): library calls kept,
  each tail one fused Triton kernel (:mod:`codevolve.problems.kernelbench.fuse`).
- ``epilogue``: the same with a linear layer and its elementwise tail as one Triton matrix
  product (:mod:`codevolve.problems.kernelbench.epilogue`), the alternative to cuBLAS's.
- ``rewrite``: one pure-torch rewrite of the returned expression
  (:mod:`codevolve.problems.kernelbench.rewrites`: ``torch.diag(a) @ B`` as a broadcast product,
  ``torch.max(x, dim)[0]`` as ``amax``, the cat/narrow exclusive cumsum as ``cumsum(x) - x``, an
  elementwise chain as the fused built-in it equals); the forward's body becomes one ``return``.
- ``tune``: one tunable constant of a template (a line ``NAME = v  # tune: a|b|c``) to a
  neighbouring value of its list, or now and then to any value of it.

Programs are read with ``ast``, never run. Each edit is one hunk unique in the parent and inside
its EVOLVE block, and the child parses; a mutation that does not apply returns None.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

import numpy as np

from codevolve.core.diff import Hunk, unique_line_hunk
from codevolve.core.evolve_block import layout
from codevolve.core.problem import Mutation, TreeEdit, TreeMutation
from codevolve.core.prompt import Prompt
from codevolve.problems.kernelbench.chain import read_chain
from codevolve.problems.kernelbench.epilogue import with_epilogue
from codevolve.problems.kernelbench.forward import (
    Forward,
    body_statements,
    method,
    model_class,
    signature,
)
from codevolve.problems.kernelbench.fuse import fused_template, plan
from codevolve.problems.kernelbench.model_cudnn import model_template, read_conv_net
from codevolve.problems.kernelbench.patterns import recognise
from codevolve.problems.kernelbench.rewrites import replace, rewrites
from codevolve.problems.kernelbench.template_text import (
    FALLBACK_METHOD,
    IMPORTS,
    MARKER,
    TUNE,
    Template,
)
from codevolve.problems.kernelbench.templates import templates_for

KIND_WEIGHTS = {
    "template": 3.0,
    "fuse": 3.0,
    "epilogue": 2.0,
    "model": 2.0,
    "rewrite": 2.0,
    "tune": 3.0,
}
JUMP_SHARE = 0.25  # how often tune jumps to any listed value instead of a neighbour
MATVEC_SHARE = 0.5  # how often fuse keeps a product it could skip (matvec.py)
_TUNABLE = re.compile(
    r"^(?P<name>[A-Z_][A-Z0-9_]*) = (?P<value>-?\d+)\s+# tune: (?P<values>[-\d|]+)$"
)

Edit = Callable[[str, ast.Module, np.random.Generator], Hunk | None]  # one hunk or None


def _tree_edit(edit: Edit) -> TreeEdit:
    """``edit`` as a :class:`TreeMutation` calls it (these edits read no prompt)."""

    def tree_edit(
        source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
    ) -> tuple[Hunk, ...] | None:
        del prompt
        hunk = edit(source, tree, rng)
        return None if hunk is None else (hunk,)

    return tree_edit


def _region(source: str, first: int, last: int) -> tuple[int, int] | None:
    """The EVOLVE region (line indices ``[first, stop)``) holding lines ``first..last``."""
    region = layout(source).region_of_lines(first, last)
    return None if region is None else region.lines


def _holds_template(source: str) -> bool:
    return any(line.startswith(MARKER) for line in source.split("\n"))


def template(source: str, tree: ast.Module, rng: np.random.Generator) -> Hunk | None:
    """Replace the class ModelNew by the template's module text and a class launching it (one
    of the pattern's templates, drawn from ``rng`` where it has several)."""
    cls = model_class(tree)
    found = recognise(tree)
    if cls is None or found is None or _holds_template(source) or method(cls, FALLBACK_METHOD):
        return None
    options = templates_for(found.pattern, found.forward)
    built = options[int(rng.integers(len(options)))] if len(options) > 1 else options[0]
    return _class_hunk(source, cls, built, found.forward)


def model(source: str, tree: ast.Module, rng: np.random.Generator) -> Hunk | None:
    """A whole convolutional model behind cuDNN's settings
    (:mod:`codevolve.problems.kernelbench.model_cudnn`), the layout's starting value drawn from
    ``rng``; None for a forward a pattern recognises (``template`` proposes its kernels)."""
    cls = model_class(tree)
    if cls is None or _holds_template(source) or method(cls, FALLBACK_METHOD):
        return None
    forward = method(cls, "forward")
    found = signature(forward) if forward is not None else None
    net = read_conv_net(tree)
    if found is None or net is None or recognise(tree) is not None:
        return None
    built = model_template(net, found, channels_last=bool(rng.integers(2)))
    return _class_hunk(source, cls, built, found)


def fuse(source: str, tree: ast.Module, rng: np.random.Generator) -> Hunk | None:
    """A Level-2 forward (a library call and its tail) as library calls and fused kernels
    (:mod:`codevolve.problems.kernelbench.chain`); None where no kernel would be worth one. Where
    a sum over a linear layer's features can skip the product, it does so half the time: the
    sum's order changes, and the judge decides whether the reference's rounding allows it."""
    cls = model_class(tree)
    if cls is None or _holds_template(source) or method(cls, FALLBACK_METHOD):
        return None
    if recognise(tree) is not None:  # a Level-1 pattern: ``template`` proposes its kernel
        return None
    chain = read_chain(tree)
    if chain is None or not chain.kernels:
        return None
    planned = plan(chain)
    if planned != plan(chain, products=False) and rng.random() < MATVEC_SHARE:
        planned = plan(chain, products=False)
    return _class_hunk(source, cls, fused_template(planned), chain.forward)


def epilogue(source: str, tree: ast.Module, rng: np.random.Generator) -> Hunk | None:
    """The ``fuse`` proposal with a linear layer and its elementwise tail as one Triton matrix
    product (:mod:`codevolve.problems.kernelbench.epilogue`); None where there is no such pair."""
    del rng
    cls = model_class(tree)
    if cls is None or _holds_template(source) or method(cls, FALLBACK_METHOD):
        return None
    chain = read_chain(tree) if recognise(tree) is None else None
    found = with_epilogue(chain) if chain is not None else None
    if found is None:
        return None
    built = fused_template(plan(found.chain), found.tunables, found.text, found.kernel)
    return _class_hunk(source, cls, built, found.chain.forward)


def _class_hunk(source: str, cls: ast.ClassDef, built: Template, signature: Forward) -> Hunk | None:
    """The class replaced by ``built``'s module text and a class whose forward is ``built``'s,
    ``built``'s lines added at the end of ``__init__``, the parent's forward kept as the
    fallback."""
    forward = method(cls, "forward")
    init = method(cls, "__init__")
    if forward is None or (built.init and init is None):
        return None
    lines = source.split("\n")
    first, stop = _first_line(cls), cls.end_lineno or cls.lineno
    region = _region(source, first, stop - 1)
    if region is None:
        return None
    returns = f" -> {signature.returns_source}" if signature.returns_source else ""
    kept = _lines(lines, forward)
    head = forward.lineno - 1 - _first_line(forward)  # the ``def`` line, after any decorators
    kept[head] = kept[head].replace("def forward(", f"def {FALLBACK_METHOD}(", 1)
    members = [
        line
        for node in cls.body
        if node is not forward
        for line in [
            *_lines(lines, node),
            *(built.init.split("\n") if node is init and built.init else []),
            "",
        ]
    ]
    new = [
        *IMPORTS.rstrip("\n").split("\n"),
        "",
        *built.module.rstrip("\n").split("\n"),
        "",
        "",
        *[line for line in lines[first : _first_line(cls.body[0])] if line.strip()],
        *members,
        f"    def forward({signature.args_source}){returns}:",
        built.forward,
        "",
        "    # the parent's forward: the fallback for inputs the kernels do not take",
        *kept,
    ]
    return unique_line_hunk(source, start=first, end=stop, new_lines=new, region=region)


def _first_line(node: ast.stmt) -> int:
    """The 0-based first line of a statement, its decorators included."""
    decorators = getattr(node, "decorator_list", [])
    return (decorators[0].lineno if decorators else node.lineno) - 1


def _lines(lines: list[str], node: ast.stmt) -> list[str]:
    return lines[_first_line(node) : node.end_lineno or node.lineno]


def rewrite(source: str, tree: ast.Module, rng: np.random.Generator) -> Hunk | None:
    """One rewrite of forward's returned expression; the body becomes that one ``return``."""
    cls = model_class(tree)
    forward = method(cls, "forward") if cls is not None else None
    if forward is None:
        return None
    params = [a.arg for a in forward.args.args[1:]]
    expr, found = rewrites(forward, params)
    if not found:
        return None
    chosen = found[int(rng.integers(len(found)))]
    statements = body_statements(forward)
    if not statements:
        return None
    lines = source.split("\n")
    start, stop = statements[0].lineno - 1, statements[-1].end_lineno or statements[-1].lineno
    region = _region(source, start, stop - 1)
    if region is None:
        return None
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    new = [f"{indent}return {replace(expr, chosen.target, chosen.source)}"]
    return unique_line_hunk(source, start=start, end=stop, new_lines=new, region=region)


def tune(source: str, tree: ast.Module, rng: np.random.Generator) -> Hunk | None:
    """One tunable constant of a template moved within its listed values."""
    del tree
    if not _holds_template(source):
        return None
    lines = source.split("\n")
    spans = layout(source).regions
    tunables = [
        (index, match)
        for index, line in enumerate(lines)
        if (match := _TUNABLE.match(line)) is not None
        and any(r.first_line <= index < r.end_line for r in spans)
    ]
    if not tunables:
        return None
    index, match = tunables[int(rng.integers(len(tunables)))]
    values = [int(v) for v in match["values"].split("|") if v]
    current = int(match["value"])
    others = [v for v in values if v != current]
    if not others:
        return None
    if current not in values or rng.random() < JUMP_SHARE:
        value = others[int(rng.integers(len(others)))]
    else:
        at = values.index(current)
        steps = [values[i] for i in (at - 1, at + 1) if 0 <= i < len(values)]
        value = steps[int(rng.integers(len(steps)))]
    region = _region(source, index, index)
    if region is None:
        return None
    new_line = f"{match['name']} = {value}  {TUNE} {match['values']}"
    return unique_line_hunk(source, start=index, end=index + 1, new_lines=[new_line], region=region)


def kernel_mutations() -> tuple[Mutation, ...]:
    """The KernelBench moves, weighted for the simulated proposer; a child must parse."""
    return tuple(
        TreeMutation(kind, _tree_edit(edit), KIND_WEIGHTS[kind], check_child=True)
        for kind, edit in (
            ("template", template),
            ("model", model),
            ("fuse", fuse),
            ("epilogue", epilogue),
            ("rewrite", rewrite),
            ("tune", tune),
        )
    )
