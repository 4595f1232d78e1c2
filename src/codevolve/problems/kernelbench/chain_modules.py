"""What the Level-2 chain reader knows of a ``ModelNew``'s attributes and of library calls.

``__init__`` is read for what each ``self.<attr>`` holds (:class:`Attributes`): a module (the
class it is built from, with its constructor call), a tensor (``nn.Parameter``, ``torch.*``), or
a scalar (a constructor argument, a literal). A scalar attribute that a dimension argument names
(``dim=self.dim``) is given the value of the module-level constant its constructor argument is
named after (KernelBench's files pass ``get_init_inputs()``'s constants of the same names): an
assumption the new forward checks before anything else (:meth:`Attributes.assumed`).

Library calls are kept as written; the reader asks here how many dimensions their result has
(:func:`rank_of`, a guess the kernels check when forward runs) and whether it is a new tensor a
kernel may write into (:func:`fresh_call`). Activation modules are read as their functional
form (:func:`activation_call`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from codevolve.problems.kernelbench.calls import canonical_call, constant_value, dotted
from codevolve.problems.kernelbench.forward import callee, init_calls, method

# Modules computing a heavy operator or a layer whose result is a new tensor, with the rank of
# that result (None: the input's).
HEAVY = {
    **{f"Conv{n}d": n + 2 for n in (1, 2, 3)},
    **{f"ConvTranspose{n}d": n + 2 for n in (1, 2, 3)},
    "Linear": None,
    "Bilinear": None,
}
_LAYER_KINDS = ("BatchNorm", "InstanceNorm", "MaxPool", "AvgPool", "AdaptiveMaxPool", "LPPool")
LAYERS = (
    *(f"{kind}{n}d" for kind in _LAYER_KINDS for n in (1, 2, 3)),
    "GroupNorm",
    "LayerNorm",
    "LocalResponseNorm",
)
HEAVY_FUNCTIONS = {"matmul": 2, "mm": 2, "bmm": 3, "linear": None, "addmm": 2, "baddbmm": 3}
HEAVY_FUNCTIONS |= {f"conv{n}d": n + 2 for n in (1, 2, 3)}
HEAVY_FUNCTIONS |= {f"conv_transpose{n}d": n + 2 for n in (1, 2, 3)}
SCALAR_METHODS = ("size", "dim", "numel", "item", "nelement", "stride", "element_size", "tolist")

# Activation modules read as the functional call of the same lowering: class -> (function, the
# constructor's parameters in order, as the function names them)
ACTIVATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ReLU": ("relu", ("inplace",)),
    "ReLU6": ("relu6", ("inplace",)),
    "Tanh": ("tanh", ()),
    "Sigmoid": ("sigmoid", ()),
    "Mish": ("mish", ("inplace",)),
    "SiLU": ("silu", ("inplace",)),
    "Hardswish": ("hardswish", ("inplace",)),
    "Hardsigmoid": ("hardsigmoid", ("inplace",)),
    "GELU": ("gelu", ("approximate",)),
    "Hardtanh": ("hardtanh", ("min_val", "max_val", "inplace")),
    "LeakyReLU": ("leaky_relu", ("negative_slope", "inplace")),
    "ELU": ("elu", ("alpha", "inplace")),
    "SELU": ("selu", ("inplace",)),
    "Softplus": ("softplus", ("beta", "threshold")),
    "Softsign": ("softsign", ()),
    "Softmax": ("softmax", ("dim",)),
    "LogSoftmax": ("log_softmax", ("dim",)),
}
_TENSOR_MAKERS = frozenset(
    {"Parameter", "Buffer", "tensor", "randn", "rand", "ones", "zeros", "full", "empty"}
    | {"arange", "linspace", "eye", "ones_like", "zeros_like"}
)


@dataclass(frozen=True, slots=True)
class Attributes:
    """What ``__init__`` makes of each ``self.<attr>``, and the module's constants."""

    modules: dict[str, ast.Call]  # attr -> the constructor call of an nn module
    tensors: frozenset[str]  # attrs holding tensors
    scalars: dict[str, str]  # attr -> the constructor argument (or literal) it is set from
    constants: dict[str, float]  # module-level numeric constants of the program
    init_args: frozenset[str] = field(default_factory=frozenset)
    ranks: dict[str, int] = field(default_factory=dict)  # tensor attr -> its rank, where known

    def module_class(self, attr: str) -> str:
        call = self.modules.get(attr)
        return callee(call) if call is not None else ""

    def assumed(self, attr: str) -> int | None:
        """The integer a scalar attribute is taken to hold: a literal, or the module constant
        named as the constructor argument it is set from."""
        source = self.scalars.get(attr)
        if source is None:
            return None
        value = constant_value(ast.parse(source, mode="eval").body)
        if value is None and source in self.constants:
            value = self.constants[source]
        if value is None or value != int(value):
            return None
        return int(value)


