"""What the simulated proposer can touch in a folder of KernelBench problems (Level 3: models).

For each file:

- the format check (``format.py``, as ``codevolve kernelbench`` reads the file): accepted, or
  its one-line reason;
- the moves that apply to the initial program (each asked with several generator seeds): the
  templates by name (``template``: a Level-1 pattern; ``model``: the whole model behind cuDNN's
  settings), the ``rewrite`` names, and ``tune`` with the constants of those children it moves;
- the model's ``torch.nn`` module kinds, counted in the reference ``Model`` built on meta
  tensors (no memory, no forward run; where that fails, the constructor calls in the source),
  each with what an applicable proposal does to it, or ``none``; beside ``none``, the templates
  the proposer has for that module alone (a forward that is nothing but that module, as in
  Level 1), ``-`` where it has none;
- the torch functions (and ``@``) the file's ``forward`` methods call, read with ``ast``.

Then the summary over the folder: files accepted and refused (grouped by reason), files with at
least one applicable proposal, files per move and template, module kinds over the folder.

    PYTHONPATH=src python bench/kb_level3_reach.py --dir KernelBench --level 3

Reads the problem files (the user's own trusted code) and runs their ``Model.__init__`` and
``get_init_inputs`` under ``torch.device("meta")``; nothing runs a forward.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from codevolve.core.diff import Applied
from codevolve.core.errors import ConfigError
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.kernelbench.calls import canonical_call, dotted
from codevolve.problems.kernelbench.format import KernelProblemError, read_problem
from codevolve.problems.kernelbench.forward import callee, init_calls, method, model_class
from codevolve.problems.kernelbench.mutations import kernel_mutations
from codevolve.problems.kernelbench.patterns import recognise
from codevolve.problems.kernelbench.rewrites import rewrites
from codevolve.problems.kernelbench.template_text import MARKER
from codevolve.problems.kernelbench.templates import templates_for
from codevolve.prompt_sampler.search_replace import apply_answer
from codevolve.services.cli.kernelbench import problem_files, problem_folder

MOVES = {m.kind: m for m in kernel_mutations()}
SEEDS = range(4)  # generator draws per move, until one gives a child
CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}
CONVS = {f"Conv{t}{d}d" for d in (1, 2, 3) for t in ("", "Transpose")}
TUNABLE = re.compile(r"^([A-Z_][A-Z0-9_]*) = -?\d+\s+# tune:", re.MULTILINE)
ALONE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = nn.{kind}()

    def forward(self, x):
        return self.m(x)
"""


@dataclass
class Reach:
    """One file: the format check's verdict, the moves that apply, what they touch."""

    name: str
    refused: str = ""  # the format check's reason; "" when accepted
    moves: dict[str, list[str]] = field(default_factory=dict)  # move -> template/rewrite names
    modules: Counter[str] = field(default_factory=Counter)
    census: str = "built on meta"  # how ``modules`` was counted
    ops: Counter[str] = field(default_factory=Counter)
    touched: dict[str, list[str]] = field(default_factory=dict)  # module kind or op -> names


def child(initial: str, kind: str) -> str | None:
    """A child of ``initial`` by the move ``kind`` (the first of the seeds that gives one)."""
    parent = ProgramView(id="initial", source=initial, score=1.0)
    prompt = Prompt("bench", "kernelbench", 0, 0, parent, (), {}, context="", text="")
    for seed in SEEDS:
        answer = MOVES[kind].propose(prompt, np.random.default_rng(seed))
        applied = apply_answer(initial, answer) if answer is not None else None
        if isinstance(applied, Applied):
            return applied.source
    return None


