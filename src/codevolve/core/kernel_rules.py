"""The source rules of KernelBench-format problems, read from the AST (the code never runs here).

A KernelBench candidate is a program defining ``class ModelNew(nn.Module)`` that must compute
what the user's reference ``Model`` computes, faster. It runs in the device process beside the
trusted judge (the KernelBench plug-in's device code), so it gets torch itself: these rules
close the ways out of that namespace and the known reward hacks that reading can see
(KernelBench's and Sakana's catalogues: a side stream the timer misses, a fallback to the
reference, a seeded RNG that predicts the inputs, a monkeypatched torch function, a global
switch that lowers the reference's precision too). What reading cannot see (caching, a wrong
result, writes into the inputs, a thread) the judge catches by running it.

:func:`check_model_new` is used twice: by the problem's static stage on a CPU worker, and by the
device process's loader before the program is executed. :func:`check_reference` guards the
user's own (trusted) reference file against accidents only: it is not a security boundary.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from codevolve.core.pysource import parse_python

CANDIDATE_CLASS = "ModelNew"
REFERENCE_CLASS = "Model"
INPUTS = "get_inputs"  # the reference's function giving forward's arguments
INIT_INPUTS = "get_init_inputs"  # the reference's function giving __init__'s arguments
REFERENCE_FUNCTIONS = (INPUTS, INIT_INPUTS)

# What a candidate may import (any ``import x as y`` / ``from x import y`` of these): torch for
# tensors, Triton for kernels, math for constants. Stops the direct ways to the OS, the
# interpreter and the judge (os, sys, ctypes, threading, inspect, gc, importlib).
ALLOWED_IMPORTS = ("torch", "torch.nn", "torch.nn.functional", "triton", "triton.language", "math")

# Names that leave the namespace (code from strings, reflection, files, the builtins) or reach
# the reference's own class (``Model``: calling the reference is not a kernel). A function's own
# parameter of one of these names (``def forward(self, input)``) is a local and is allowed.
DENIED_NAMES = (
    "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "__import__", "breakpoint", "input", "type", "memoryview", REFERENCE_CLASS,
)  # fmt: skip

# Work the judge's CUDA events cannot see: a side stream, an event to wait on, a graph that
# replays work captured earlier.
STREAM_ATTRIBUTES = (
    "Stream", "stream", "streams", "current_stream", "set_stream", "default_stream",
    "ExternalStream", "Event", "synchronize", "wait_stream", "record_stream", "CUDAGraph",
    "graph", "graphs", "make_graphed_callables",
)  # fmt: skip

# Predicting the inputs: the judge draws them from torch's global RNG (KernelBench's
# get_inputs); a candidate that seeds, saves or reads it can regenerate them and return an
# answer computed ahead of time.
RNG_ATTRIBUTES = (
    "manual_seed", "manual_seed_all", "seed", "initial_seed", "set_rng_state", "get_rng_state",
    "set_rng_state_all", "get_rng_state_all", "fork_rng", "Generator",
)  # fmt: skip

# Global switches that change the reference's results or timing too (TF32, default dtype, grad
# mode, denormals, the allocator), and code the rules cannot read (torch.compile, TorchScript,
# custom op libraries, C++ extensions, torch.fx codegen, torch internals, Triton's runtime).
SWITCH_ATTRIBUTES = (
    "compile", "jit", "library", "cpp_extension", "load_inline", "backends", "set_default_dtype",
    "set_flush_denormal", "utils", "_C", "_dynamo", "set_default_device",
    "set_default_tensor_type", "set_float32_matmul_precision", "set_grad_enabled",
    "use_deterministic_algorithms", "set_num_threads", "set_num_interop_threads", "overrides",
    "compiler", "fx", "export", "onnx", "profiler", "load_library", "cudart",
    "change_current_allocator", "CUDAPluggableAllocator", "MemPool", "use_mem_pool",
    "set_per_process_memory_fraction", "knobs", "runtime", "driver",
)  # fmt: skip

# The one switch a candidate may set: cuDNN's algorithm search (``torch.backends.cudnn.benchmark
# = ...``: each shape's first call times cuDNN's algorithms and keeps the fastest). It changes
# which algorithm the candidate's own process runs, never the precision its output is held to;
# the candidate runs in a process of its own, so the reference never sees it. Only an assignment
# to exactly this name is taken: any other read or write under ``backends`` is refused.
ALLOWED_SWITCHES = ("torch.backends.cudnn.benchmark",)

# Modules that torch's own namespaces re-export (``torch.os``, ``torch.sys``, ``F.np``,
# ``torch.cuda.threading``, ...) and the functions they carry: a way to the OS, the interpreter,
# files, other threads and processes, attribute access by string, and ``suppress`` (a try/except
# in disguise).
ESCAPE_ATTRIBUTES = (
    "os", "sys", "builtins", "ctypes", "importlib", "inspect", "subprocess", "threading",
    "multiprocessing", "mp", "python_multiprocessing", "concurrent", "gc", "io", "pickle",
    "shutil", "socket", "signal", "pathlib", "tempfile", "glob", "types", "weakref", "operator",
    "functools", "contextlib", "pkgutil", "runpy", "marshal", "atexit", "linecache",
    "traceback", "unittest", "platform", "code", "dis", "ast", "tokenize", "copyreg", "logging",
    "time", "np", "numpy", "tarfile", "zipfile", "gzip", "Thread", "Process", "Pool", "patch",
    "attrgetter", "methodcaller", "import_module", "getattr_static", "currentframe",
    "FunctionType", "CodeType", "ModuleType", "Path", "suppress", "ExitStack", "c_void_p",
    "from_address", "from_buffer", "load", "save", "from_file", "fromfile", "tofile", "dump",
    "hub", "package", "distributed",
)  # fmt: skip

# Names refused on torch but needed on Triton: ``triton.jit`` (``torch.jit`` is TorchScript)
# and ``tl.load`` (``torch.load`` unpickles a file).
TRITON_ONLY_ATTRIBUTES = ("jit", "load")

_DENIED_ATTRIBUTES = frozenset(
    STREAM_ATTRIBUTES + RNG_ATTRIBUTES + SWITCH_ATTRIBUTES + ESCAPE_ATTRIBUTES
)
_REFUSED_NODES: dict[type[ast.AST], str] = {
    ast.Try: "a try statement (a kernel that fails must fail; a try/except could fall back to "
    "the reference)",
    ast.TryStar: "a try statement (a kernel that fails must fail)",
    ast.Global: "a global statement (state kept across calls)",
    ast.Nonlocal: "a nonlocal statement (state kept across calls)",
    ast.AsyncFunctionDef: "an async function",
    ast.Await: "await",
    ast.AsyncFor: "async for",
    ast.AsyncWith: "async with",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Match: "a match statement (class patterns read attributes by name)",
}
_REFERENCE_MODULES = ("torch", "math", "numpy", "random")  # and torch.* submodules
_REFERENCE_DENIED_NAMES = frozenset({"eval", "exec", "open", "__import__", "compile"})


def check_model_new(source: str) -> str:
    """Why the candidate ``source`` is refused, as one line naming the line; "" if it passes."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError) as exc:
        return f"the program does not parse: {exc}"
    modules, problem = _import_bindings(tree)
    if problem:
        return problem
    rules = _CandidateRules(modules, _class_names(tree), _permitted_class_uses(tree))
    rules.visit(tree)
    if rules.problems:
        return rules.problems[0]
    return _entry_problem(tree, CANDIDATE_CLASS)


