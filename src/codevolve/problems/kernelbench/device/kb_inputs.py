"""The inputs a KernelBench candidate is judged on (trusted code of the judge).

- ``kernelbench``: ``torch.manual_seed(s); get_inputs()`` as the reference file writes it, for a
  seed ``s`` the judge draws in secret;
- ``signed``: the same values with a random sign on every element of every floating tensor (a
  kernel that is right only for the non-negative ``torch.rand`` inputs fails here);
- ``wide``: the signed values times 100 (overflow, cancellation, precision lowered to 16 bits).

Signs and scale change values, never the structure ``get_inputs`` built: zeros stay zeros, so a
triangular or masked input stays triangular or masked, and a kernel that rightly skips the zero
half of a triangular matrix is not failed by inputs its problem never has. (A redraw from a
normal, the first design, filled those zeros and failed such kernels wrongly.)

Integer and non-tensor inputs are kept (indices, sizes, labels stay valid). The seeds of
``get_inputs`` and the redraws come from the judge's own generators, salted with a secret of
the judging: the candidate runs in another process and knows only the seed its model is built
under, from which nothing here can be derived. ``get_inputs`` and ``get_init_inputs`` run
under ``with torch.device(device)``: KernelBench inputs can be gigabytes, and drawing them on
the CPU takes seconds.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from codevolve.evaluator_workers.errors import WorkerError
from codevolve.evaluator_workers.gpu.remote import Remote
from codevolve.evaluator_workers.gpu.shared_tensors import tensors_in
from codevolve.problems.kernelbench.device.kb_loader import ReferenceProgram
from codevolve.problems.kernelbench.device.kb_watch import raise_if_context_broken

KERNELBENCH = "kernelbench"
SIGNED = "signed"
WIDE = "wide"
DISTRIBUTIONS = (KERNELBENCH, SIGNED, WIDE)
WIDE_SCALE = 100.0
SIGN_CHUNK = 1 << 26  # elements signed at a time: a sign tensor as large as a GB-sized input
# would double its memory
_SEED_SPACE = 2**62


class ReferenceFailure(WorkerError):
    """The user's reference failed to construct, to draw its inputs or to run: its own bug,
    reported as the reply's ``load_error``."""


@dataclass(frozen=True, slots=True)
class JudgeRandom:
    """The judge's own generators for one (seed, distribution): reproducible, and never held by
    the candidate's code. Values are drawn on the device; the fresh seeds of get_inputs on the
    CPU (reading a number drawn on the GPU would wait for the GPU)."""

    values: torch.Generator
    seeds: torch.Generator

    @property
    def device(self) -> str:
        return self.values.device.type


def judge_random(seed: int, distribution: str, device: str, *, salt: int = 0) -> JudgeRandom:
    """The generators of one (seed, distribution). ``salt``: a secret of the judging (drawn
    with :mod:`secrets` by the judge), so that no candidate can tell the inputs from the seed,
    which it knows (it builds its model under it)."""
    start = (seed * 1_000_003 + DISTRIBUTIONS.index(distribution) + 1 + salt) % _SEED_SPACE
    values, seeds = torch.Generator(device=device), torch.Generator()
    values.manual_seed(start)
    seeds.manual_seed(start + 1)
    return JudgeRandom(values, seeds)


def construct(remote: Remote, seed: int, init: list[Any]) -> None:
    """Build the program's model in its runner from ``init`` (staged in the arena) under
    ``seed`` (kb_role.py's ``construct``)."""
    remote.arena.reset()
    remote.ask({"op": "construct", "seed": seed, "init": remote.stage(init)[0]})


def init_inputs(reference: ReferenceProgram, seed: int, device: str) -> list[Any]:
    """``get_init_inputs()`` drawn under ``seed``, its tensors on ``device``."""
    return _drawn(reference.get_init_inputs, seed, device, "get_init_inputs")


def draw_inputs(
    reference: ReferenceProgram, distribution: str, seed: int, rng: JudgeRandom
) -> list[Any]:
    """Inputs of ``distribution`` on the device of ``rng``: ``get_inputs()`` under a seed drawn
    from ``rng`` (secret to the candidate), then signed or scaled. ``seed`` names the judging's
    seed in errors only."""
    del seed
    drawn_seed = int(torch.randint(0, _SEED_SPACE, (1,), generator=rng.seeds))
    values = _drawn(reference.get_inputs, drawn_seed, rng.device, "get_inputs")
    _redraw(values, distribution, rng.values)
    return values


def refill(
    values: list[Any], reference: ReferenceProgram, distribution: str, rng: JudgeRandom
) -> None:
    """New values of the same distribution in the same tensors (``copy_``): a candidate that
    keeps its first output, or one per input address, now returns a stale one."""
    seed = int(torch.randint(0, _SEED_SPACE, (1,), generator=rng.seeds))
    fresh = _drawn(reference.get_inputs, seed, rng.device, "get_inputs")
    olds, news = tensors_in(values), tensors_in(fresh)
    if [t.shape for t in olds] != [t.shape for t in news]:
        raise ReferenceFailure("get_inputs() returns other shapes under another seed")
    for old, new in zip(olds, news, strict=True):
        old.copy_(new)
    _redraw(values, distribution, rng.values)


def _drawn(function: Any, seed: int, device: str, name: str) -> list[Any]:
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            values = list(function())
    except Exception as exc:  # the user's reference: its bug is a reported result
        raise_if_context_broken(device)
        raise ReferenceFailure(f"{name}() raised {type(exc).__name__}: {exc}") from exc
    return [_on(v, device) for v in values]


def _on(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value if value.device.type == device else value.to(device)
    if isinstance(value, list | tuple):
        moved = [_on(item, device) for item in value]
        return tuple(moved) if isinstance(value, tuple) else moved
    return copy.deepcopy(value)


def _redraw(values: list[Any], distribution: str, generator: torch.Generator) -> None:
    if distribution == KERNELBENCH:
        return
    scale = WIDE_SCALE if distribution == WIDE else 1.0
    for tensor in tensors_in(values):
        if tensor.is_floating_point():
            _sign(tensor, scale, generator)


def _sign(tensor: torch.Tensor, scale: float, generator: torch.Generator) -> None:
    """Multiply every element by a random sign and by ``scale``, in place, a chunk at a time."""
    if tensor.is_contiguous():
        flat = tensor.view(-1)
        chunks = [flat[i : i + SIGN_CHUNK] for i in range(0, flat.numel(), SIGN_CHUNK)]
    else:
        chunks = [tensor]
    for chunk in chunks:
        signs = torch.randint(
            0, 2, chunk.shape, generator=generator, device=chunk.device, dtype=chunk.dtype
        )
        chunk.mul_(signs.mul_(2).sub_(1)).mul_(scale)
