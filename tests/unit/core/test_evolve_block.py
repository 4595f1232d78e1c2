"""The EVOLVE-BLOCK layout: one reading of the markers, in characters and in lines."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START, is_marker, layout

TWO_REGIONS = (
    f"A = 1\n{EVOLVE_START}\nB = 2\n{EVOLVE_END}\nC = 3\n"
    f"{EVOLVE_START}\nD = 4\nE = 5\n{EVOLVE_END}\n"
)


def test_each_region_is_the_lines_between_a_start_and_its_end() -> None:
    editable = layout(TWO_REGIONS)
    assert editable.marked
    assert editable.spans == (
        (TWO_REGIONS.index("B = 2"), TWO_REGIONS.index("B = 2") + len("B = 2\n")),
        (TWO_REGIONS.index("D = 4"), TWO_REGIONS.index("E = 5") + len("E = 5\n")),
    )
    assert [region.lines for region in editable.regions] == [(2, 3), (6, 8)]
    assert editable.region_texts() == ("B = 2\n", "D = 4\nE = 5\n")


def test_an_unmarked_source_is_one_region_holding_everything() -> None:
    editable = layout("x = 1\n")
    assert not editable.marked
    assert editable.spans == ((0, 6),)
    assert [region.lines for region in editable.regions] == [(0, 2)]  # "x = 1" and ""


def test_markers_without_a_complete_pair_leave_nothing_editable() -> None:
    for source in (
        f"x = 1\n{EVOLVE_END}\ny = 2\n",  # an END alone
        f"x = 1\n{EVOLVE_START}\ny = 2\n",  # a START never closed
    ):
        editable = layout(source)
        assert editable.marked and editable.regions == (), source
        assert editable.region_of_lines(0, 0) is None
        assert not editable.holds(0, 1)


def test_a_second_start_restarts_the_open_region() -> None:
    source = f"{EVOLVE_START}\na = 1\n{EVOLVE_START}\nb = 2\n{EVOLVE_END}\n"
    assert layout(source).region_texts() == ("b = 2\n",)


def test_lines_and_characters_name_the_same_region() -> None:
    editable = layout(TWO_REGIONS)
    second = editable.regions[1]
    assert editable.region_of_lines(6, 7) == second
    assert editable.region_of_lines(5, 6) is None  # the START marker line is fixed
    assert editable.region_of_lines(7, 8) is None  # so is the END marker line
    assert editable.holds(second.start, second.end)
    assert not editable.holds(second.start - 1, second.end)


def test_markers_may_be_indented_and_carry_a_note() -> None:
    assert is_marker(f"    {EVOLVE_START} (edit freely)")
    assert is_marker(f"{EVOLVE_END}  ")
    assert not is_marker("# EVOLVE-BLOCK")


LINE = st.sampled_from(["a = 1", "", "  b = 2", EVOLVE_START, EVOLVE_END, f"  {EVOLVE_END} x"])


@given(st.lists(LINE, max_size=14), st.booleans())
def test_every_region_reads_the_same_in_lines_and_in_characters(
    lines: list[str], trailing_newline: bool
) -> None:
    source = "\n".join(lines) + ("\n" if trailing_newline else "")
    editable = layout(source)
    split = source.split("\n")
    for region in editable.regions:
        text = source[region.start : region.end]
        if editable.marked:  # a marked region ends where its END line starts
            assert text == "".join(
                line + "\n" for line in split[region.first_line : region.end_line]
            )
        else:
            assert text == "\n".join(split[region.first_line : region.end_line])
        if region.end_line > region.first_line:
            assert editable.region_of_lines(region.first_line, region.end_line - 1) == region
    assert editable.splice(editable.region_texts()) == source
    assert len(editable.fixed_parts()) == len(editable.regions) + 1
