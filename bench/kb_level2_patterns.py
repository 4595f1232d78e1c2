"""On which KernelBench Level-2 files do the simulated proposer's Level-2 moves apply?

Reads every ``NN_Name.py`` of a folder (never runs it), builds its initial program as
``codevolve kernelbench`` does, and reads the forward as a chain
(``problems/kernelbench/chain.py``): library calls kept, elementwise tails and reductions fused.
One line per file: what the ``fuse`` move makes of it (each fused kernel: its operations, and
``elementwise``, ``rows`` (a reduction over the last dimensions), ``channels`` (over a middle
dimension) or ``feature sum`` (a Linear's features summed as a matrix-vector product); the
convolution biases moved into a kernel), whether ``epilogue`` (a Linear and its tail as one
Triton product) applies, and what was kept as a library call or a torch call; then a summary.

    python3 bench/kb_level2_patterns.py --dir KernelBench/level2
"""

from __future__ import annotations

import argparse
import ast
import collections
import re
import sys
from pathlib import Path

from codevolve.problems.kernelbench.chain import read_chain
from codevolve.problems.kernelbench.chain_steps import Chain, Launch, Let
from codevolve.problems.kernelbench.chain_values import Kernel
from codevolve.problems.kernelbench.epilogue import with_epilogue
from codevolve.problems.kernelbench.format import KernelProblemError, read_problem
from codevolve.problems.kernelbench.fuse import plan
from codevolve.problems.kernelbench.patterns import recognise

_CALL = re.compile(r"^\w+ = (?:self\.(\w+)|([\w.]+))\(")


def shape_of(kernel: Kernel) -> str:
    """How a kernel walks its main tensor."""
    if not kernel.reductions:
        return "elementwise"
    rows = kernel.rank is not None and kernel.axes[-1] == kernel.rank - 1
    kinds = "+".join(sorted({r.kind for r in kernel.reductions}))
    return f"{'rows' if rows else 'channels'}:{kinds}"


def kept_calls(chain: Chain, kinds: dict[str, str]) -> list[str]:
    """The library and torch calls kept as written (a module by its class)."""
    found = []
    for step in chain.steps:
        if not isinstance(step, Let) or "feature_sum(" in step.text:
            continue
        match = _CALL.match(step.text)
        if step.kind:
            found.append(step.kind)
        elif match and match.group(1):
            found.append(kinds.get(match.group(1), match.group(1)))
        elif match:
            found.append(match.group(2).rsplit(".", 1)[-1])
        else:
            found.append(step.text.split(" = ", 1)[-1][:24])
    return found


def describe(path: Path) -> tuple[str, set[str], list[str]]:
    """The file's line, the patterns that apply, and the calls kept."""
    try:
        program = read_problem(path.read_text(), name=path.stem).initial_program
    except KernelProblemError as error:
        return f"not in the format: {error}", set(), []
    tree = ast.parse(program)
    if recognise(tree) is not None:
        return "a Level-1 pattern (template)", {"template"}, []
    chain = read_chain(tree)
    if chain is None:
        return "no forward", set(), []
    planned = plan(chain)
    kinds = _module_kinds(tree)
    kept = kept_calls(planned, kinds)
    patterns: set[str] = set()
    parts = []
    for step in planned.steps:
        if isinstance(step, Let) and "feature_sum(" in step.text:
            parts.append("feature sum")
            patterns.add("feature sum")
        if isinstance(step, Launch):
            kernel = step.kernel
            shape = shape_of(kernel)
            patterns.add(shape.split(":")[0])
            folded = any("channel_bias(" in o.source for o in kernel.operands)
            patterns |= {"conv bias folded"} if folded else set()
            parts.append(f"{shape}({kernel.ops} ops{', +bias' if folded else ''})")
    if parts:
        patterns.add("fuse")
    if with_epilogue(chain) is not None:
        patterns.add("epilogue")
    line = ("fuse: " + ", ".join(parts)) if parts else "no kernel"
    line += "; epilogue" if "epilogue" in patterns else ""
    line += f"; kept: {', '.join(kept)}" if kept else ""
    line += f"; assumes {', '.join(planned.guards)}" if chain.guards else ""
    return line, patterns, kept


def _module_kinds(tree: ast.Module) -> dict[str, str]:
    kinds = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(target := node.targets[0], ast.Attribute)
            and isinstance(node.value, ast.Call)
        ):
            kinds[target.attr] = ast.unparse(node.value.func).rsplit(".", 1)[-1]
    return kinds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="a folder of NN_Name.py files")
    args = parser.parse_args()
    files = sorted(
        (p for p in args.dir.glob("*.py") if re.match(r"^\d+_", p.name)),
        key=lambda p: int(p.name.split("_")[0]),
    )
    if not files:
        print(f"no NN_Name.py files in {args.dir}", file=sys.stderr)
        return 2
    counts: collections.Counter[str] = collections.Counter()
    kept_in_unfused: collections.Counter[str] = collections.Counter()
    for path in files:
        line, patterns, kept = describe(path)
        counts.update(patterns)
        if "fuse" not in patterns:
            kept_in_unfused.update(set(kept))
        print(f"{path.stem[:52]:52}  {line}")
    total = len(files)
    print(f"\nover {total} files:")
    for name, what in (
        ("fuse", "fuse applies (at least one fused kernel)"),
        ("elementwise", "  an elementwise tail kernel"),
        ("rows", "  a reduction over the last dimensions (softmax, logsumexp, sum, mean, max...)"),
        ("channels", "  a reduction over a middle dimension (a convolution's channels)"),
        ("feature sum", "  a Linear's features summed as a matrix-vector product"),
        ("conv bias folded", "  a convolution's bias added by the kernel"),
        ("epilogue", "epilogue applies (a Linear and its tail as one Triton product)"),
        ("template", "a Level-1 template applies instead"),
    ):
        print(f"  {counts[name]:3d}  {what}")
    print(f"  {total - counts['fuse'] - counts['template']:3d}  no move applies; calls kept there:")
    for call, count in kept_in_unfused.most_common():
        print(f"         {count:3d}  {call}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
