"""The canonical hunk builder every mutation uses: unique SEARCH text, confined to a region."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codevolve.core.diff import occurrences, unique_line_hunk


def test_a_repeated_line_is_widened_with_context_until_unique() -> None:
    source = "a = 1\nx = 0\nb = 2\nx = 0\nc = 3"
    hunk = unique_line_hunk(source, start=3, end=4, new_lines=["x = 9"], region=(0, 5))
    assert hunk is not None
    assert occurrences(source, hunk.search) == 1
    assert source.replace(hunk.search, hunk.replace) == "a = 1\nx = 0\nb = 2\nx = 9\nc = 3"


def test_no_hunk_when_the_region_cannot_make_the_text_unique() -> None:
    source = "x = 0\nx = 0"
    assert unique_line_hunk(source, start=0, end=1, new_lines=["y"], region=(0, 1)) is None


@given(
    st.lists(st.sampled_from(["a", "b", "c", "  d"]), min_size=1, max_size=12),
    st.data(),
)
def test_any_hunk_built_applies_once_and_changes_only_the_chosen_lines(
    lines: list[str], data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(lines) - 1))
    end = data.draw(st.integers(start + 1, len(lines)))
    source = "\n".join(lines)
    hunk = unique_line_hunk(source, start=start, end=end, new_lines=["NEW"], region=(0, len(lines)))
    if hunk is None:
        return
    assert occurrences(source, hunk.search) == 1
    assert source.replace(hunk.search, hunk.replace) == "\n".join(
        [*lines[:start], "NEW", *lines[end:]]
    )
