"""The text every KernelBench template is made of, and rendering a :data:`Node` as Triton.

A template (:class:`Template`) is module-level text and the body of a new ``forward``. The
module text opens with the marker line ``# codevolve-template: <name> (<what it computes>)``, how
mutations know a program already holds a template, then the tunable constants, lines
``NAME = value  # tune: a|b|c`` listing the values the ``tune`` mutation may move to, then the
``@triton.jit`` kernels. The forward launches them and falls back to the parent's forward, kept
as :data:`FALLBACK_METHOD`, for inputs the kernels do not take. A template may add lines at the
end of ``__init__``: work done once (a convolution's weight converted to another layout). Each
template module (:mod:`codevolve.problems.kernelbench.templates` and those it names) builds its
text from these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from codevolve.problems.kernelbench.forward import Forward
from codevolve.problems.kernelbench.tree import Const, Count, Input, Node, Op, Param, Stat

MARKER = "# codevolve-template:"
TUNE = "# tune:"
IMPORTS = "import math\n\nimport triton\nimport triton.language as tl\n"
FALLBACK_METHOD = "forward_torch"


@dataclass(frozen=True, slots=True)
class Template:
    name: str
    module: str  # marker, tunables and kernels, placed before ``class ModelNew``
    forward: str  # the new forward's body, indented for a method
    init: str = ""  # lines added at the end of ``__init__``, indented for a method's body


# --- rendering expressions and text ----------------------------------------------------------

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "gt": ">", "ge": ">=", "lt": "<"}
_INFIX["le"] = "<="
_CALLS = {
    "max": "tl.maximum",
    "min": "tl.minimum",
    "sigmoid": "tl.sigmoid",
    "tanh": "tanh",  # the helper below: tl has no tanh in every Triton version
    "exp": "tl.exp",
    "log": "tl.log",
    "abs": "tl.abs",
    "sqrt": "tl.sqrt",
    "rsqrt": "tl.rsqrt",
    "erf": "tl.erf",
    "sin": "tl.sin",
    "cos": "tl.cos",
    "where": "tl.where",
}
TANH_HELPER = """
@triton.jit
def tanh(x):
    # (1 - e^-2|x|) / (1 + e^-2|x|), signed: no overflow, exact near 0 to fp32 rounding
    t = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -y, y)
"""


def render(node: Node, inputs: Callable[[int], str]) -> str:
    """``node`` as a Triton expression; ``inputs(slot)`` names the fp32 value of each input."""
    if isinstance(node, Input):
        return inputs(node.slot)
    if isinstance(node, Param):
        return f"p{node.slot}"
    if isinstance(node, Const):
        return f"({node.value!r})" if node.value < 0 else repr(node.value)
    if isinstance(node, Stat):
        return f"S{node.index}"
    if isinstance(node, Count):
        return "R"
    args = [render(a, inputs) for a in node.args]
    if node.name == "neg":
        return f"(-{args[0]})"
    if node.name in _INFIX:
        return f"({args[0]} {_INFIX[node.name]} {args[1]})"
    return f"{_CALLS[node.name]}({', '.join(args)})"


def _uses(node: Node | None, name: str) -> bool:
    return isinstance(node, Op) and (node.name == name or any(_uses(a, name) for a in node.args))


def helpers(*nodes: Node | None) -> str:
    """The ``@triton.jit`` helpers ``nodes`` call (only ``tanh`` has one), as module text."""
    return TANH_HELPER if any(_uses(n, "tanh") for n in nodes) else ""


def tunable(name: str, value: int, values: tuple[int, ...]) -> str:
    """The line of a tunable constant: ``NAME = value  # tune: a|b|c``."""
    assert value in values
    return f"{name} = {value}  {TUNE} {'|'.join(map(str, values))}"


def module_text(name: str, description: str, tunables: list[str], kernels: str) -> str:
    """A template's module text: the marker line, the tunable lines, then the kernels."""
    head = f"{MARKER} {name} ({description})"
    return "\n".join([head, *tunables]) + "\n\n" + kernels.strip("\n") + "\n"


def indent(lines: list[str], depth: int) -> str:
    """``lines`` indented by ``depth`` spaces (blank lines stay empty), joined."""
    pad = " " * depth
    return "\n".join(pad + line if line else "" for line in lines)


POWERS = tuple(2**i for i in range(4, 15))  # 16 .. 16384
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)


def between(low: int, high: int) -> tuple[int, ...]:
    """The powers of two from ``low`` to ``high``: a tunable's listed values."""
    return tuple(p for p in POWERS if low <= p <= high)


def fallback(forward: Forward) -> str:
    """The statement handing the inputs to the parent's forward, kept as the fallback."""
    return f"return self.{FALLBACK_METHOD}({', '.join(forward.inputs)})"


def param_args(params: tuple[str, ...]) -> str:
    """Launch arguments of the scalar parameters, evaluated in forward (fp32 in the kernel)."""
    return "".join(f"float({source}), " for source in params)


def param_names(params: tuple[str, ...]) -> str:
    """The kernel's parameters for the scalar parameters: ``p0, p1, ``..."""
    return "".join(f"p{i}, " for i in range(len(params)))
