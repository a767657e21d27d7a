from pathlib import Path

import numpy as np
import pytest

from framebus.errors import ModelError
from framebus.letterbox import boxes_to_original
from framebus_inferencer.headlayout import anchor_counts, check_head, detect_head
from framebus_inferencer.postprocess import (
    NO_DETECTIONS,
    CandidateRows,
    Decoder,
    class_names,
    cxcywh_to_xyxy,
    nms,
)
from framebus_inferencer.settings import HeadFormat


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


def test_nms_when_lower_score_first_then_order_is_by_score() -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 12]], np.float32)
    # IoU = 100 / 120 = 0.833 > 0.8: the 0.9 box survives even though it comes second
    assert nms(boxes, np.array([0.3, 0.9], np.float32), np.array([2, 2]), 0.8).tolist() == [1]


def test_nms_when_empty_then_empty() -> None:
    empty = nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), 0.5)
    assert empty.size == 0


def test_decode_yolov8_when_two_anchors_overlap_then_one_box_in_corner_form() -> None:
    out = np.zeros((1, 6, 3), np.float32)
    out[0, :, 0] = [100, 50, 20, 10, 0.9, 0.1]  # cx, cy, w, h, class0, class1
    out[0, :, 1] = [101, 51, 20, 10, 0.6, 0.0]  # duplicate, lower score
    out[0, :, 2] = [300, 300, 10, 10, 0.1, 0.2]  # below threshold
    (det,) = Decoder(HeadFormat.YOLOV8, 0.25, 0.45).decode([out], 1)
    np.testing.assert_allclose(det.boxes, [[90, 45, 110, 55]])
    assert det.class_ids.tolist() == [0]
    np.testing.assert_allclose(det.scores, [0.9])


def test_decode_yolov5_when_objectness_low_then_score_is_product() -> None:
    out = np.zeros((1, 2, 7), np.float32)
    out[0, 0] = [50, 50, 10, 10, 0.5, 0.2, 0.8]  # obj 0.5 x class1 0.8 = 0.4
    out[0, 1] = [80, 80, 10, 10, 0.3, 0.9, 0.1]  # 0.27 < 0.3
    (det,) = Decoder(HeadFormat.YOLOV5, 0.3, 0.45).decode([out], 1)
    np.testing.assert_allclose(det.boxes, [[45, 45, 55, 55]])
    np.testing.assert_allclose(det.scores, [0.4], rtol=1e-6)
    assert det.class_ids.tolist() == [1]


def test_decode_when_batch_padded_then_only_real_images_decoded() -> None:
    out = np.zeros((4, 6, 1), np.float32)
    assert len(Decoder(HeadFormat.YOLOV8).decode([out], 3)) == 3


def test_decode_candidate_rows_when_some_frames_empty_then_only_the_others_decoded() -> None:
    rows = np.zeros((4, 3, 7), np.float32)
    rows[..., 4] = -np.inf  # below the graph's threshold
    rows[1, 0] = (50, 60, 20, 10, 0.9, 2, 7)  # frame 1: one candidate, anchor 7
    decoder = Decoder(HeadFormat.YOLOV8, candidates=CandidateRows(3, 8400, 0.25))
    empty, found, also_empty = decoder.decode([rows], 3)  # frame 3 is the batch's padding
    assert empty is NO_DETECTIONS and also_empty is NO_DETECTIONS
    np.testing.assert_array_equal(found.boxes, [[40, 55, 60, 65]])
    assert found.class_ids.tolist() == [2] and found.scores.tolist() == [np.float32(0.9)]
    with pytest.raises(ValueError, match="read-only"):
        empty.boxes[:] = 1  # shared by every empty frame: nobody may write it


