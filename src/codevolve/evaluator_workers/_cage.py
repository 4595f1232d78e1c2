"""The child side of the sandbox: a forked child's cage and the run of the candidate in it.

Imported only by :mod:`codevolve.evaluator_workers._forkserver`, before it forks, and like it
stdlib-only. A child, forked ahead of its call, enters its cage (:func:`enter_and_run`): a new
session, so that a timeout kills its whole process group; its own temp dir as cwd, HOME and TMPDIR;
stdout/stderr to the server's unnamed files, capped; every other fd closed but its request and
result pipes; an unprivileged uid when the server runs as root; no new privileges; death with the
server; Landlock and a seccomp filter where the kernel has them (:mod:`._confine`). Then it blocks
on its request pipe. With the request come the rlimits (CPU, address space, file size, open files,
processes, no core dumps); then the source is loaded as module ``candidate``,
its entry point called on each argument list, and the results sent back as plain JSON data.

Messages on every pipe: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
"""

from __future__ import annotations

import ctypes
import io
import json
import linecache
import math
import os
import resource
import signal
import sys
import tempfile
import traceback
import types
from typing import TYPE_CHECKING, Any, NoReturn, cast

from codevolve.evaluator_workers import _confine

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

FILENAME = "candidate.py"  # as it appears in candidates' tracebacks
HEADER_BYTES = 4
TRACEBACK_CHARS = 4000  # the tail of a candidate's traceback kept in the reply
OPEN_FILES = 64  # RLIMIT_NOFILE of a child
# RLIMIT_FSIZE of a child, bytes, unless the output cap is larger: a call may write files up to
# this size (a problem bundle's files, which the evaluator harness writes inside the sandbox, are
# at most problems/openevolve/bundle.py MAX_FILE_BYTES), no larger ones.
FILE_BYTES = 8 << 20
PROCESSES = 64  # RLIMIT_NPROC of a child's uid (not binding for root)
RESULT_FD = 3  # the result pipe's fd in the child
REQUEST_FD = 4  # the request pipe's fd in the child, closed once read
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"  # PATH of a child
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38


class _InvalidOutput(Exception):
    """The entry point returned something that is not plain JSON data."""


# ----------------------------------------------------------------------------- framing


def read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int) -> bytes | None:
    header = read_exactly(fd, HEADER_BYTES)
    return None if header is None else read_exactly(fd, int.from_bytes(header, "big"))


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, ensure_ascii=False, allow_nan=False).encode()
    return len(body).to_bytes(HEADER_BYTES, "big") + body


# ----------------------------------------------------------------------------- the child


def enter_and_run(
    call_dir: str,
    *,
    fds: tuple[int, int, int, int],  # request pipe, result pipe, stdout file, stderr file
    identity: tuple[int, int] | None,
    plan: _confine.Plan,  # the Landlock and seccomp layers to apply
    libc: ctypes.CDLL,
) -> NoReturn:
    """Enter the cage, await the request, run the candidate, send one message; never return."""
    hard_exit = os._exit  # bound before any candidate code can replace os._exit
    status = 70
    try:
        os.setsid()
        os.chdir(call_dir)
        if min(fds) <= REQUEST_FD:  # the server holds fds 0-4, so dup2 below clobbers nothing
            raise RuntimeError(f"unexpected fds {fds}")
        devnull = os.open(os.devnull, os.O_RDONLY)
        for source, target in zip((devnull, fds[2], fds[3], fds[1], fds[0]), range(5), strict=True):
            os.dup2(source, target)
        _close_fds_above(REQUEST_FD)
        os.environ.clear()
        os.environ.update(PATH=SEARCH_PATH, LANG="C.UTF-8")
        os.environ.update(HOME=call_dir, TMPDIR=call_dir)
        tempfile.tempdir = None
        parent = os.getppid()
        if identity is not None:
            os.setgroups([])
            os.setresgid(identity[1], identity[1], identity[1])
            os.setresuid(identity[0], identity[0], identity[0])
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
        if os.getppid() != parent:
            raise ProcessLookupError("the server ended before the child was set up")
        _confine.confine(call_dir, plan=plan, libc=libc)  # OSError: never run less confined
        request = receive(REQUEST_FD)
        if request is not None:  # None: the server is shutting down
            _answer(request)
        status = 0
    except BaseException:  # noqa: BLE001 - whatever happened, the child must end here, not return
        traceback.print_exc()
    finally:
        hard_exit(status)


def _answer(request: bytes) -> None:
    os.close(REQUEST_FD)
    parsed = json.loads(request)
    _set_limits(parsed["limits"])
    cap = int(parsed["limits"]["output_bytes"])
    sys.stdout = _capped_text(1, cap)
    sys.stderr = _capped_text(2, cap)
    message = _run_candidate(parsed["source"], parsed["entry"], parsed["args"])
    sys.stdout.flush()
    sys.stderr.flush()
    write_all(RESULT_FD, len(message).to_bytes(HEADER_BYTES, "big") + message)


def _close_fds_above(fd: int) -> None:
    # No fd is above the open-files limit, which the server never changes (1 << 20, fs.nr_open's
    # default, where it is unlimited).
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    os.closerange(fd + 1, 1 << 20 if limit == resource.RLIM_INFINITY else limit)


