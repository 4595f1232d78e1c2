"""Kernel-enforced confinement of a sandboxed child: Landlock and a seccomp filter.

Stdlib-only, like :mod:`._cage`, which applies both after it has dropped privileges and set
``no_new_privs`` (which both need) and before it reads its request. Neither needs root, so they are
the layers that still hold where namespaces and an unprivileged uid are not available:

- Landlock (Linux 5.13+): the child may write only beneath its own call directory (and the
  server's private ``/dev/shm``, where it has one), read only the Python installation (without
  this project's package), its own ``/proc/<pid>`` and a few device files (not ``/proc`` of other
  processes, not ``/tmp``, not the worker's files), execute only the interpreter (and its ELF
  loader: ``subprocess.run([sys.executable, ...])`` works, ``/bin/sh`` or a binary written in the
  call directory does not; the loader can still map any file it may read, as ``ctypes`` can, and
  what runs so is held by the same rules), open no TCP connection (ABI 4+) and signal no process
  outside its own domain (ABI 6+).
- seccomp: ``socket()`` fails for every address family (so no TCP, UDP, Unix or netlink socket),
  and so do the calls that reach into other processes (ptrace, process_vm_readv/writev,
  pidfd_getfd), namespaces and mounts, io_uring (whose requests would bypass this filter), bpf,
  perf events, userfaultfd, the kernel keyring, and System V IPC and POSIX message queues (which
  outlive a process: a candidate could otherwise leave state there for its next evaluation).

:func:`prepare` (in the server, once) finds which of them the kernel offers and prepares them;
:func:`confine` (in each child) applies them and raises OSError when one fails, so that a child
never runs a candidate less confined than announced.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import struct
import sys
from collections.abc import Sequence

# ----------------------------------------------------------------------------- seccomp

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_KILL_PROCESS = 0x80000000
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K
SECCOMP_DATA_NR = 0  # offsetof(struct seccomp_data, nr)
SECCOMP_DATA_ARCH = 4  # offsetof(struct seccomp_data, arch)
X32_SYSCALL_BIT = 0x40000000

# Denied system calls per machine: (audit arch, {name: number}).
DENIED: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "socket": 41,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
            "io_uring_setup": 425,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "shmget": 29,
            "shmat": 30,
            "semget": 64,
            "msgget": 68,
            "mq_open": 240,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
            "io_uring_setup": 425,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "shmget": 194,
            "shmat": 196,
            "semget": 190,
            "msgget": 186,
            "mq_open": 180,
        },
    ),
}


class _SockFilter(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


def _seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """BPF: kill a foreign-architecture call, fail the denied ones with EPERM, allow the rest."""
    arch, denied = DENIED[machine]
    numbers = sorted(denied.values())
    program = [
        (BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),  # e.g. i386 calls on x86_64
        (BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
    ]
    x32 = machine == "x86_64"  # x32 calls (this bit set) reach the same code: deny them all
    deny = len(program) + int(x32) + len(numbers) + 1  # index of the EPERM return

    def to_deny(index: int) -> int:  # a jump offset counts from the next instruction
        return deny - index - 1

    if x32:
        program.append((BPF_JGE_K, to_deny(len(program)), 0, X32_SYSCALL_BIT))
    for number in numbers:
        program.append((BPF_JEQ_K, to_deny(len(program)), 0, number))
    program.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    program.append((BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM))
    assert len(program) == deny + 1
    return program


def _seccomp_filter() -> _SockFprog:
    program = _seccomp_program(platform.machine())
    filters = (_SockFilter * len(program))(*(_SockFilter(*row) for row in program))
    fprog = _SockFprog(len(program), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    fprog._keep = filters  # the pointer does not own the array
    return fprog


def _install_seccomp(fprog: _SockFprog, *, libc: ctypes.CDLL) -> None:
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")


# ----------------------------------------------------------------------------- Landlock

SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on x86_64 and aarch64
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
FS_ALL_V1 = (1 << 13) - 1  # execute .. make_sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI 6
READ_ONLY = FS_READ_FILE | FS_READ_DIR  # execution is granted to the interpreter's files only
RUN = FS_EXECUTE | FS_READ_FILE
FILE_ACCESS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
# Read-only outside the Python installation: shared libraries, the loader's cache, the clock, the
# CPU count (os.cpu_count(), which multiprocessing.Pool() asks).
SYSTEM_READ = (
    "/usr",
    "/lib",
    "/lib64",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/sys/devices/system/cpu/online",
)
DEVICES_READ = ("/dev/zero", "/dev/urandom", "/dev/random")
DEVICES_WRITE = ("/dev/null",)
PT_INTERP = 3  # the ELF program header naming the loader


def landlock_abi(libc: ctypes.CDLL) -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    version = libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION
    )
    return max(int(version), 0)


def _handled_fs(abi: int) -> int:
    handled = FS_ALL_V1
    for since, bit in ((2, FS_REFER), (3, FS_TRUNCATE), (5, FS_IOCTL_DEV)):
        if abi >= since:
            handled |= bit
    return handled


def _install_landlock(call_dir: str, *, plan: Plan, libc: ctypes.CDLL) -> None:
    abi = plan.abi
    handled = _handled_fs(abi)
    writable = handled & ~FS_EXECUTE  # what is written there can be read, never run
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0  # no rule: every TCP port denied
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("=QQQ", handled, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "cannot create a Landlock ruleset")
    try:
        for path in (*plan.read_paths, f"/proc/{os.getpid()}"):
            _allow(ruleset, path, READ_ONLY, handled=handled, libc=libc)
        for path in (*DEVICES_READ, *plan.read_files):
            _allow(ruleset, path, FS_READ_FILE, handled=handled, libc=libc)
        for path in plan.run_files:
            _allow(ruleset, path, RUN, handled=handled, libc=libc)
        for path in DEVICES_WRITE:
            _allow(ruleset, path, FS_READ_FILE | FS_WRITE_FILE, handled=handled, libc=libc)
        for path in plan.device_files:  # a GPU's device files: opened, written and ioctl'd
            access = FS_READ_FILE | FS_WRITE_FILE | FS_IOCTL_DEV
            _allow(ruleset, path, access, handled=handled, libc=libc)
        if plan.shm_dir is not None:
            _allow(ruleset, plan.shm_dir, writable, handled=handled, libc=libc, required=True)
        _allow(ruleset, call_dir, writable, handled=handled, libc=libc, required=True)
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot enforce the Landlock ruleset")
    finally:
        os.close(ruleset)


def _python_paths() -> set[str]:
    """Where the interpreter and the modules a candidate may import live, but this project.

    The project's own package is left out (its siblings are allowed one by one), so a candidate
    cannot import the evaluator's code or tables however it spells the import; the modules of it
    that the server had already imported are in memory and hold nothing of the worker.
    """
    project = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    roots = {os.path.dirname(sys.executable), *(path for path in sys.path if path)}
    allowed: set[str] = set()
    for root in roots:
        allowed.update(all_but(os.path.realpath(root), project))
    return allowed


def _interpreter_files(read_paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """The files a child needs, beyond ``read_paths``, to run the interpreter again: to execute,
    the interpreter and its ELF loader; to read, the shared libraries this process mapped (say a
    ``libpython`` beside the standard library) and the virtual environment's ``pyvenv.cfg``."""
    executable = os.path.realpath(sys.executable)
    run = [executable]
    loader = _elf_interpreter(executable)
    if loader is not None:
        run.append(os.path.realpath(loader))
    mapped: set[str] = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[4] != "0" and fields[5].startswith("/"):
                    mapped.add(os.path.realpath(fields[5].strip()))
    except OSError:
        pass
    venv = os.path.dirname(os.path.abspath(sys.executable))
    configs = {os.path.join(folder, "pyvenv.cfg") for folder in (venv, os.path.dirname(venv))}
    roots = tuple(path.rstrip(os.sep) + os.sep for path in read_paths)
    read = sorted(
        path
        for path in mapped | {os.path.realpath(config) for config in configs}
        if path not in run and not path.startswith(roots) and os.path.isfile(path)
    )
    return [path for path in run if os.path.isfile(path)], read