def check_reference(source: str) -> str:
    """Why the user's reference ``source`` cannot be judged against, or "".

    The reference is the user's own trusted code, run with normal builtins: this catches
    accidents (a missing function, a stray import), not attacks.
    """
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError) as exc:
        return f"the reference does not parse: {exc}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for module in _imported_modules(node):
                if module.split(".")[0] not in _REFERENCE_MODULES:
                    allowed = "torch, math, numpy and random only"
                    return f"line {node.lineno}: the reference imports {module!r} ({allowed})"
        if isinstance(node, ast.Name) and node.id in _REFERENCE_DENIED_NAMES:
            return f"line {node.lineno}: the reference uses {node.id!r}"
    problem = _entry_problem(tree, REFERENCE_CLASS)
    if problem:
        return problem
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [name for name in REFERENCE_FUNCTIONS if name not in defined]
    if missing:
        return f"the reference defines no function {missing[0]!r}"
    return ""


def _entry_problem(tree: ast.Module, class_name: str) -> str:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            if any(isinstance(s, ast.FunctionDef) and s.name == "forward" for s in node.body):
                return ""
            return f"line {node.lineno}: class {class_name} has no forward method"
    return f"the program defines no class {class_name} at module level"


def _imported_modules(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    else:
        yield "." * node.level + (node.module or "")


def _import_bindings(tree: ast.Module) -> tuple[dict[str, str], str]:
    """The local names imports bind, each to the module (or module attribute) it names; or why
    an import is refused."""
    bound: dict[str, str] = {}
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in imports:
        pairs: list[tuple[str, str]] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    return {}, _import_refusal(node, alias.name)
                local = alias.asname or alias.name.split(".")[0]
                pairs.append((local, alias.name if alias.asname else local))
        else:
            module = "." * node.level + (node.module or "")
            if module not in ALLOWED_IMPORTS:
                return {}, _import_refusal(node, module)
            for alias in node.names:
                if alias.name == "*":
                    return {}, f"line {node.lineno}: 'from {module} import *' (name what you use)"
                why = _attribute_refusal(alias.name, module)
                if why:
                    return {}, f"line {node.lineno}: imports {alias.name!r} from {module}: {why}"
                pairs.append((alias.asname or alias.name, f"{module}.{alias.name}"))
        for local, target in pairs:
            if _is_dunder(local) or local in DENIED_NAMES:
                return {}, f"line {node.lineno}: an import binds the name {local!r}"
            if bound.get(local, target) != target:
                return {}, f"line {node.lineno}: {local!r} names two modules"
            bound[local] = target
    return bound, ""


def _import_refusal(node: ast.stmt, module: str) -> str:
    allowed = ", ".join(ALLOWED_IMPORTS)
    return f"line {node.lineno}: import of {module!r} is not allowed (only {allowed})"


def _attribute_refusal(name: str, base_module: str | None) -> str:
    """Why the attribute ``name`` (of ``base_module`` when known) is refused, or ""."""
    if name in TRITON_ONLY_ATTRIBUTES and base_module and base_module.startswith("triton"):
        return ""
    if name.startswith("register_") and "hook" in name:
        return "hooks run code inside other modules' calls"
    if name in _DENIED_ATTRIBUTES:
        return _denied_reason(name)
    if name.startswith("_"):
        return "private and dunder attributes are not allowed"
    return ""


def _denied_reason(name: str) -> str:
    if name in STREAM_ATTRIBUTES:
        return "streams, events and graphs do work the judge's timer cannot see"
    if name in RNG_ATTRIBUTES:
        return "seeding or reading the RNG predicts the judge's inputs"
    if name in SWITCH_ATTRIBUTES:
        return "a global switch, compiled or loaded code, or torch internals"
    return "it reaches the OS, the interpreter, files or other threads"


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _class_names(tree: ast.Module) -> frozenset[str]:
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef))


