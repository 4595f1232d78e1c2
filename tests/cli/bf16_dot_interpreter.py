"""Triton's interpreter, fixed for ``tl.dot`` of bf16 operands, for the export tests only.

Triton 3.9's interpreter keeps bf16 values as their uint16 bit patterns and its ``create_dot``
converts only 8-bit floats, so a bf16 ``tl.dot`` multiplies bit patterns (values around 1e10 for
inputs near 1; triton-lang/triton#11584, not supported upstream yet). The GPU multiplies values,
so the operands are converted to fp32 here (exactly: bf16 is fp32's top half). Loaded by a test
subprocess that runs an exported kernel module with TRITON_INTERPRET=1 (``-p`` for pytest, or
imported before the module runs); nothing in codevolve imports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

_create_dot = interpreter.InterpreterBuilder.create_dot


def _values(handle: Any) -> Any:
    if handle.dtype != tl.bfloat16:
        return handle
    return interpreter.TensorHandle(
        (handle.data.astype(np.uint32) << 16).view(np.float32), tl.float32
    )


def _create_dot_of_values(self: Any, a: Any, b: Any, d: Any, *args: Any) -> Any:
    return _create_dot(self, _values(a), _values(b), d, *args)


interpreter.InterpreterBuilder.create_dot = _create_dot_of_values