def read_moves(initial: str, reach: Reach) -> None:
    """The moves that apply to ``initial`` and the module kinds or operations they touch."""
    tree = ast.parse(initial)
    cls = model_class(tree)
    found = recognise(tree)
    tunables: set[str] = set()
    if found is not None and cls is not None and child(initial, "template") is not None:
        # the move draws one template per proposal: all of the pattern's, by name
        options = templates_for(found.pattern, found.forward)
        reach.moves["template"] = [t.name for t in options]
        tunables.update(name for t in options for name in TUNABLE.findall(t.module))
        # what the template computes: the modules the forward calls (a convolution, a pooling,
        # a loss module), else the forward's expression
        calls = init_calls(cls)
        forward = method(cls, "forward")
        called = {
            callee(calls[n.func.attr])
            for n in ast.walk(forward or cls)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and dotted(n.func.value) == "self"
            and n.func.attr in calls
        }
        for what in called or {"forward's expression"}:
            reach.touched.setdefault(what, []).extend(reach.moves["template"])
    whole = child(initial, "model")
    if whole is not None:
        marker = next(line for line in whole.split("\n") if line.startswith(MARKER))
        reach.moves["model"] = [marker.split()[2]]
        tunables.update(TUNABLE.findall(whole))
        for kind in CONVS & set(reach.modules):
            reach.touched.setdefault(kind, []).extend(reach.moves["model"])
    forward = method(cls, "forward") if cls is not None else None
    if forward is not None:
        names = [r.name for r in rewrites(forward, [a.arg for a in forward.args.args[1:]])[1]]
        if names:
            reach.moves["rewrite"] = names
            reach.touched.setdefault("forward's expression", []).extend(names)
    if tunables:
        reach.moves["tune"] = sorted(tunables)


