"""Drawing shared by the live page's /mjpeg tiles and `framebus render` (OpenCV, in place)."""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt


def dashed_rectangle(
    image: npt.NDArray[np.uint8],
    top_left: tuple[int, int],
    bottom_right: tuple[int, int],
    colour: tuple[int, int, int],
    thickness: int,
) -> None:
    """A rectangle outlined in dashes (OpenCV draws only solid lines), in place."""
    (x1, y1), (x2, y2) = top_left, bottom_right
    dash = max(4, 3 * thickness)
    edges = (((x1, y1), (x2, y1)), ((x1, y2), (x2, y2)), ((x1, y1), (x1, y2)), ((x2, y1), (x2, y2)))
    for (ax, ay), (bx, by) in edges:
        length = max(bx - ax, by - ay)
        for start in range(0, length, 2 * dash):
            end = min(start + dash, length)
            p = (ax + start, ay) if by == ay else (ax, ay + start)
            q = (ax + end, ay) if by == ay else (ax, ay + end)
            cv2.line(image, p, q, colour, thickness)
