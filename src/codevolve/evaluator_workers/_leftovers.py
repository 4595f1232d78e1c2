"""What a sandboxed call may leave behind outside its directory, removed by the fork server.

Where Landlock and seccomp hold, a child can leave nothing outside its call directory. Where they
do not, a child (under the server's unprivileged uid) can still create files in the world-writable
directories and System V IPC objects, and read them again in a later call: state that survives
from one evaluation to the next. The server, after each call, removes the files that uid owns at
the top of those directories and, in its private IPC namespace (which holds only its children's
objects), every System V object. Stdlib-only, like the rest of the server.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil

SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable on any Linux
IPC_RMID = 0
SYSV_TABLES = ("shm", "sem", "msg")  # /proc/sysvipc/<table>: key, id, ...


def remove_files_of(uid: int) -> None:
    """Remove what ``uid`` created at the top of the shared writable directories."""
    for directory in SHARED_WRITABLE:
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)


def empty(directory: str) -> None:
    """Remove everything in ``directory`` (a tmpfs of the server's own), keeping it."""
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)


def remove_ipc_objects(libc: ctypes.CDLL) -> None:
    """Remove every System V shared memory segment, semaphore set and message queue of this
    process's IPC namespace (call only in a namespace of the server's own)."""
    for table in SYSV_TABLES:
        try:
            with open(f"/proc/sysvipc/{table}") as listing:
                rows = listing.read().splitlines()[1:]  # a header line first
        except OSError:
            continue
        for row in rows:
            ident = int(row.split()[1])
            if table == "shm":
                libc.shmctl(ident, IPC_RMID, None)
            elif table == "sem":
                libc.semctl(ident, 0, IPC_RMID)
            else:
                libc.msgctl(ident, IPC_RMID, None)