def count_modules(path: Path, source: str, reach: Reach) -> None:
    """``torch.nn`` module kinds of the reference built on meta tensors; where it cannot be
    built, its constructor calls in the source."""
    try:
        spec = importlib.util.spec_from_file_location(f"kb_reach_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        problem = importlib.util.module_from_spec(spec)
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            spec.loader.exec_module(problem)
            model = problem.Model(*problem.get_init_inputs())
    except Exception as error:  # noqa: BLE001 (the user's file: a failure is a result)
        reach.census = f"in the source, not built ({type(error).__name__}: {first_line(error)})"
        try:
            tree = ast.parse(source)
        except SyntaxError:
            reach.census = "not read: the file does not parse"
            return
        calls = [dotted(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
        reach.modules = Counter(
            name.rsplit(".", 1)[-1]
            for name in calls
            if re.match(r"(torch\.)?nn\.[A-Z]\w*$", name) and is_module(name.rsplit(".", 1)[-1])
        )
        return
    reach.modules = Counter(
        type(m).__name__
        for m in model.modules()
        if type(m).__module__.startswith("torch.nn.") and type(m).__name__ not in CONTAINERS
    )


def count_ops(source: str, reach: Reach) -> None:
    """torch functions and ``@`` in the ``forward`` methods of the file's classes."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    forwards = [
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "forward"
    ]
    for forward in forwards:
        for node in ast.walk(forward):
            if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.MatMult):
                reach.ops["@"] += 1
            elif isinstance(node, ast.Call) and dotted(node.func).split(".")[0] in ("torch", "F"):
                call = canonical_call(node)
                reach.ops[call.name if call is not None else dotted(node.func)] += 1


def alone(kind: str, cache: dict[str, str] = {}) -> str:  # noqa: B006  (a memo)
    """The templates the proposer has for a forward that is one module of ``kind``."""
    if kind not in cache:
        found = recognise(ast.parse(ALONE.format(kind=kind)))
        names = (
            [] if found is None else [t.name for t in templates_for(found.pattern, found.forward)]
        )
        cache[kind] = ", ".join(names) or "-"
    return cache[kind]


def is_module(name: str) -> bool:
    """``torch.nn.<name>`` is a module kind (not a container, not ``Parameter``)."""
    kind = getattr(torch.nn, name, None)
    return isinstance(kind, type) and issubclass(kind, torch.nn.Module) and name not in CONTAINERS


def first_line(error: BaseException) -> str:
    text = str(error).strip().split("\n")[0]
    return text if len(text) <= 100 else text[:97] + "..."


def reach_of(path: Path) -> Reach:
    source = path.read_text(encoding="utf-8")
    reach = Reach(path.stem)
    count_modules(path, source, reach)
    count_ops(source, reach)
    try:
        initial = read_problem(source, name=path.stem).initial_program
    except KernelProblemError as error:
        reach.refused = str(error).split("\n")[0].removeprefix(path.stem).lstrip(",: ")
        return reach
    read_moves(initial, reach)
    return reach


def show(reach: Reach) -> None:
    print(f"{reach.name}: " + (f"refused: {reach.refused}" if reach.refused else "accepted"))
    moves = "; ".join(f"{kind} ({', '.join(names)})" for kind, names in reach.moves.items())
    print(f"  moves: {moves or 'none'}")
    parts = []
    for kind, count in reach.modules.most_common():
        names = reach.touched.get(kind)
        parts.append(
            f"{kind} x{count}: " + (", ".join(names) if names else f"none (alone: {alone(kind)})")
        )
    print(f"  modules, {reach.census}: " + ("; ".join(parts) or "none"))
    ops = "; ".join(f"{op} x{count}" for op, count in reach.ops.most_common())
    expression = reach.touched.get("forward's expression")
    touched = f" (touched: {', '.join(expression)})" if expression else ""
    print(f"  ops in forward: {ops or 'none'}{touched}")


def summary(reaches: list[Reach]) -> None:
    refused: dict[str, list[str]] = {}
    for r in reaches:
        if r.refused:
            reason = re.sub(r"line \d+: ", "", r.refused)
            reason = re.sub(r"the class \w+", "a helper class", reason)
            reason = re.sub(r"imports '\w+'", "imports a module", reason)
            reason = re.sub(r"does not parse: .*", "does not parse", reason)
            refused.setdefault(reason, []).append(number(r.name))
    accepted = [r for r in reaches if not r.refused]
    touched = [r for r in accepted if r.moves]
    print(f"\n{len(reaches)} files; accepted by the format check: {len(accepted)}")
    for reason, numbers in refused.items():
        print(f"  refused ({len(numbers)}: {' '.join(numbers)}): {reason}")
    print(
        f"with at least one applicable proposal: {len(touched)}: "
        + " ".join(number(r.name) for r in touched)
    )
    for kind in MOVES:
        files = [r for r in accepted if kind in r.moves]
        names = Counter(name for r in files for name in r.moves[kind])
        detail = ", ".join(f"{name} {n}" for name, n in sorted(names.items()))
        print(
            f"  {kind}: {len(files)} files" + (f" ({detail})" if detail and kind != "tune" else "")
        )
    unbuilt = [number(r.name) for r in reaches if not r.census.startswith("built")]
    print(
        "module kinds over the folder: instances in the models built on meta (constructor calls"
        f" in the source of {' '.join(unbuilt) or 'none'}), files, files where a proposal"
        " touches them, the templates for that module alone:"
    )
    totals: Counter[str] = Counter()
    files: Counter[str] = Counter()
    touching: Counter[str] = Counter()
    for r in reaches:
        totals.update(r.modules)
        files.update(set(r.modules))
        touching.update(kind for kind in r.modules if r.touched.get(kind))
    for kind, count in totals.most_common():
        print(
            f"  {kind}: {count} in {files[kind]} files; touched in {touching[kind]}"
            f" (alone: {alone(kind)})"
        )


def number(name: str) -> str:
    found = re.match(r"(\d+)_", name)
    return found.group(1) if found else name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="a KernelBench checkout or folder")
    parser.add_argument("--level", type=int, default=3, help="its levelN/ folder (default 3)")
    args = parser.parse_args()
    try:
        paths = problem_files(problem_folder(args.dir, args.level), None)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    reaches = []
    for path in paths:
        reach = reach_of(path)
        show(reach)
        reaches.append(reach)
    summary(reaches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
