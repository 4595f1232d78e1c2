"""Parsing through the project's one lock, and the memo of sources known to parse."""

from __future__ import annotations

import ast
from collections import OrderedDict

import pytest

from codevolve.core import pysource
from codevolve.core.pysource import check_parses


def _counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    parsed: list[str] = []
    real = ast.parse

    def counting(source: str, *args: object, **kwargs: object) -> ast.AST:
        parsed.append(source)
        return real(source, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pysource.ast, "parse", counting)
    monkeypatch.setattr(pysource, "_PARSED", OrderedDict())  # what other tests parsed is gone
    return parsed


def test_a_source_that_parsed_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting_parses(monkeypatch)
    source = "def f(x):\n    return x + 0.123456789\n"
    check_parses(source)
    check_parses("".join(list(source)))  # an equal string, not the same object
    assert parsed == [source]


def test_a_source_that_does_not_parse_raises_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting_parses(monkeypatch)
    for _ in range(2):
        with pytest.raises(SyntaxError):
            check_parses("def f(:\n")
    with pytest.raises((SyntaxError, ValueError)):  # NUL bytes: which one depends on the version
        check_parses("x = 1\0")
    assert len(parsed) == 3


def test_the_memo_forgets_the_least_recently_checked_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pysource, "PARSED_SOURCES", 2)
    parsed = _counting_parses(monkeypatch)
    first, second, third = "a = 1\n", "b = 2\n", "c = 3\n"
    for source in (first, second, first, third, first, second):
        check_parses(source)
    # `second` was the least recently checked when `third` came, so only it is parsed again.
    assert parsed == [first, second, third, second]
