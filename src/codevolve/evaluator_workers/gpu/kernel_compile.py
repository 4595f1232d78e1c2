"""Compiling a candidate's Triton kernels ahead, in parallel, before the device process runs it.

Triton compiles a kernel the first time a launch needs it, one at a time, in the process that
launches it: a gemm-kernel-gpu child that brings a new kernel family or new tile configs spent
40-100 s compiling in the device process before its first check. Here a new source is first run in
a pool of helper processes (kept warm, ``spawn``ed by the device process) with every Triton launch
turned into a compile-only warmup: the candidate's ``matmul`` runs on the job's shapes, on empty
buffers shaped as the harness's, and each kernel it would launch is compiled into Triton's disk
cache and never run. The device process's own launches then load the compiled kernels. The shapes
are dealt round-robin, and most of them launch the same few kernels: a helper claims each kernel
(:func:`launch_key`, a file created exclusively in a folder the helpers share) before compiling
it, and skips the launches another helper claimed, so that the helpers compile distinct kernels
side by side instead of one kernel each.

The helpers run the candidate's host code, so they load it as the device process does
(kernel_loader.py: restricted builtins and imports, scrubbed environment inherited from the device
process). What they compute is never used; a host loop that does not end is cut at
:data:`COMPILE_TIMEOUT_S` by terminating the pool (the device process then compiles what is left
itself, under its own job timeout).

Imported only in the device process (needs torch and Triton).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import multiprocessing
import os
import tempfile
from collections.abc import Sequence
from multiprocessing.pool import Pool
from typing import Any

from codevolve.evaluator_workers.gpu.gemm_bench import Shape

log = logging.getLogger(__name__)

WORKERS_ENV = "CODEVOLVE_KERNEL_COMPILE_WORKERS"
# Helper processes per device process; two device processes on one machine share its cores.
DEFAULT_WORKERS = max(0, min(8, ((os.cpu_count() or 2) - 2) // 2))
COMPILE_TIMEOUT_S = 240.0
DIGESTS_KEPT = 256  # sources remembered (as the loader keeps modules)


def compile_workers(environ: Any = os.environ) -> int:
    """How many helpers (``CODEVOLVE_KERNEL_COMPILE_WORKERS``; 0 or 1: compile in place)."""
    raw = environ.get(WORKERS_ENV, "")
    return int(raw) if raw.strip().isdigit() else DEFAULT_WORKERS


class KernelCompiler:
    """A warm pool of helper processes that compile a source's kernels for given shapes."""

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._pool: Pool | None = None
        self._done: dict[str, set[Shape]] = {}  # per source digest, the shapes compiled ahead
        self._claims = tempfile.mkdtemp(prefix="codevolve-kernel-claims-")

    def close(self) -> None:
        """Stop the helpers and wait for them (their queues' semaphores are released)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def compile_ahead(self, source: str, digest: str, shapes: Sequence[Shape]) -> int:
        """Compile ``source``'s launches on those of ``shapes`` not compiled ahead for it yet,
        in the helpers; how many shapes were sent (0: no pool, nothing new, or cut at the
        timeout)."""
        done = self._done.setdefault(digest, set())
        new = [s for s in dict.fromkeys(shapes) if s not in done]
        if self._workers < 2 or not new:
            return 0
        done.update(new)
        if len(self._done) > DIGESTS_KEPT:
            self._done.pop(next(iter(self._done)))
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = context.Pool(
                self._workers, initializer=_compile_only, initargs=(self._claims,)
            )
        chunks = [(source, new[i :: self._workers]) for i in range(self._workers)]
        pending = self._pool.starmap_async(_compile_shapes, [c for c in chunks if c[1]])
        try:
            pending.get(timeout=COMPILE_TIMEOUT_S)
        except multiprocessing.TimeoutError:
            log.warning("compiling ahead took over %.0f s; helpers restarted", COMPILE_TIMEOUT_S)
            self.close()
            return 0
        except Exception:  # a helper's own failure (out of memory, say): never the candidate's
            log.warning("compiling ahead failed; helpers restarted", exc_info=True)
            self.close()
            return 0
        return len(new)


def _compile_only(claims: str) -> None:
    """Helper start-up: a Triton launch compiles (``warmup``) and returns without running, when
    this helper claims its kernel in ``claims`` first; another helper's kernel is skipped."""
    from triton.runtime.jit import JITFunction

    launch = JITFunction.run

    def compile_only(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        key = launch_key(self, args, kwargs)
        if key is not None and not claim(claims, key):
            return None
        return launch(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = compile_only


def claim(claims: str, key: str) -> bool:
    """True for the first caller (of any process) to claim ``key`` in the folder ``claims``."""
    try:
        os.close(os.open(os.path.join(claims, key), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def launch_key(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """What Triton compiles a launch of ``kernel`` (a JITFunction) by, closely enough: its
    source, its constexprs and launch options, and what it specialises the other arguments on
    (an int equal to 1 or divisible by 16, unless not specialised; a tensor's dtype and 16-byte
    alignment; a TMA descriptor's block shape). Two launches with one key compile one kernel;
    a key too fine only costs a second compile, one too coarse leaves a kernel to the device
    process. None when the kernel's internals are not as expected (the launch compiles)."""
    try:
        params = {p.name: p for p in kernel.params}
        parts = [str(kernel.cache_key)]
        parts += [repr(_specialised(p, v)) for p, v in zip(kernel.params, args, strict=False)]
        for name, value in sorted(kwargs.items()):
            kind = _specialised(params[name], value) if name in params else value
            parts.append(f"{name}={kind!r}")
    except Exception:  # noqa: BLE001 - another Triton version: compile every launch
        return None
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _specialised(param: Any, value: Any) -> Any:
    if param.is_constexpr or isinstance(value, bool):
        return ("constexpr", value)
    if isinstance(value, int):
        return ("int",) if param.do_not_specialize else ("int", value == 1, value % 16 == 0)
    if hasattr(value, "data_ptr"):
        return ("tensor", str(value.dtype), value.data_ptr() % 16 == 0)
    if hasattr(value, "block_shape"):
        return ("descriptor", tuple(value.block_shape), str(getattr(value.base, "dtype", "")))
    return (type(value).__name__,)


@functools.cache
def _loader() -> Any:
    from codevolve.evaluator_workers.gpu.kernel_loader import KernelLoader

    return KernelLoader()


def _compile_shapes(source: str, shapes: list[Shape]) -> int:
    """In a helper: the candidate's launch on each shape (compile-only); how many returned."""
    import torch

    from codevolve.evaluator_workers.gpu.kernel_bench import shape_buffers

    launch = _loader().load(source)
    if not callable(launch):
        return 0
    sms = int(torch.cuda.get_device_properties(0).multi_processor_count)
    done = 0
    for shape in shapes:
        buffers = shape_buffers(shape)
        try:
            launch(buffers.x, buffers.w, buffers.y, buffers.workspace, sms)
            done += 1
        except Exception:  # noqa: BLE001 - the device process runs it again and reports it
            pass
        del buffers
        torch.cuda.empty_cache()  # one shape's buffers at a time: helpers share the GPU
    return done