def _set_limits(limits: dict[str, Any]) -> None:
    cpu_s = math.ceil(float(limits["cpu_s"]))
    _set_limit(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)  # SIGXCPU first, SIGKILL a second later
    memory = int(limits["memory_mb"]) << 20
    _set_limit(resource.RLIMIT_AS, memory, memory)
    written = max(int(limits["output_bytes"]), FILE_BYTES)
    _set_limit(resource.RLIMIT_FSIZE, written, written)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails, it does not kill
    _set_limit(resource.RLIMIT_NOFILE, OPEN_FILES, OPEN_FILES)
    _set_limit(resource.RLIMIT_CORE, 0, 0)
    # Counted per uid: with an unprivileged uid of its own the child may have PROCESSES; sharing
    # the worker's uid (the fallback) it may fork only while that uid has fewer. Root ignores it.
    _set_limit(resource.RLIMIT_NPROC, PROCESSES, PROCESSES)


def _set_limit(kind: int, soft: int, hard: int) -> None:
    ceiling = resource.getrlimit(kind)[1]
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    resource.setrlimit(kind, (soft, hard))


class _CappedFile(io.RawIOBase):
    """Writes the first ``cap`` bytes to ``fd`` and drops the rest, so printing never fails."""

    def __init__(self, fd: int, cap: int) -> None:
        super().__init__()
        self._fd = fd
        self._room = cap  # bytes

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int:
        view = memoryview(data).cast("B")
        kept = view[: self._room]
        try:
            write_all(self._fd, bytes(kept))
            self._room -= len(kept)
        except OSError:  # the file-size limit, reached by writes that bypassed this object
            self._room = 0
        return len(view)


def _capped_text(fd: int, cap: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        io.BufferedWriter(_CappedFile(fd, cap)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


def _run_candidate(source: str, entry: str, args: list[list[Any]]) -> bytes:
    """Load the source as module ``candidate``, call ``entry`` on each argument list."""
    out_of_memory = _message({"error_kind": "memory", "error": "out of memory (MemoryError)"})
    try:
        code = compile(source, FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: a null byte in the source
        error = "".join(traceback.format_exception_only(exc)).strip()
        return _message({"error_kind": "load_error", "error": error})
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    module = types.ModuleType("candidate")
    module.__file__ = FILENAME
    sys.modules["candidate"] = module
    results: list[object] = []
    try:
        exec(code, module.__dict__)
        function = getattr(module, entry, None)
        if not callable(function):
            return _message({"error_kind": "load_error", "error": f"no function {entry!r}"})
        results.extend(function(*arguments) for arguments in args)
    except MemoryError:  # prepared above: building a message now could fail again
        results.clear()
        return out_of_memory
    except BaseException as exc:  # noqa: BLE001 - the sandbox boundary: what a candidate raises is data
        return _message({"error_kind": "exception", "error": _traceback_tail(exc)})
    try:
        return _message({"values": [_plain(value) for value in results]})
    except MemoryError:
        results.clear()
        return out_of_memory
    except RecursionError:
        return _message({"error_kind": "invalid_output", "error": "result nested too deeply"})
    except _InvalidOutput as exc:
        return _message({"error_kind": "invalid_output", "error": str(exc)})


def _message(content: dict[str, Any]) -> bytes:
    try:
        return json.dumps(content, ensure_ascii=False, allow_nan=False).encode()
    except ValueError as exc:  # lone surrogates in a string
        return _message({"error_kind": "invalid_output", "error": f"not plain data: {exc}"})


def _plain(value: object, path: str = "result") -> Any:
    """Plain JSON data: tuples (and NamedTuples) become lists; anything else is refused.

    Types are read with ``type()`` and converted with the base types' own methods, so that no
    method a candidate overrides runs here.
    """
    kind = type(value)
    if value is None or kind is bool:
        return value
    if issubclass(kind, int):
        return int.__int__(cast(int, value))
    if issubclass(kind, float):
        number = float.__float__(cast(float, value))
        if not math.isfinite(number):
            raise _InvalidOutput(f"{path} is {number!r}, not a finite number")
        return number
    if issubclass(kind, str):
        return str.__str__(cast(str, value))
    if issubclass(kind, list | tuple):
        items = (
            list.__iter__(cast(list[object], value))
            if issubclass(kind, list)
            else tuple.__iter__(cast(tuple[object, ...], value))
        )
        return [_plain(item, f"{path}[{index}]") for index, item in enumerate(items)]
    if issubclass(kind, dict):
        pairs = list(dict.items(cast(dict[object, object], value)))
        if not all(type(key) is str for key, _ in pairs):
            raise _InvalidOutput(f"{path} has a key that is not a string")
        return {key: _plain(item, f"{path}[{key!r}]") for key, item in pairs}
    raise _InvalidOutput(f"{path} is a {kind.__name__}, not plain data")


def _traceback_tail(exc: BaseException) -> str:
    frames = exc.__traceback__
    while frames is not None and frames.tb_frame.f_code.co_filename != FILENAME:
        frames = frames.tb_next  # skip this module's frames; the candidate's are what matter
    text = "".join(traceback.format_exception(type(exc), exc, frames or exc.__traceback__))
    return text[-TRACEBACK_CHARS:]
