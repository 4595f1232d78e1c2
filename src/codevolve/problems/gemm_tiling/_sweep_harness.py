"""Calls a candidate's ``choose_config`` on every shape of one part of the legality sweep.

This file is never imported by codevolve: its text is sent to the sandbox, which loads it in a
fresh forked child and calls :func:`sweep`; only there does the candidate run. Standard library
only. It exists because the sweep asks tens of thousands of shapes per child: sent back one by
one, the answers would cost more to encode, send and decode than to compute. So the answers stay
here and only their runs come back: per (N, K), the M at which the answer changes and the
config from there on, each distinct config once. Trusted code judges every distinct config, and
names the smallest M that returned one that is not valid or cannot launch.

The shapes are asked in a scrambled order (a seeded stride through each (N, K)'s M values), not
M ascending, so that an answer which depends on what was asked before differs from the answer
the separate grid call got for the same shape; trusted code compares the two.

Replies (plain data): ``{"configs": [[six ints], ...], "runs": [[n, k, m, config index], ...],
"calls": count}``; or, at the smallest M of the first pair whose answer is not six ints, ``{"at":
[m, n, k], "value": value}`` (a list of plain scalars) or ``{"at": [m, n, k], "kind": what it
is}``; or, at the smallest such M that raises, ``{"at": [m, n, k], "raised": text}``.
"""

from __future__ import annotations

import math
import types
from typing import Any

PROGRAM_FILE = "program.py"  # the candidate's file name in its tracebacks, not the harness's
FIELDS = 6
ERROR_CHARS = 200  # characters kept of an exception's text
PLAIN = (bool, int, float, str, type(None))  # scalars that travel as they are


def sweep(source: str, entry: str, pairs: list[list[Any]], seed: int) -> dict[str, Any]:
    """Ask ``entry(M, N, K)`` for every shape of ``pairs``: ``[n, k, dense_to, extra]`` asks
    every M in 1..dense_to, then each M of ``extra`` (ascending, all above dense_to)."""
    module = types.ModuleType("candidate")
    module.__file__ = "candidate.py"  # as the sandbox's own loading of the candidate sets it
    exec(compile(source, PROGRAM_FILE, "exec", dont_inherit=True), module.__dict__)
    choose = getattr(module, entry)
    configs: dict[tuple[int, ...], int] = {}
    runs: list[list[int]] = []
    calls = 0
    for step, (n, k, dense_to, extra) in enumerate(pairs):
        ms = [*range(1, dense_to + 1), *extra]
        count = len(ms)
        stride, start = _stride(count, seed + step), (seed * 7919 + step) % count
        order = [(start + i * stride) % count for i in range(count)]
        answers = _ask(choose, n, k, [ms[i] for i in order], configs)
        if isinstance(answers, dict):  # a fault: the smallest M that has one is the one to name
            first = _ask(choose, n, k, ms[: ms.index(answers["at"][0]) + 1], configs)
            return first if isinstance(first, dict) else answers
        by_m = [0] * count
        for position, index in zip(order, answers, strict=True):
            by_m[position] = index
        calls += count
        previous = -1
        for m, index in zip(ms, by_m, strict=True):
            if index != previous:
                runs.append([n, k, m, index])
                previous = index
    return {"configs": [list(key) for key in configs], "runs": runs, "calls": calls}


def _ask(
    choose: Any, n: int, k: int, ms: list[int], configs: dict[tuple[int, ...], int]
) -> list[int] | dict[str, Any]:
    """The index in ``configs`` (grown as new ones come) of each answer for ``ms`` in order, or
    the first fault: an exception, or an answer that is not six ints."""
    answers = []
    tuple_kinds = {tuple}  # types known to be tuples: their items are read by slicing as a tuple
    whole, as_tuple, ints = slice(None), tuple.__getitem__, (int,) * FIELDS
    for m in ms:
        try:
            value = choose(m, n, k)
        except Exception as exc:  # noqa: BLE001 - what the candidate raises is the answer here
            return {"at": [m, n, k], "raised": _describe(exc)}
        kind = type(value)
        key = as_tuple(value, whole) if kind in tuple_kinds else None
        if key is None or tuple(map(type, key)) != ints:  # the fast path: six exact ints
            key = _six_ints(value)
            if key is None:
                return {"at": [m, n, k], **_shown(value)}
            if issubclass(kind, tuple):
                tuple_kinds.add(kind)
        index = configs.get(key)
        if index is None:
            index = configs[key] = len(configs)
        answers.append(index)
    return answers


def _stride(count: int, seed: int) -> int:
    """A step coprime with ``count`` (so that stepping visits every position once), about a
    golden-ratio share of it, varied by the seed."""
    stride = max(1, int(count * 0.618) + seed % 97)
    while math.gcd(stride, count) != 1:
        stride += 1
    return stride


def _six_ints(value: object) -> tuple[int, ...] | None:
    """The answer as six ints, read with the base types' own methods, or None when it is not.

    Ints, and subclasses of int other than bool, count as ints (the sandbox sends those as plain
    ints too); a bool, a float or anything else does not.
    """
    if not issubclass(type(value), list | tuple):
        return None
    items = tuple(_items(value))
    if len(items) != FIELDS:
        return None
    if all(type(item) is int for item in items):
        return items
    if any(type(item) is bool or not issubclass(type(item), int) for item in items):
        return None
    return tuple(int.__int__(item) for item in items)


def _items(value: object) -> list[Any]:
    """The items of a list or tuple (or of a subclass), read without its own methods."""
    if issubclass(type(value), tuple):
        return list(tuple.__iter__(value))  # type: ignore[arg-type]
    return list(list.__iter__(value))  # type: ignore[arg-type]


def _shown(value: object) -> dict[str, Any]:
    """A wrong answer as trusted code may read it: its items when they are plain scalars, else
    what it is."""
    kind = type(value)
    if not issubclass(kind, list | tuple):
        return {"kind": kind.__name__}
    items = _items(value)
    for item in items:
        if type(item) not in PLAIN or (type(item) is float and not math.isfinite(item)):
            return {"kind": f"{kind.__name__} holding a {type(item).__name__}"}
    return {"value": items}


def _describe(exc: Exception) -> str:
    """``Type: message (line N)``, N the last line of the candidate's own code in the traceback."""
    line = None
    frames = exc.__traceback__
    while frames is not None:
        if frames.tb_frame.f_code.co_filename == PROGRAM_FILE:
            line = frames.tb_lineno
        frames = frames.tb_next
    text = f"{type(exc).__name__}: {BaseException.__str__(exc)}"[:ERROR_CHARS]
    return text if line is None else f"{text} (line {line})"
