"""The gemm-kernel-gpu role of a runner: a launch function ``matmul(x, w, y, workspace,
num_sms)`` run on buffers the judge owns (runner_role.py says what a role is).

Runs inside the runner, after its cage is up (runner.py): the candidate's module is loaded here
through kernel_loader's filter (a cut builtins table, imports of Triton and ``math`` only, no
dunder names unless the judge switched the source rules off in tests). The filter gives clear
messages; the cage is the wall. A trusted role (``trusted``) holds cuBLAS instead, as
``torch.matmul(x, w.T, out=y)``, so the reference is timed through the very same path.

Every buffer is a view of the judge's arena (shared_tensors.py): the runner allocates no input
or output, writes ``y`` and the workspace in place and answers with no data; the judge reads
what was written from its own memory once the runner is stopped. Requests:

- ``kernel.go``: ``{"rounds": [{"x", "w", "y"}], "workspace", "num_sms"}`` (rounds optional:
  the staged ones otherwise) calls the entry point once per round and waits for the device;
- ``kernel.stage``: the same descriptions, kept for timed batches; with ``graph`` on CUDA the
  rounds are run once (Triton compiles here, into the source's cache folder) and then captured
  into one CUDA graph that each later ``kernel.go`` replays: no Python launch overhead inside
  the judge's clock. A capture that fails leaves eager calls (the reply says why).

Imported only in runners (needs torch).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from codevolve.evaluator_workers.gpu import shared_tensors
from codevolve.evaluator_workers.gpu.runner_role import Op, ProgramProblem, RoleContext
from codevolve.evaluator_workers.gpu.source_loader import LoadError
from codevolve.problems.gemm_kernel_gpu.device.kernel_loader import ENTRY_POINT, KernelLoader

ROLE = __name__  # what the judge names in its load requests
MESSAGE_CHARS = 300  # of a candidate's exception message

_synchronize = torch.cuda.synchronize  # bound before any candidate runs in this process


def warm() -> None:
    """In the zygote: Triton imported once for every runner it forks (a program's first import
    of it in its runner took about a second of the timing lane)."""
    import triton.language  # noqa: F401 - imported for the forks


def cublas(x: Any, w: Any, y: Any, workspace: Any, num_sms: int) -> None:
    """The reference: cuBLAS (or the CPU's BLAS) into the judge's output buffer."""
    del workspace, num_sms
    torch.matmul(x, w.t(), out=y)


def load(message: dict[str, Any], context: RoleContext) -> KernelRole | str:
    """The role for a ``load`` request, or why the source gave no entry point."""
    if message.get("trusted"):
        return KernelRole(cublas, context.arena, context.device, trusted=True)
    loader = KernelLoader(Path(context.scratch) / "programs", rules=context.rules)
    entry = loader.load(str(message["source"]))
    if isinstance(entry, LoadError):
        return entry.message
    return KernelRole(entry, context.arena, context.device, trusted=False)


class KernelRole:
    """One launch function, its staged rounds and, on CUDA, their captured graph."""

    def __init__(self, entry: Callable[..., Any], arena: Any, device: str, *, trusted: bool):
        self.entry = entry
        self.arena = arena
        self.device = device
        self.who = "cuBLAS" if trusted else ENTRY_POINT
        self.rounds: list[tuple[Any, Any, Any]] = []
        self.workspace: Any = None
        self.num_sms = 1
        self.graph: Any = None

    def ops(self) -> dict[str, Op]:
        return {"kernel.go": self.go, "kernel.stage": self.stage}

    def stage(self, message: dict[str, Any]) -> dict[str, Any]:
        self._resolve(message)
        self.graph = None
        if not message.get("graph") or self.device != "cuda":
            return {"graph": False, "why": "" if self.device == "cuda" else "on the CPU"}
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._calls()  # compiles; a first call on a side stream, as capture wants
        _synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._calls()
        except ProgramProblem:
            raise
        except Exception as exc:  # noqa: BLE001 - a launcher that cannot be captured runs eagerly
            _synchronize()
            return {"graph": False, "why": f"{type(exc).__name__}: {str(exc)[:200]}"}
        self.graph = graph
        return {"graph": True, "why": ""}

    def go(self, message: dict[str, Any]) -> dict[str, Any]:
        if "rounds" in message:
            self._resolve(message)
            self.graph = None
        if self.graph is not None:
            self.graph.replay()
        else:
            self._calls()
        if self.device == "cuda":
            _synchronize()
        return {"done": len(self.rounds)}

    def _resolve(self, message: dict[str, Any]) -> None:
        def tensor(spec: Any) -> Any:
            return self.arena.tensor(spec if isinstance(spec, dict) else {})

        try:
            self.rounds = [
                (tensor(r.get("x")), tensor(r.get("w")), tensor(r.get("y")))
                for r in message["rounds"]
            ]
            self.workspace = tensor(message.get("workspace"))
        except shared_tensors.SharingError as exc:
            raise ValueError(f"the judge's description: {exc}") from None  # the judge's bug
        self.num_sms = int(message.get("num_sms", 1))

    def _calls(self) -> None:
        for x, w, y in self.rounds:
            try:
                self.entry(x, w, y, self.workspace, self.num_sms)
            except Exception as exc:  # noqa: BLE001 - the candidate's error is its result
                lines = str(exc).strip().splitlines() or [""]
                text = f"{self.who} raised {type(exc).__name__}: {lines[0][:MESSAGE_CHARS]}"
                raise ProgramProblem(text) from None
