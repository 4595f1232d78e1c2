"""Tensors that cross the judging boundary: memory shared between the trusted judge and a runner.

The judge and a runner (runner.py) are two processes; tensors cross between them as plain JSON
descriptions of memory both can map, never as pickles (a pickle from the candidate's process
would run its code in the judge's).

- :class:`Arena`: memory the judge owns and the runner maps: the inputs it stages, and on the
  CPU the slots where the runner writes outputs. On the CPU an anonymous ``memfd`` (its file
  descriptor passed over the runner's socket); on CUDA one ``cuMemAlloc`` of its own, shared by a
  CUDA IPC handle. It holds nothing else of the judge's: the reference's outputs and the private
  copies of the inputs live in the judge's ordinary memory, which no other process can map.
- :func:`export_cuda` / :class:`CudaImports`: on CUDA, the runner's outputs stay in the runner's
  memory; it names each one by an IPC handle and an offset, and the judge maps and copies them
  (after the clock, with the runner stopped) instead of the runner copying them inside the timed
  window.

A value is encoded as ``{"tensor": spec}``, ``{"list": [...]}``, ``{"tuple": [...]}``,
``{"value": plain}`` or ``{"float": repr}``; a spec gives ``dtype``, ``shape``, ``stride`` and
where the elements are. Everything a runner sends is checked against bounds before it is mapped.

Imported in the device process and in runners (needs torch).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from codevolve.evaluator_workers.errors import WorkerError

ALIGN = 512  # bytes: every tensor in an arena starts on this boundary
IPC_HANDLE_BYTES = 64  # sizeof(CUipcMemHandle)
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
DTYPES: dict[str, torch.dtype] = {
    str(d): d
    for d in (
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
        torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128,
    )
}  # fmt: skip
MAX_DIMS = 16


class SharingError(WorkerError):
    """A value that cannot cross the boundary, or a runner's description out of bounds."""


# ----------------------------------------------------------------------------- the CUDA driver


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]  # CUipcMemHandle


class _Driver:
    """The few CUDA driver calls the boundary needs, through ctypes (libcuda.so.1)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")

    def check(self, result: int, what: str) -> None:
        if result != 0:
            raise SharingError(f"{what} failed with CUDA driver error {result}")

    def alloc(self, nbytes: int) -> int:
        pointer = ctypes.c_uint64()
        self.check(
            self.lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes)), "cuMemAlloc"
        )
        return pointer.value

    def free(self, pointer: int) -> None:
        self.lib.cuMemFree_v2(ctypes.c_uint64(pointer))

    def handle(self, pointer: int) -> bytes:
        handle = ctypes.create_string_buffer(IPC_HANDLE_BYTES)
        self.check(
            self.lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(pointer)), "cuIpcGetMemHandle"
        )
        return handle.raw

    def open(self, handle: bytes) -> int:
        if len(handle) != IPC_HANDLE_BYTES:
            raise SharingError("an IPC handle of the wrong size")
        pointer = ctypes.c_uint64()
        raw = _IpcHandle.from_buffer_copy(handle)  # a struct: passed by value, as the API wants
        opener = self.lib.cuIpcOpenMemHandle_v2
        opener.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcHandle, ctypes.c_uint]
        result = opener(
            ctypes.byref(pointer), raw, ctypes.c_uint(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        )
        self.check(result, "cuIpcOpenMemHandle")
        return pointer.value

    def close(self, pointer: int) -> None:
        self.lib.cuIpcCloseMemHandle(ctypes.c_uint64(pointer))

    def range_of(self, pointer: int) -> tuple[int, int]:
        """The allocation that holds ``pointer``: (base, size in bytes)."""
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        result = self.lib.cuMemGetAddressRange_v2(
            ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)
        )
        self.check(result, "cuMemGetAddressRange")
        return base.value, size.value


_DRIVER: _Driver | None = None


def _driver() -> _Driver:
    global _DRIVER
    if _DRIVER is None:
        torch.cuda.init()  # type: ignore[no-untyped-call]  # the primary context, current here
        torch.zeros(1, device="cuda")
        _DRIVER = _Driver()
    return _DRIVER


class _CudaMemory:
    """A raw device pointer seen by torch through ``__cuda_array_interface__`` (no copy)."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (pointer, False),
            "version": 2,
        }


def _bytes_on_cuda(pointer: int, nbytes: int) -> torch.Tensor:
    return torch.as_tensor(_CudaMemory(pointer, nbytes), device="cuda")


# ----------------------------------------------------------------------------- specs


def extent(shape: Sequence[int], stride: Sequence[int], itemsize: int) -> int:
    """Bytes from a tensor's first element to the end of its last (0 for an empty tensor)."""
    if any(s == 0 for s in shape):
        return 0
    return (sum((n - 1) * st for n, st in zip(shape, stride, strict=True)) + 1) * itemsize


