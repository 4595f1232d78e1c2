"""The static check of a kernel program: what reading the source (never running it) can refuse.

A kernel program runs in the GPU worker's device process, beside the harness that judges it
(evaluator_workers/gpu/source_loader.py restricts its builtins and imports there). This check
runs first, on any CPU worker, and refuses the known ways to look fast without computing
(KernelBench's and METR's catalogues, research/gemm_gpu.md section 3):

- calling a library instead of a kernel: no ``torch`` import, no ``@`` operator, no ``matmul``,
  ``mm``, ``linear``, ``einsum`` or ``copy_`` attribute anywhere;
- work the timer cannot see: no streams, events, synchronisation, threads or processes (only
  Triton and ``math`` may be imported; ``Stream``, ``stream``, ``synchronize``, ``Event`` are
  refused as attribute names);
- reaching the harness: no private or dunder names (``x.__class__``, ``_sleep``), no ``getattr``,
  ``eval``, ``exec``, ``open``, ``globals``; no ``global`` or ``nonlocal`` state, no classes;
  Triton's runtime, driver, knobs, compiler and autotuner are off limits (``triton.<attr>`` only
  for :data:`TRITON_ATTRIBUTES`), and inline assembly (a timer read) is refused;
- host code (functions that are not ``@triton.jit`` kernels) reads only shapes and strides of
  the tensors it is given (:data:`TENSOR_ATTRIBUTES`);
- nothing runs at import: the module holds imports, functions and constant assignments.

What static reading cannot see (a wrong result, work off the stream, caching, a hang) the
harness catches on the GPU.
"""

from __future__ import annotations

import ast

from codevolve.core.pysource import parse_python
from codevolve.problems.gemm_kernel_gpu.kernel_source import ENTRY_POINT, evolve_region

ENTRY_PARAMS = ("x", "w", "y", "workspace", "num_sms")
ALLOWED_IMPORTS = frozenset({"math", "triton", "triton.language", "triton.tools.tensor_descriptor"})
TRITON_ATTRIBUTES = frozenset({"jit", "cdiv", "next_power_of_2", "language", "tools"})
TENSOR_ATTRIBUTES = frozenset({
    "shape", "stride", "size", "dtype", "numel", "is_contiguous", "element_size", "from_tensor",
    "is_cuda",
})  # fmt: skip
MODULE_NAMES = frozenset({"triton", "tl", "math", "TensorDescriptor"})  # roots of module attrs
DENIED_ATTRIBUTES = frozenset(
    {
        "matmul", "mm", "bmm", "addmm", "linear", "einsum", "copy_", "clone",
        "Stream", "stream", "synchronize", "Event", "wait_stream", "record_stream",
        "inline_asm_elementwise", "extra", "autotune", "heuristics", "runtime", "driver",
        "knobs", "compiler", "testing", "set_allocator",
    }
)  # fmt: skip
DENIED_NAMES = frozenset(
    {
        "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals",
        "vars", "breakpoint", "input", "type", "object", "super", "id", "dir", "memoryview",
        "print", "exit", "quit", "help", "torch",
    }
)  # fmt: skip
_REFUSED_NODES: dict[type[ast.AST], str] = {
    ast.ClassDef: "a class",
    ast.Global: "a global statement",
    ast.Nonlocal: "a nonlocal statement",
    ast.Try: "a try statement (a fallback path)",
    ast.With: "a with statement",
    ast.AsyncFunctionDef: "an async function",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Delete: "del",
}


def check_source(source: str) -> str:
    """Why ``source`` is refused, as one line naming the line number; "" when it passes."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError) as exc:
        return f"the program does not parse: {exc}"
    if evolve_region(source) is None:
        return "the program needs exactly one EVOLVE-BLOCK-START / EVOLVE-BLOCK-END pair"
    for check in (_module_level, _entry_point, _nodes):
        problem = check(tree)
        if problem:
            return problem
    return ""


def is_kernel(function: ast.FunctionDef) -> bool:
    """Decorated with ``triton.jit`` (called or not)."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) == "triton.jit":
            return True
    return False


def _module_level(tree: ast.Module) -> str:
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                if name not in ALLOWED_IMPORTS or relative:
                    return f"line {node.lineno}: import of {name!r}: only Triton and math"
        elif not _allowed_at_module_level(node):
            return f"line {node.lineno}: only imports, functions and constants at module level"
    if not any(isinstance(n, ast.FunctionDef) and is_kernel(n) for n in tree.body):
        return "the program defines no @triton.jit kernel"
    return ""


def _allowed_at_module_level(node: ast.stmt) -> bool:
    if isinstance(node, ast.FunctionDef):
        return True
    return isinstance(node, ast.Assign | ast.Expr) and _constant(node.value)


def _constant(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Tuple | ast.List):
        return all(_constant(e) for e in node.elts)
    return isinstance(node, ast.UnaryOp) and _constant(node.operand)


def _entry_point(tree: ast.Module) -> str:
    entry = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == ENTRY_POINT), None
    )
    if entry is None:
        return f"the program defines no function {ENTRY_POINT}({', '.join(ENTRY_PARAMS)})"
    params = tuple(a.arg for a in entry.args.args)
    if params != ENTRY_PARAMS or entry.args.vararg or entry.args.kwarg or entry.args.kwonlyargs:
        wanted = ", ".join(ENTRY_PARAMS)
        return f"line {entry.lineno}: {ENTRY_POINT} must take exactly ({wanted})"
    if is_kernel(entry):
        return f"line {entry.lineno}: {ENTRY_POINT} is the host launcher, not a kernel"
    return ""


def _nodes(tree: ast.Module) -> str:
    kernel_lines: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and is_kernel(node):
            kernel_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    for found in ast.walk(tree):
        problem = _node_problem(found, in_kernel=getattr(found, "lineno", 0) in kernel_lines)
        if problem:
            return f"line {getattr(found, 'lineno', '?')}: {problem}"
    return ""


def _node_problem(node: ast.AST, *, in_kernel: bool) -> str:
    refused = _REFUSED_NODES.get(type(node))
    if refused:
        return f"{refused} is not allowed"
    if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.MatMult):
        return "the @ operator calls a library matmul: write the kernel"
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            return f"name {node.id!r}: private and dunder names are not allowed"
        if node.id in DENIED_NAMES:
            return f"name {node.id!r} is not allowed in a kernel program"
    if isinstance(node, ast.Attribute):
        return _attribute_problem(node, in_kernel=in_kernel)
    return ""


def _attribute_problem(node: ast.Attribute, *, in_kernel: bool) -> str:
    name = node.attr
    if name.startswith("_"):
        return f"attribute {name!r}: private and dunder names are not allowed"
    if name in DENIED_ATTRIBUTES:
        return f"attribute {name!r} is not allowed in a kernel program"
    root = node.value
    if isinstance(root, ast.Name) and root.id == "triton" and name not in TRITON_ATTRIBUTES:
        return f"triton.{name}: only triton.{', triton.'.join(sorted(TRITON_ATTRIBUTES))}"
    if in_kernel or _module_path(root):
        return ""
    if name not in TENSOR_ATTRIBUTES:
        allowed = ", ".join(sorted(TENSOR_ATTRIBUTES))
        return f"attribute {name!r} in host code: only {allowed} (and Triton's own names)"
    return ""


def _module_path(node: ast.expr) -> bool:
    """``triton``, ``tl``, ``math``, ``TensorDescriptor`` or an attribute chain from them."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in MODULE_NAMES