def attributes(tree: ast.Module, cls: ast.ClassDef) -> Attributes:
    calls = init_calls(cls)
    tensors = {a for a, c in calls.items() if callee(c) in _TENSOR_MAKERS}
    modules = {
        a: c
        for a, c in calls.items()
        if dotted(c.func).startswith(("nn.", "torch.nn.")) and a not in tensors
    }
    init = method(cls, "__init__")
    init_args = frozenset(a.arg for a in init.args.args[1:]) if init is not None else frozenset()
    scalars: dict[str, str] = {}
    for node in ast.walk(init) if init is not None else []:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(target := node.targets[0], ast.Attribute)
            and dotted(target.value) == "self"
            and target.attr not in calls
            and _scalar_source(node.value, init_args)
        ):
            scalars[target.attr] = ast.unparse(node.value)
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            value = constant_value(node.value)
            for target in node.targets:
                if isinstance(target, ast.Name) and value is not None:
                    constants[target.id] = value
    shapes = {
        target.id: len(node.value.elts)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    ranks = {a: r for a in tensors if (r := _made_rank(calls[a], shapes, constants)) is not None}
    return Attributes(modules, frozenset(tensors), scalars, constants, init_args, ranks)


def _made_rank(call: ast.Call, shapes: dict[str, int], numbers: dict[str, float]) -> int | None:
    """The rank of the tensor ``nn.Parameter(torch.randn(shape))`` and the like make, where the
    shape is written out or a module constant; None otherwise."""
    kind = callee(call)
    if kind in ("Parameter", "Buffer"):
        inner = call.args[0] if call.args else None
        return _made_rank(inner, shapes, numbers) if isinstance(inner, ast.Call) else None
    if kind == "tensor" and call.args:
        number = call.args[0]
        scalar = constant_value(number) is not None
        return 0 if scalar or (isinstance(number, ast.Name) and number.id in numbers) else None
    if kind not in ("randn", "rand", "ones", "zeros", "empty", "full"):
        return None
    size = call.args[:1] if kind == "full" else call.args
    if len(size) == 1 and isinstance(size[0], ast.Tuple | ast.List):
        return len(size[0].elts)
    if len(size) == 1 and isinstance(size[0], ast.Name) and size[0].id in shapes:
        return shapes[size[0].id]
    numeric = all(
        constant_value(d) is not None or (isinstance(d, ast.Name) and d.id in numbers) for d in size
    )
    return len(size) if size and numeric and not call.keywords else None


def _scalar_source(value: ast.expr, init_args: frozenset[str]) -> bool:
    """A constructor argument, a literal, or arithmetic of those: a Python number."""
    if constant_value(value) is not None:
        return True
    if isinstance(value, ast.Name):
        return value.id in init_args
    if isinstance(value, ast.BinOp):
        return _scalar_source(value.left, init_args) and _scalar_source(value.right, init_args)
    if isinstance(value, ast.UnaryOp):
        return _scalar_source(value.operand, init_args)
    return False


def module_call(expr: ast.expr, attrs: Attributes) -> tuple[str, str] | None:
    """``self.<attr>(...)`` of a module ``__init__`` builds: (attr, its class)."""
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and dotted(expr.func.value) == "self"
        and expr.func.attr in attrs.modules
    ):
        return expr.func.attr, attrs.module_class(expr.func.attr)
    return None


def activation_call(expr: ast.Call, attr: str, attrs: Attributes) -> ast.Call | None:
    """An activation module's call as its functional call: a literal constructor argument as
    written, any other as the module's attribute of that name (read in forward)."""
    form = ACTIVATIONS.get(attrs.module_class(attr))
    built = attrs.modules[attr]
    if form is None or len(expr.args) != 1 or expr.keywords:
        return None
    function, names = form
    if len(built.args) > len(names) or any(k.arg is None for k in built.keywords):
        return None
    given: dict[str, ast.expr] = dict(zip(names, built.args, strict=False))
    given.update({k.arg: k.value for k in built.keywords if k.arg is not None})
    keywords = []
    for name, value in given.items():
        literal = isinstance(value, ast.Constant) or constant_value(value) is not None
        source = value if literal else ast.parse(f"self.{attr}.{name}", mode="eval").body
        keywords.append(ast.keyword(name, source))
    return ast.Call(ast.parse(f"F.{function}", mode="eval").body, list(expr.args), keywords)


def rank_of(expr: ast.expr, ranks: dict[str, int | None], attrs: Attributes) -> int | None:
    """The number of dimensions of a library call's result, as far as the call says
    (``ranks``: of the forward's variables); None when it cannot tell."""
    if isinstance(expr, ast.Name):
        return ranks.get(expr.id)
    if not isinstance(expr, ast.Call):
        return None
    first = expr.args[0] if expr.args else None
    inner = rank_of(first, ranks, attrs) if first is not None else None
    found = module_call(expr, attrs)
    if found is not None:
        kind = found[1]
        if kind in HEAVY:
            fixed = HEAVY[kind]
            return fixed if fixed is not None else (inner if inner is not None else 2)
        return inner if kind in LAYERS or kind.startswith("Dropout") else None
    call = canonical_call(expr)
    if call is None:
        return None
    if call.name in HEAVY_FUNCTIONS:
        fixed = HEAVY_FUNCTIONS[call.name]
        return fixed if fixed is not None else (inner if inner is not None else 2)
    receiver = rank_of(call.args[0], ranks, attrs) if call.args else None
    if receiver is None:
        return None
    if call.name == "unsqueeze":
        return receiver + 1
    if call.name == "squeeze" and len(call.args) == 2:
        return receiver - 1
    if call.name in ("view", "reshape") and len(call.args) > 1:
        shape = call.args[1:]
        if len(shape) == 1 and isinstance(shape[0], ast.Tuple | ast.List):
            return len(shape[0].elts)
        return None if any(isinstance(a, ast.Starred) for a in shape) else len(shape)
    return receiver if call.name in ("contiguous", "clone", "detach", "float") else None


def fresh_call(expr: ast.expr, attrs: Attributes) -> bool:
    """A call that returns a new tensor, never a view of its input: a kernel may write into
    its result when nothing else reads it."""
    found = module_call(expr, attrs)
    if found is not None:
        return found[1] in HEAVY or found[1] in LAYERS
    call = canonical_call(expr)
    return call is not None and call.name in HEAVY_FUNCTIONS and not isinstance(expr, ast.Name)