def view(raw: torch.Tensor, spec: dict[str, Any], *, offset: int) -> torch.Tensor:
    """The tensor ``spec`` describes inside ``raw`` (a flat uint8 tensor), ``offset`` bytes in;
    :class:`SharingError` unless it lies wholly inside."""
    dtype = DTYPES.get(str(spec.get("dtype")))
    shape, stride = _dims(spec.get("shape")), _dims(spec.get("stride"))
    if dtype is None or shape is None or stride is None or len(shape) != len(stride):
        raise SharingError(f"an unusable tensor description: {str(spec)[:200]}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    size = extent(shape, stride, itemsize)
    if offset < 0 or offset % itemsize or offset + size > raw.numel():
        raise SharingError("a tensor description outside the shared memory")
    if size == 0:
        return torch.empty(shape, dtype=dtype, device=raw.device)
    elements = raw[offset : offset + size + (-size) % itemsize].view(dtype)
    return elements.as_strided(shape, stride)


def _dims(value: Any) -> list[int] | None:
    """``value`` if it is a list of at most MAX_DIMS sane sizes or strides, else None."""
    if (
        isinstance(value, list)
        and len(value) <= MAX_DIMS
        and all(type(v) is int and 0 <= v < 1 << 40 for v in value)
    ):
        return value
    return None


def spec_of(tensor: torch.Tensor) -> dict[str, Any]:
    return {
        "dtype": str(tensor.dtype),
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()),
    }


# ----------------------------------------------------------------------------- the arena


@dataclass(frozen=True, slots=True)
class ArenaHandle:
    """What a runner needs to map an arena: its size, and its IPC handle on CUDA (on the CPU
    the memfd's descriptor travels beside the message)."""

    device: str
    nbytes: int
    ipc: str = ""  # hex

    def as_json(self) -> dict[str, Any]:
        return {"device": self.device, "nbytes": self.nbytes, "ipc": self.ipc}