def test_detect_head_when_shapes_given_then_layout_recognised() -> None:
    assert detect_head([["batch", 84, 8400]], 80) is HeadFormat.YOLOV8
    assert detect_head([["batch", 25200, 85]], 80) is HeadFormat.YOLOV5
    # Without class names, YOLOv8's 8400 anchors of a 640 x 640 input decide it.
    assert detect_head([["batch", 84, 8400]], 0, (640, 640)) is HeadFormat.YOLOV8
    assert detect_head([["batch", 300, 6]], 80) is HeadFormat.END2END
    assert detect_head([["b", 1], ["b", 100, 4], ["b", 100], ["b", 100]], 0) is HeadFormat.END2END
    with pytest.raises(ModelError, match="FRAMEBUS_HEAD_FORMAT"):
        detect_head([["b", "n", "m"]], 0)


def test_detect_head_when_row_too_short_for_yolov5_then_yolov8_with_or_without_names() -> None:
    # [N, 6, 1]: a YOLOv5 row of 1 value is impossible (it needs 4 box values, objectness and a
    # class), so only YOLOv8 fits: 4 box rows, 2 classes, 1 anchor. It used to be taken for YOLOv5.
    assert detect_head([["batch", 6, 1]], 2, (32, 32)) is HeadFormat.YOLOV8
    assert detect_head([["batch", 6, 1]], 0, (32, 32)) is HeadFormat.YOLOV8
    assert detect_head([[1, 5, 3]], 0) is HeadFormat.YOLOV8  # 1 class: 5 rows


def test_detect_head_when_class_count_fits_one_layout_then_that_layout() -> None:
    assert detect_head([["batch", 7, 9]], 3, (32, 32)) is HeadFormat.YOLOV8  # 4 + 3 rows
    assert detect_head([["batch", 7, 9]], 4, (32, 32)) is HeadFormat.YOLOV5  # 5 + 4 values
    assert detect_head([["batch", 84, "anchors"]], 80) is HeadFormat.YOLOV8  # dynamic export
    # [N, K, 6] with one class: YOLOv5's 25200 anchors of 640 x 640, else end-to-end's K.
    assert detect_head([["batch", 25200, 6]], 1, (640, 640)) is HeadFormat.YOLOV5
    assert detect_head([["batch", 300, 6]], 1, (640, 640)) is HeadFormat.END2END


def test_detect_head_when_no_class_names_then_anchor_count_of_the_input_size_decides() -> None:
    assert anchor_counts(HeadFormat.YOLOV8, 640, 640) == {8400, 8500}  # P5, P6 strides
    assert anchor_counts(HeadFormat.YOLOV5, 640, 384) == {3 * 5040, 3 * 5100}
    assert detect_head([["batch", 25200, 85]], 0, (640, 640)) is HeadFormat.YOLOV5
    assert detect_head([["batch", 84, 34000]], 0, (1280, 1280)) is HeadFormat.YOLOV8  # P6
    assert detect_head([["batch", 300, 6]], 0, (640, 640)) is HeadFormat.END2END


def test_detect_head_when_two_layouts_fit_and_nothing_decides_then_refused() -> None:
    ask = "--head-format / FRAMEBUS_HEAD_FORMAT"
    with pytest.raises(ModelError) as err:
        detect_head([["batch", 7, 8]], 0, (32, 32))  # neither 8 nor 7 anchors fit 32 x 32
    assert str(err.value) == (
        "cannot tell the detector head from output shape [batch, 7, 8]: it could be yolov5 or "
        f"yolov8 and the model has no class names to decide; set {ask} to the model's layout"
    )
    with pytest.raises(ModelError, match="could be yolov5 or yolov8"):
        detect_head([["batch", 84, 8400]], 0)  # no input size given: no anchor evidence
    with pytest.raises(ModelError, match=r"could be yolov5 or yolov8; set --head-format"):
        detect_head([["batch", 6, 7]], 2, (32, 32))  # 4 + 2 rows and 5 + 2 values alike


