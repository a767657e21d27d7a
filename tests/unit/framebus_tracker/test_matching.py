import numpy as np
import pytest

from framebus_tracker.matching import (
    assign_in_rounds,
    buffered,
    buffered_iou,
    centres_within,
    greedy_assign,
    iou_matrix,
)


def boxes(*rows: tuple[float, float, float, float]) -> np.ndarray:
    return np.array(rows, dtype=np.float64).reshape(-1, 4)


def test_iou_matrix_when_half_overlap_then_one_third() -> None:
    iou = iou_matrix(boxes((0, 0, 10, 10)), boxes((5, 0, 15, 10), (20, 0, 30, 10)))
    assert iou == pytest.approx(np.array([[1 / 3, 0.0]]))


def test_iou_matrix_when_empty_boxes_then_zero_not_nan() -> None:
    iou = iou_matrix(boxes((5, 5, 5, 5)), boxes((5, 5, 5, 5)))
    assert iou.tolist() == [[0.0]]


def test_buffered_when_buffer_half_then_grows_by_half_size_each_side() -> None:
    assert buffered(boxes((10, 20, 30, 60)), 0.5).tolist() == [[0.0, 0.0, 40.0, 80.0]]


def test_buffered_iou_when_buffer_zero_then_plain_iou() -> None:
    a, b = boxes((0, 0, 10, 10), (3, 3, 9, 20)), boxes((5, 0, 15, 10))
    assert buffered_iou(a, b, 0.0) == pytest.approx(iou_matrix(a, b))


def test_buffered_iou_when_moved_one_and_a_half_widths_then_still_overlaps() -> None:
    before, after = boxes((0, 0, 10, 30)), boxes((15, 0, 25, 30))
    assert buffered_iou(before, after, 0.0).item() == 0.0
    # Buffered: [-5, 15] and [10, 30] overlap by 5 of 35 px.
    assert buffered_iou(before, after, 0.5).item() == pytest.approx(5 / 35)


def test_greedy_assign_when_conflict_then_best_pair_first() -> None:
    scores = np.array([[0.9, 0.8], [0.85, 0.1]])
    assert greedy_assign(scores, 0.05) == [(0, 0), (1, 1)]


def test_greedy_assign_when_under_gate_then_no_pair() -> None:
    scores = np.array([[0.9, 0.8], [0.85, 0.01]])
    assert greedy_assign(scores, 0.05) == [(0, 0)]


def test_greedy_assign_when_scores_tie_then_lower_indices_win() -> None:
    scores = np.full((3, 3), 0.5)
    assert greedy_assign(scores, 0.05) == [(0, 0), (1, 1), (2, 2)]


def test_greedy_assign_when_nothing_then_empty() -> None:
    assert greedy_assign(np.zeros((0, 4)), 0.05) == []
    assert greedy_assign(np.zeros((2, 2)), 0.05) == []


def test_assign_in_rounds_when_first_round_matches_then_second_cannot_retake() -> None:
    tracks = boxes((0, 0, 10, 10), (100, 0, 110, 10))
    dets = boxes((1, 0, 11, 10), (115, 0, 125, 10))  # the second 1.5 widths from its track
    allow = np.ones((2, 2), dtype=bool)
    assert assign_in_rounds(tracks, dets, [(0.0, allow)], 0.05) == [(0, 0)]
    assert assign_in_rounds(tracks, dets, [(0.0, allow), (0.5, allow)], 0.05) == [(0, 0), (1, 1)]


def test_assign_in_rounds_when_pair_not_allowed_then_never_matched() -> None:
    tracks, dets = boxes((0, 0, 10, 10)), boxes((0, 0, 10, 10))
    assert assign_in_rounds(tracks, dets, [(0.5, np.zeros((1, 1), dtype=bool))], 0.05) == []


def test_centres_within_when_centre_in_grown_box_then_true_else_false() -> None:
    # Track box 100 x 100 grown by 0.5: x and y from -50 to 150.
    inside = centres_within(
        boxes((0, 0, 100, 100)),
        boxes((100, 100, 200, 200), (140, 0, 240, 100), (0, 120, 100, 220)),
        0.5,
    )
    assert inside.tolist() == [[True, False, False]]