class Arena:
    """Shared memory for one judging, allocated front to back and reset between uses."""

    def __init__(self, raw: torch.Tensor, *, release: Callable[[], None], handle: ArenaHandle):
        self.raw = raw  # flat uint8
        self.handle = handle
        self.fd: int | None = None  # the CPU memfd, to pass to a runner
        self._release = release
        self._used = 0

    @classmethod
    def create(cls, nbytes: int, device: str) -> Arena:
        nbytes = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        if device == "cuda":
            driver = _driver()
            pointer = driver.alloc(nbytes)
            handle = ArenaHandle("cuda", nbytes, driver.handle(pointer).hex())
            return cls(
                _bytes_on_cuda(pointer, nbytes), release=lambda: driver.free(pointer), handle=handle
            )
        fd = os.memfd_create("codevolve-arena", os.MFD_CLOEXEC)
        os.ftruncate(fd, nbytes)
        mapped = mmap.mmap(fd, nbytes)
        raw = torch.frombuffer(mapped, dtype=torch.uint8)
        arena = cls(raw, release=lambda: _close_cpu(fd), handle=ArenaHandle("cpu", nbytes))
        arena.fd = fd
        arena._mapping = mapped  # type: ignore[attr-defined]
        return arena

    @classmethod
    def attach(cls, handle: ArenaHandle, fd: int | None) -> Arena:
        """The runner's side: map an arena the judge created."""
        if handle.device == "cuda":
            driver = _driver()
            pointer = driver.open(bytes.fromhex(handle.ipc))
            base, size = driver.range_of(pointer)
            if base != pointer or size < handle.nbytes:
                raise SharingError("the arena's IPC mapping is smaller than announced")
            raw = _bytes_on_cuda(pointer, handle.nbytes)
            return cls(raw, release=lambda: driver.close(pointer), handle=handle)
        if fd is None:
            raise SharingError("no memory descriptor came with the arena")
        if os.fstat(fd).st_size < handle.nbytes:
            raise SharingError("the arena's memory is smaller than announced")
        mapped = mmap.mmap(fd, handle.nbytes)
        os.close(fd)
        arena = cls(
            torch.frombuffer(mapped, dtype=torch.uint8), release=lambda: None, handle=handle
        )
        arena._mapping = mapped  # type: ignore[attr-defined]
        return arena

    @property
    def free_bytes(self) -> int:
        return self.raw.numel() - self._used

    def reset(self) -> None:
        self._used = 0

    def place(self, like: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        """A contiguous tensor of ``like``'s shape and dtype in the arena, and its spec."""
        size = like.numel() * like.element_size()
        offset = self._used
        if offset + size > self.raw.numel():
            raise SharingError(f"the arena ({self.raw.numel()} bytes) is full")
        self._used += max(ALIGN, -(-size // ALIGN) * ALIGN)
        stride = list(torch.empty(like.shape, device="meta").stride())
        spec = {
            "dtype": str(like.dtype),
            "shape": list(like.shape),
            "stride": stride,
            "offset": offset,
        }
        return self.tensor(spec), spec

    def tensor(self, spec: dict[str, Any]) -> torch.Tensor:
        offset = spec.get("offset")
        if type(offset) is not int:
            raise SharingError("a tensor description without an offset")
        return view(self.raw, spec, offset=offset)

    def close(self) -> None:
        del self.raw
        self._release()


def _close_cpu(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


# ----------------------------------------------------------------------------- values


def encode(value: Any, place: Callable[[torch.Tensor], dict[str, Any]]) -> dict[str, Any]:
    """``value`` as JSON, each tensor replaced by ``place(tensor)``'s spec."""
    if isinstance(value, torch.Tensor):
        return {"tensor": place(value)}
    if isinstance(value, tuple):  # torch.Size too
        return {"tuple": [encode(v, place) for v in value]}
    if isinstance(value, list):
        return {"list": [encode(v, place) for v in value]}
    if isinstance(value, float):
        return {"float": repr(value)}
    if value is None or isinstance(value, bool | int | str):
        return {"value": value}
    raise SharingError(f"a value of type {type(value).__name__} cannot be passed to a program")


def decode(data: Any, tensor: Callable[[dict[str, Any]], torch.Tensor], depth: int = 0) -> Any:
    """The value :func:`encode` described, each tensor spec resolved by ``tensor``."""
    if depth > 8 or not isinstance(data, dict) or len(data) != 1:
        raise SharingError(f"an unusable value description: {str(data)[:200]}")
    ((kind, inner),) = data.items()
    if kind == "tensor" and isinstance(inner, dict):
        return tensor(inner)
    if kind in ("list", "tuple") and isinstance(inner, list) and len(inner) <= 4096:
        items = [decode(item, tensor, depth + 1) for item in inner]
        return tuple(items) if kind == "tuple" else items
    if kind == "float" and isinstance(inner, str) and len(inner) < 64:
        try:
            return float(inner)
        except ValueError:
            pass
    if kind == "value" and (inner is None or isinstance(inner, bool | int | str)):
        return inner
    raise SharingError(f"an unusable value description: {str(data)[:200]}")


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors of a value, nested lists and tuples included, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for item in value for t in tensors_in(item)]
    return []


def byte_count(value: Any) -> int:
    return sum(-(-t.numel() * t.element_size() // ALIGN) * ALIGN + ALIGN for t in tensors_in(value))


# ----------------------------------------------------------------------------- CUDA outputs


_EXPORTED: dict[tuple[int, int], str] = {}  # (base, size) of an allocation -> its IPC handle
_BASES: dict[int, tuple[int, int]] = {}  # a data pointer seen before -> its allocation


def locate_cuda(tensor: torch.Tensor) -> tuple[str, int]:
    """The runner's side: the IPC handle of the allocation holding a CUDA tensor, and the
    tensor's offset in it (one handle per allocation, one lookup per pointer: the caching
    allocator hands the same blocks out batch after batch, and this runs inside the timed
    window)."""
    pointer = tensor.data_ptr()
    found = _BASES.get(pointer)
    if found is None:
        driver = _driver()
        found = _BASES[pointer] = driver.range_of(pointer)
        if found not in _EXPORTED:
            _EXPORTED[found] = driver.handle(found[0]).hex()
    return _EXPORTED[found], pointer - found[0]


def export_cuda(tensor: torch.Tensor) -> dict[str, Any]:
    """A CUDA tensor described by its allocation's IPC handle and its offset there."""
    handle, offset = locate_cuda(tensor)
    return {**spec_of(tensor), "ipc": handle, "offset": offset}


class CudaImports:
    """The judge's side: the runner's allocations it mapped, each once, closed together."""

    def __init__(self) -> None:
        self._mapped: dict[str, tuple[int, torch.Tensor]] = {}

    def tensor(self, spec: dict[str, Any]) -> torch.Tensor:
        handle, offset = spec.get("ipc"), spec.get("offset")
        if (
            not isinstance(handle, str)
            or len(handle) != 2 * IPC_HANDLE_BYTES
            or type(offset) is not int
        ):
            raise SharingError("an output description without a usable IPC handle")
        if handle not in self._mapped:
            driver = _driver()
            try:
                pointer = driver.open(bytes.fromhex(handle))
            except ValueError as exc:
                raise SharingError("an IPC handle that is not hex") from exc
            base, size = driver.range_of(pointer)
            self._mapped[handle] = (pointer, _bytes_on_cuda(base, size))
        return view(self._mapped[handle][1], spec, offset=offset)

    def close(self) -> None:
        driver = _DRIVER
        for pointer, _raw in self._mapped.values():
            if driver is not None:
                driver.close(pointer)
        self._mapped.clear()