def test_detect_head_when_no_layout_fits_then_refused_naming_the_shape() -> None:
    with pytest.raises(ModelError, match=r"output shape \[batch, 4, 3\]: it fits no layout"):
        detect_head([["batch", 4, 3]], 0, (32, 32))
    with pytest.raises(ModelError, match=r"output shape \[b, 5, 5, 5\]: it fits no layout"):
        detect_head([["b", 5, 5, 5]], 0)
    with pytest.raises(ModelError) as err:
        detect_head([["batch", 84, 8400]], 3, (640, 640))  # labels of another model
    assert "[batch, 84, 8400]: its 3 class names" in str(err.value)
    assert "YOLOv5 rows of 8 values, YOLOv8 7 rows" in str(err.value)


def test_check_head_when_set_by_hand_and_shape_cannot_have_it_then_refused() -> None:
    with pytest.raises(ModelError) as err:
        check_head(HeadFormat.YOLOV5, [["batch", 6, 1]])
    assert str(err.value) == (
        "--head-format / FRAMEBUS_HEAD_FORMAT is yolov5 but the model's output shape "
        "[batch, 6, 1] does not fit that layout: a YOLOv5 row needs 6 or more values (4 box, "
        "objectness, class scores), not 1; set it to the model's layout, or to auto"
    )
    with pytest.raises(ModelError, match=r"end2end but .*\[batch, 300, 7\] does not fit"):
        check_head(HeadFormat.END2END, [["batch", 300, 7]])
    with pytest.raises(ModelError, match=r"5 or more rows \(4 box, class scores\), not 4"):
        check_head(HeadFormat.YOLOV8, [["batch", 4, 8400]])
    check_head(HeadFormat.YOLOV8, [["batch", "rows", "anchors"]])  # unknown: checked at warm-up


def test_decoder_check_when_real_outputs_do_not_fit_the_head_then_refused() -> None:
    out = np.zeros((2, 6, 1), np.float32)
    Decoder(HeadFormat.YOLOV8).check([out], 2)
    with pytest.raises(ModelError) as err:
        Decoder(HeadFormat.YOLOV5).check([out], 2)
    assert str(err.value).startswith(
        "the model's output shape [2, 6, 1] cannot be decoded as the yolov5 head it was taken "
        "for: a YOLOv5 row needs 6 or more values"
    )
    assert str(err.value).endswith(
        "set --head-format / FRAMEBUS_HEAD_FORMAT to the model's layout (yolov5, yolov8 or end2end)"
    )
    with pytest.raises(ModelError, match=r"shape \[2, 1\] cannot be decoded as the yolov8 head"):
        Decoder(HeadFormat.YOLOV8).check([np.zeros((2, 1), np.float32)], 2)


def test_class_names_when_labels_file_then_it_wins_over_metadata(tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("person\n\ncar\n")
    meta = {"names": "{0: 'a', 1: 'b'}"}
    assert class_names(meta, labels) == ("person", "car")
    assert class_names(meta) == ("a", "b")
    assert class_names({"names": "['x', 'y']"}) == ("x", "y")
    assert class_names({}) == ()


def test_letterbox_inverse_when_1080p_in_640_then_hand_computed_pixels() -> None:
    # 1920x1080 -> 640: scale 1/3, resized 640x360, pad_y (640 - 360) / 2 = 140
    model_boxes = np.array([[100, 200, 160, 260], [-5, 130, 700, 700]], np.float32)
    out = boxes_to_original(model_boxes, 1 / 3, 0, 140, 1920, 1080)
    np.testing.assert_allclose(out[0], [300, 180, 480, 360], atol=1e-3)
    np.testing.assert_allclose(out[1], [0, 0, 1920, 1080], atol=1e-3)  # clipped


def test_cxcywh_to_xyxy_when_converted_then_corners() -> None:
    np.testing.assert_allclose(cxcywh_to_xyxy(np.array([[5, 5, 4, 2]], np.float32)), [[3, 4, 7, 6]])
