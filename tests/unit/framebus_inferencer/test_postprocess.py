import numpy as np

from framebus_inferencer.postprocess import cxcywh_to_xyxy, decode_yolov8, nms


def test_nms_when_overlapping_same_class_then_lower_score_suppressed() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    classes = np.array([0, 0, 0])
    # IoU(box0, box1) = 81 / (100 + 100 - 81) = 0.68
    assert nms(boxes, scores, classes, 0.5).tolist() == [0, 2]
    assert nms(boxes, scores, classes, 0.7).tolist() == [0, 1, 2]


def test_nms_when_overlapping_different_classes_then_both_kept() -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10]], np.float32)
    kept = nms(boxes, np.array([0.9, 0.8], np.float32), np.array([0, 1]), 0.5)
    assert kept.tolist() == [0, 1]


def test_nms_when_empty_then_empty() -> None:
    assert (
        nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), 0.5).size
        == 0
    )


def test_decode_yolov8_when_two_anchors_overlap_then_one_box_in_corner_form() -> None:
    out = np.zeros((1, 6, 3), np.float32)
    out[0, :, 0] = [100, 50, 20, 10, 0.9, 0.1]  # cx, cy, w, h, class0, class1
    out[0, :, 1] = [101, 51, 20, 10, 0.6, 0.0]  # duplicate, lower score
    out[0, :, 2] = [300, 300, 10, 10, 0.1, 0.2]  # below threshold
    (det,) = decode_yolov8(out, conf_threshold=0.25, iou_threshold=0.45)
    np.testing.assert_allclose(det.boxes, [[90, 45, 110, 55]])
    assert det.class_ids.tolist() == [0]
    np.testing.assert_allclose(det.scores, [0.9])


def test_cxcywh_to_xyxy_when_converted_then_corners() -> None:
    np.testing.assert_allclose(cxcywh_to_xyxy(np.array([[5, 5, 4, 2]], np.float32)), [[3, 4, 7, 6]])
