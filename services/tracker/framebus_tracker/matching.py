"""Which track takes which detection: buffered IoU and a deterministic greedy assignment.

Buffered IoU (C-BIoU, Yang et al. 2023) grows both boxes by `buffer` times their own width and
height on each side before taking the IoU, so two boxes that are close but no longer overlap (an
object sampled at 2 Hz moves more than its width between samples) still score above zero. With
`buffer` 0 it is the plain IoU. Pairs are taken greedily, best first, in rounds of growing
buffers (C-BIoU's cascade). numpy only: a 10 x 10 matrix costs some tens of microseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Boxes = npt.NDArray[np.float64]  # (n, 4): x1, y1, x2, y2 in pixels
Scores = npt.NDArray[np.float64]  # (tracks, detections)
Allowed = npt.NDArray[np.bool_]  # (tracks, detections)


def buffered(boxes: Boxes, buffer: float) -> Boxes:
    """Each box grown by `buffer` x its width (height) on the left and right (top and bottom)."""
    grow = buffer * (boxes[:, 2:] - boxes[:, :2])
    return np.hstack((boxes[:, :2] - grow, boxes[:, 2:] + grow))


def iou_matrix(a: Boxes, b: Boxes) -> Scores:
    """IoU of every box of `a` (rows) with every box of `b` (columns); 0 where either is empty."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.maximum(x2 - x1, 0.0) * np.maximum(y2 - y1, 0.0)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    # A zero-area union only comes from two empty boxes: no evidence, no match.
    return np.where(union > 0.0, inter / np.where(union > 0.0, union, 1.0), 0.0)


def buffered_iou(tracks: Boxes, detections: Boxes, buffer: float) -> Scores:
    """Buffered IoU of every predicted track box (rows) with every detection (columns)."""
    return iou_matrix(buffered(tracks, buffer), buffered(detections, buffer))


def centres_within(tracks: Boxes, detections: Boxes, buffer: float) -> Allowed:
    """Whether each detection's centre (columns) lies in each track box (rows) grown by `buffer`.

    Buffered IoU alone lets a box match up to ~1.8 heights off the prediction, enough for another
    object passing by; this is the tighter test for a track that has been lost.
    """
    grown = buffered(tracks, buffer)
    cx = (detections[:, 0] + detections[:, 2]) / 2
    cy = (detections[:, 1] + detections[:, 3]) / 2
    inside_x = (grown[:, None, 0] <= cx[None, :]) & (cx[None, :] <= grown[:, None, 2])
    inside_y = (grown[:, None, 1] <= cy[None, :]) & (cy[None, :] <= grown[:, None, 3])
    return inside_x & inside_y


def greedy_assign(scores: Scores, min_score: float) -> list[tuple[int, int]]:
    """(track, detection) pairs, best score first, each row and column used at most once.

    Pairs under `min_score` never match. Equal scores go to the lower track index, then the
    lower detection index, so the outcome depends on the input only. Greedy rather than
    Hungarian: with gated, mostly sparse matrices the two rarely differ, and greedy needs no scipy.
    """
    rows, cols = np.nonzero(scores >= min_score)
    if rows.size == 0:
        return []
    order = np.lexsort((cols, rows, -scores[rows, cols]))
    taken_rows: set[int] = set()
    taken_cols: set[int] = set()
    pairs: list[tuple[int, int]] = []
    for i in order.tolist():
        r, c = int(rows[i]), int(cols[i])
        if r in taken_rows or c in taken_cols:
            continue
        taken_rows.add(r)
        taken_cols.add(c)
        pairs.append((r, c))
    return pairs


def assign_in_rounds(
    tracks: Boxes,
    detections: Boxes,
    rounds: Sequence[tuple[float, Allowed]],
    min_score: float,
) -> list[tuple[int, int]]:
    """Greedy rounds, each over the pairs earlier rounds left free (C-BIoU's cascade).

    A round is (buffer, allowed): `allowed` (tracks x detections) says which pairs it may match
    (same class; only tracks without a velocity for a wider second round).
    """
    pairs: list[tuple[int, int]] = []
    if tracks.shape[0] == 0 or detections.shape[0] == 0:
        return pairs
    free = np.ones((tracks.shape[0], detections.shape[0]), dtype=bool)
    for buffer, allowed in rounds:
        candidates = free & allowed
        if not candidates.any():
            continue
        scores = np.where(candidates, buffered_iou(tracks, detections, buffer), -1.0)
        found = greedy_assign(scores, min_score)
        for row, col in found:
            free[row, :] = False
            free[:, col] = False
        pairs += found
    return pairs
