"""Pack 26 circles into the unit square so that the sum of their radii is as large as possible.

construct_packing() returns (centers, radii): 26 (x, y) pairs and 26 radii. Every circle must
lie inside the square and no two may overlap.
"""

import math

# EVOLVE-BLOCK-START
ROW_COUNTS = (5, 5, 6, 5, 5)  # circles per row, bottom to top: 26 in all
ROW_HEIGHTS = (0.12, 0.31, 0.5, 0.69, 0.88)  # y of each row's centres
ROW_MARGINS = (0.12, 0.12, 0.12, 0.12, 0.12)  # x of each row's first centre from the left wall
ROW_SHIFTS = (0.0, 0.0, 0.0, 0.0, 0.0)  # horizontal offset of each row


def place_centers() -> list[tuple[float, float]]:
    """Each row spreads its circles evenly between its margins."""
    centers = []
    rows = zip(ROW_COUNTS, ROW_HEIGHTS, ROW_MARGINS, ROW_SHIFTS, strict=True)
    for count, y, margin, shift in rows:
        for column in range(count):
            x = margin + column * (1 - 2 * margin) / max(count - 1, 1) + shift
            centers.append((min(max(x, 0.0), 1.0), min(max(y, 0.0), 1.0)))
    return centers


def radii_for(centers: list[tuple[float, float]]) -> list[float]:
    """Each circle reaches the nearest wall, but at most half way to its nearest neighbour."""
    radii = []
    for i, (x, y) in enumerate(centers):
        radius = min(x, y, 1 - x, 1 - y)
        for j, (u, v) in enumerate(centers):
            if i != j:
                radius = min(radius, math.hypot(x - u, y - v) / 2)
        radii.append(max(radius, 0.0))
    return radii


# EVOLVE-BLOCK-END


def construct_packing() -> tuple[list[tuple[float, float]], list[float]]:
    centers = place_centers()
    return centers, radii_for(centers)
