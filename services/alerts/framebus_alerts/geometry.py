"""Plane geometry of alert rules, in original-frame pixels (x to the right, y down).

- A box is represented by one anchor point: its bottom-centre by default (where a person or
  vehicle touches the ground, which is what a zone drawn on the floor means) or its centre.
- A point on a polygon's edge or vertex counts as inside.
- The side of a point relative to a directed line A->B is the sign of the cross product
  `(Bx - Ax) * (Py - Ay) - (By - Ay) * (Px - Ax)`. With y pointing down, a positive value is on the
  right of the line as seen on screen looking from A towards B; negative is on its left.
"""

from __future__ import annotations

from collections.abc import Sequence

from framebus.messages import Box, ZoneAnchor

Point = tuple[float, float]


def anchor_point(box: Box, anchor: ZoneAnchor) -> Point:
    """The point of a box that is tested against a zone or a line."""
    cx = (box.x1 + box.x2) / 2.0
    if anchor is ZoneAnchor.CENTER:
        return cx, (box.y1 + box.y2) / 2.0
    return cx, box.y2


def point_in_polygon(point: Point, polygon: Sequence[Point]) -> bool:
    """Even-odd ray casting; a point on an edge or vertex counts as inside."""
    x, y = point
    inside = False
    n = len(polygon)
    for i in range(n):
        (x1, y1), (x2, y2) = polygon[i], polygon[(i + 1) % n]
        if _on_segment(x, y, x1, y1, x2, y2):
            return True
        if (y1 > y) != (y2 > y):
            x_cross = x1 + (y - y1) * (x2 - x1) / (y2 - y1)
            if x < x_cross:
                inside = not inside
    return inside


def _on_segment(x: float, y: float, x1: float, y1: float, x2: float, y2: float) -> bool:
    cross = (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1)
    if abs(cross) > 1e-9 * max(1.0, abs(x2 - x1) + abs(y2 - y1)):
        return False
    return min(x1, x2) <= x <= max(x1, x2) and min(y1, y2) <= y <= max(y1, y2)


class Polygon:
    """A zone polygon with a bounding-box pre-test (most points are far from most zones)."""

    def __init__(self, points: Sequence[Point]) -> None:
        self.points = tuple(points)
        xs, ys = [p[0] for p in self.points], [p[1] for p in self.points]
        self._bounds = min(xs), min(ys), max(xs), max(ys)

    def contains(self, point: Point) -> bool:
        """True when the point is inside the polygon or on its boundary."""
        x0, y0, x1, y1 = self._bounds
        inside_bounds = x0 <= point[0] <= x1 and y0 <= point[1] <= y1
        return inside_bounds and point_in_polygon(point, self.points)


def side(point: Point, a: Point, b: Point) -> float:
    """Cross product of A->B and A->P: > 0 right of the line on screen, < 0 left, 0 on it."""
    return (b[0] - a[0]) * (point[1] - a[1]) - (b[1] - a[1]) * (point[0] - a[0])


def crossing_side(p0: Point, p1: Point, a: Point, b: Point) -> int:
    """+1 when the path p0->p1 crosses segment A-B from its left to its right, -1 the other way.

    0 when it does not cross: both ends on one side, an end exactly on the line, or the path
    passes the line's infinite extension beyond A or B. The segment's end points count as on it.
    """
    s0, s1 = side(p0, a, b), side(p1, a, b)
    if s0 == 0 or s1 == 0 or (s0 > 0) == (s1 > 0):
        return 0
    # Where the path meets the infinite line, then whether that point lies between A and B.
    f = s0 / (s0 - s1)
    ix, iy = p0[0] + f * (p1[0] - p0[0]), p0[1] + f * (p1[1] - p0[1])
    dx, dy = b[0] - a[0], b[1] - a[1]
    t = ((ix - a[0]) * dx + (iy - a[1]) * dy) / (dx * dx + dy * dy)
    if not 0.0 <= t <= 1.0:
        return 0
    return 1 if s1 > 0 else -1