def _elf_interpreter(path: str) -> str | None:
    """The loader a 64-bit little-endian ELF executable names (PT_INTERP); None if none."""
    try:
        with open(path, "rb") as elf:
            header = elf.read(64)
            if header[:6] != b"\x7fELF\x02\x01":  # ELF, 64-bit, little-endian
                return None
            (table,) = struct.unpack_from("<Q", header, 32)  # e_phoff
            size, count = struct.unpack_from("<HH", header, 54)  # e_phentsize, e_phnum
            for index in range(count):
                elf.seek(table + index * size)
                kind, _, offset, _, _, length = struct.unpack("<IIQQQQ", elf.read(40))
                if kind == PT_INTERP:
                    elf.seek(offset)
                    return elf.read(length).split(b"\0", 1)[0].decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def all_but(path: str, excluded: str) -> list[str]:
    """Paths that together cover ``path`` and everything beneath it except ``excluded``."""
    if path == excluded:
        return []
    if not excluded.startswith(path.rstrip(os.sep) + os.sep):
        return [path]
    try:
        entries = os.listdir(path)
    except OSError:
        return []
    covered: list[str] = []
    for entry in entries:
        covered.extend(all_but(os.path.join(path, entry), excluded))
    return covered


def _allow(
    ruleset: int, path: str, access: int, *, handled: int, libc: ctypes.CDLL, required: bool = False
) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        if required:
            raise
        return  # a path this machine lacks (say /lib64): nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FILE_ACCESS  # directory rights on a file are refused by the kernel
        rule = struct.pack("=Qi", access & handled, fd)
        buffer = ctypes.create_string_buffer(rule, len(rule))
        if libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, buffer, 0):
            raise OSError(ctypes.get_errno(), f"cannot add a Landlock rule for {path}")
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- mounts

MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 2, 4, 4096, 16384


def blocked_directories(paths: list[str]) -> dict[str, set[str]]:
    """Directories others cannot search, each with the entries below it that ``paths`` use."""
    blocked: dict[str, set[str]] = {}
    for path in paths:
        parts = os.path.realpath(path).split(os.sep)[1:]
        for depth in range(1, len(parts)):
            ancestor = os.sep + os.sep.join(parts[:depth])
            if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                blocked.setdefault(ancestor, set()).add(os.path.join(ancestor, parts[depth]))
                break
    return blocked


def expose(blocked: dict[str, set[str]], *, libc: ctypes.CDLL) -> bool:
    """Cover each blocked directory with a tmpfs, binding back its entries that are needed.
    Call in the server's own mount namespace only."""
    if not blocked:
        return False
    for directory, entries in blocked.items():
        handles = {entry: os.open(entry, os.O_PATH) for entry in entries}
        flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV)
        if libc.mount(b"tmpfs", directory.encode(), b"tmpfs", flags, b"mode=755,size=1m") != 0:
            return False
        for entry, handle in handles.items():
            if os.path.isdir(f"/proc/self/fd/{handle}"):
                os.mkdir(entry)
            else:
                os.close(os.open(entry, os.O_CREAT | os.O_WRONLY, 0o644))
            source = f"/proc/self/fd/{handle}".encode()
            if libc.mount(source, entry.encode(), None, ctypes.c_ulong(MS_BIND | MS_REC), None):
                return False
            os.close(handle)
    return True


# ----------------------------------------------------------------------------- entry points


class Plan:
    """The confinement the server prepares once, so that each child only makes system calls."""

    def __init__(
        self, libc: ctypes.CDLL, *, landlock: bool, seccomp: bool, shm_dir: str | None = None
    ) -> None:
        self.abi = landlock_abi(libc) if landlock else 0  # 0: no Landlock
        self.read_paths = sorted({*SYSTEM_READ, *_python_paths()}) if self.abi else []
        self.run_files, self.read_files = (
            _interpreter_files(self.read_paths) if self.abi else ([], [])
        )
        self.shm_dir = shm_dir  # writable too: a /dev/shm of the server's own, emptied per call
        self.device_files: list[str] = []  # device files that may be written and ioctl'd
        seccomp = seccomp and platform.machine() in DENIED
        self.seccomp = _seccomp_filter() if seccomp else None

    @property
    def layers(self) -> dict[str, bool]:
        return {"landlock": self.abi > 0, "seccomp": self.seccomp is not None}


def prepare(
    libc: ctypes.CDLL, *, wanted: frozenset[str], call_dir: str, shm_dir: str | None = None
) -> Plan:
    """The plan of the layers (``landlock``, ``seccomp``) that are ``wanted`` and that a child
    can apply here: tried in a throwaway forked child, since both are irreversible. ``shm_dir``:
    a private ``/dev/shm`` that children may write (POSIX semaphores), or None."""
    landlock, seccomp = "landlock" in wanted, "seccomp" in wanted
    plan = Plan(libc, landlock=landlock, seccomp=seccomp, shm_dir=shm_dir)
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
            confine(call_dir, plan=plan, libc=libc)
            status = 0
        finally:
            os._exit(status)
    if os.waitpid(pid, 0)[1] != 0:
        return Plan(libc, landlock=False, seccomp=False, shm_dir=shm_dir)
    return plan


def confine(call_dir: str, *, plan: Plan, libc: ctypes.CDLL) -> None:
    """Apply the plan; OSError if a layer cannot be applied. Needs no_new_privs."""
    if plan.abi:
        _install_landlock(call_dir, plan=plan, libc=libc)
    if plan.seccomp is not None:
        _install_seccomp(plan.seccomp, libc=libc)