def _permitted_class_uses(tree: ast.Module) -> frozenset[int]:
    """The ids of Name nodes where a class may be named: called (``Helper(...)``), as a base,
    as ``super``'s first argument, as ``isinstance``'s second. Anywhere else (``ModelNew.f``,
    ``c = Helper``) a method could be called with a module as its ``self`` and assign into it."""
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            allowed.update(id(base) for base in node.bases)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            allowed.add(id(node.func))
            if node.func.id == "super" and node.args:
                allowed.add(id(node.args[0]))
            if node.func.id == "isinstance" and len(node.args) == 2:
                second = node.args[1]
                items = second.elts if isinstance(second, ast.Tuple) else [second]
                allowed.update(id(item) for item in items)
    return frozenset(allowed)


@dataclass(slots=True)
class _Scope:
    """A function being read: its parameters, and whether its first one is the instance."""

    params: frozenset[str]
    instance: str | None = None  # the first parameter of an undecorated method


@dataclass
class _CandidateRules(ast.NodeVisitor):
    """Reads a candidate in source order, collecting the rules it breaks (the first is shown)."""

    modules: dict[str, str]  # local name -> the module an import bound it to
    classes: frozenset[str]
    class_uses: frozenset[int]
    problems: list[str] = field(default_factory=list)
    scopes: list[_Scope] = field(default_factory=list)

    def refuse(self, node: ast.AST, text: str) -> None:
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {text}")

    def generic_visit(self, node: ast.AST) -> None:
        reason = _REFUSED_NODES.get(type(node))
        if reason:
            self.refuse(node, reason)
        super().generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        del node  # checked with every binding by _import_bindings

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        del node

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._binding(node, node.name)
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        for statement in node.body:
            if isinstance(statement, ast.FunctionDef):
                self._function(statement, method=True)
            else:
                self.visit(statement)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node, method=False)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._arguments(node.args)
        self.scopes.append(_Scope(frozenset(_parameter_names(node.args))))
        self.visit(node.body)
        self.scopes.pop()

    def _function(self, node: ast.FunctionDef, *, method: bool) -> None:
        if node.name != "__init__" or not method:
            self._binding(node, node.name)
        for expr in node.decorator_list:
            self.visit(expr)
        self._arguments(node.args)
        params = _parameter_names(node.args)
        positional = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
        instance = positional[0] if method and positional and not node.decorator_list else None
        self.scopes.append(_Scope(frozenset(params), instance))
        if node.returns is not None:
            self.visit(node.returns)
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()

    def _arguments(self, args: ast.arguments) -> None:
        """Defaults and annotations belong to the enclosing scope; the names to the function."""
        for name_node in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            self._binding(name_node, name_node.arg, parameter=True)
            if name_node.annotation is not None:
                self.visit(name_node.annotation)
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                self._binding(extra, extra.arg, parameter=True)
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self.visit(default)

    def _binding(self, node: ast.AST, name: str, *, parameter: bool = False) -> None:
        if _is_dunder(name):
            self.refuse(node, f"the name {name!r} (dunder names are not allowed)")
        elif name in self.modules:
            self.refuse(node, f"rebinds {name!r}, a name an import bound")
        elif name in DENIED_NAMES and not parameter:
            self.refuse(node, f"the name {name!r} is not allowed")

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and self._allowed_switch(node.targets[0]):
            self.visit(node.value)  # the value is read under every rule; the target is the switch
            return
        self.generic_visit(node)

    def _allowed_switch(self, target: ast.expr) -> bool:
        if not isinstance(target, ast.Attribute):
            return False
        module = self._module_of(target.value)
        return module is not None and f"{module}.{target.attr}" in ALLOWED_SWITCHES

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._binding(node, node.id)
            if self.scopes and node.id == self.scopes[-1].instance:
                self.refuse(node, f"rebinds {node.id!r}, the method's instance")
        elif _is_dunder(node.id):
            self.refuse(node, f"the name {node.id!r} (dunder names are not allowed)")
        elif node.id in DENIED_NAMES and not self._is_parameter(node.id):
            self.refuse(node, f"the name {node.id!r} is not allowed")
        elif node.id in self.classes and id(node) not in self.class_uses:
            self.refuse(node, f"uses the class {node.id} as a value (call methods on self)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.visit(node.value)  # the leftmost name first: ``torch._C._x`` is refused for _C
        self._attribute(node)

    def _attribute(self, node: ast.Attribute) -> None:
        value, name = node.value, node.attr
        base = value.id if isinstance(value, ast.Name) else None
        stored = isinstance(node.ctx, ast.Store | ast.Del)
        if stored and (base is None or not self.scopes or self.scopes[-1].instance != base):
            self.refuse(node, f"assigns the attribute {name!r} of something other than self")
            return
        if _is_dunder(name):
            if name != "__init__" or not _is_super_call(value):
                self.refuse(node, f"the attribute {name!r} (only super().__init__ may be named)")
        elif not (base is not None and self._is_instance(base) and name.startswith("_")):
            why = _attribute_refusal(name, self._module_of(value))
            if why:
                self.refuse(node, f"the attribute {name!r}: {why}")

    def _module_of(self, node: ast.expr) -> str | None:
        """The module a dotted expression names (``tl`` -> triton.language), when it does."""
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._module_of(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def _is_parameter(self, name: str) -> bool:
        return any(name in scope.params for scope in self.scopes)

    def _is_instance(self, name: str) -> bool:
        """Whether ``name`` here is a method's instance (a closure may read it; a parameter of
        an inner function that shadows it is anything the caller passed)."""
        for scope in reversed(self.scopes):
            if scope.instance == name:
                return True
            if name in scope.params:
                return False
        return False


def _parameter_names(args: ast.arguments) -> list[str]:
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return names


def _is_super_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )
