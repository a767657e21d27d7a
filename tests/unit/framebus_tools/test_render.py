import cv2
import numpy as np
import pytest

from framebus.compression import compress
from framebus.letterbox import PAD_VALUE, Letterbox
from framebus.messages import (
    Box,
    Compression,
    Detections,
    Frame,
    FrameStatus,
    TensorLayout,
    short_track_label,
)
from framebus_tools.render.draw import (
    class_colour,
    contact_sheet,
    draw_detections,
    line_thickness,
    original_frame,
    sheet_cell_origin,
)


def scene(width: int = 960, height: int = 540) -> np.ndarray:
    img = np.full((height, width, 3), 24, np.uint8)
    img[100:300, 200:500] = (200, 60, 30)  # a block whose edges must come back where they were
    return img


def letterboxed(
    img: np.ndarray,
    compression: Compression = Compression.NONE,
    layout: TensorLayout = TensorLayout.HWC,
) -> Frame:
    h, w = img.shape[:2]
    lb = Letterbox.fit(w, h, 640, 640)
    tensor = np.full((640, 640, 3), PAD_VALUE, np.uint8)
    resized = cv2.resize(img, (lb.resized_width, lb.resized_height), interpolation=cv2.INTER_AREA)
    tensor[lb.pad_y : lb.pad_y + lb.resized_height, lb.pad_x : lb.pad_x + lb.resized_width] = (
        resized
    )
    if layout is TensorLayout.CHW:
        tensor = np.ascontiguousarray(tensor.transpose(2, 0, 1))
    return Frame(
        camera_id="cam-1",
        seq=7,
        capture_ts_us=1_700_000_000_000_000,
        orig_width=w,
        orig_height=h,
        shape=tuple(tensor.shape),
        layout=layout,
        scale=lb.scale,
        pad_x=lb.pad_x,
        pad_y=lb.pad_y,
        tensor=compress(compression, tensor.tobytes()),
        compression=compression,
    )


def detections(*boxes: Box, status: FrameStatus = FrameStatus.INFERRED) -> Detections:
    return Detections(
        camera_id="cam-1",
        seq=7,
        capture_ts_us=1_700_000_000_000_000,
        status=status,
        model_name="m",
        model_version="1",
        boxes=boxes,
        orig_width=960,
        orig_height=540,
    )


def colour_bbox(image: np.ndarray, colour: tuple[int, int, int]) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(np.all(image == np.array(colour, np.uint8), axis=-1))
    assert xs.size, f"no pixel of colour {colour}"
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("layout", list(TensorLayout))
def test_original_frame_when_letterboxed_then_padding_cropped_and_size_restored(
    compression: Compression, layout: TensorLayout
) -> None:
    img = scene()
    restored = original_frame(letterboxed(img, compression, layout))
    assert restored.shape == img.shape
    # Down to 640x360 and back up: edges blur by a pixel or two but stay where they were.
    assert np.abs(restored.astype(int) - img.astype(int)).mean() < 3
    block = np.nonzero(restored[:, :, 0] > 112)
    assert abs(block[0].min() - 100) <= 2 and abs(block[0].max() - 299) <= 2
    assert abs(block[1].min() - 200) <= 2 and abs(block[1].max() - 499) <= 2


def test_draw_detections_when_box_drawn_then_outline_lies_on_the_record_box() -> None:
    box = Box(200.0, 100.0, 500.0, 300.0, 0, "square", 0.93)
    frame = letterboxed(scene())
    image = draw_detections(original_frame(frame), frame, detections(box))
    t = line_thickness(960, 540)
    x1, y1, x2, y2 = colour_bbox(image, class_colour(0))
    # The line is centred on the box edge, so it reaches t/2 beyond it on each side.
    assert abs(x1 - 200) <= t and abs(y1 - 100) <= t
    assert abs(x2 - 500) <= t and abs(y2 - 300) <= t


def label_width(image: np.ndarray, colour: tuple[int, int, int]) -> int:
    dark = np.array([c // 2 for c in colour], np.uint8)
    xs = np.nonzero(np.all(image == dark, axis=-1))[1]
    assert xs.size, "no label background drawn"
    return int(xs.max() - xs.min() + 1)


def test_draw_detections_when_track_labels_given_then_label_longer_and_outline_unchanged() -> None:
    boxes = (
        Box(200.0, 100.0, 500.0, 300.0, 0, "square", 0.93),
        Box(600.0, 200.0, 700.0, 400.0, 1, "other", 0.8),
    )
    frame = letterboxed(scene())
    base = original_frame(frame)
    plain = draw_detections(base, frame, detections(*boxes))
    labelled = draw_detections(
        base, frame, detections(*boxes), [short_track_label("cam-1/3/17"), None]
    )
    assert label_width(labelled, class_colour(0)) > label_width(plain, class_colour(0))
    assert label_width(labelled, class_colour(1)) == label_width(plain, class_colour(1))
    assert colour_bbox(labelled, class_colour(0)) == colour_bbox(plain, class_colour(0))
    with pytest.raises(ValueError, match="1 box labels for 2 boxes"):
        draw_detections(base, frame, detections(*boxes), ["#1"])


def test_short_track_label_when_tracker_id_then_counter_only() -> None:
    assert short_track_label("cam-1/3/17") == "#17"
    assert short_track_label("7") == "#7"


def test_draw_detections_when_frame_not_looked_at_then_no_boxes_and_banner_says_so() -> None:
    frame = letterboxed(scene())
    base = original_frame(frame)
    stale = detections(Box(200, 100, 500, 300, 0, "square", 0.9), status=FrameStatus.DROPPED_STALE)
    image = draw_detections(base, frame, stale)
    assert not np.all(image == np.array(class_colour(0), np.uint8), axis=-1).any()
    # Banner in the not-looked-at colour was written into the top-left corner.
    assert (image[:60, :400] != base[:60, :400]).any()


def test_contact_sheet_when_five_frames_in_three_columns_then_two_rows_at_thumb_width() -> None:
    images = [np.full((540, 960, 3), i * 40, np.uint8) for i in range(5)]
    sheet = contact_sheet(images, columns=3, thumb_width=320)
    assert sheet.shape == (2 * 180 + 3 * 4, 3 * 320 + 4 * 4, 3)
    x, y = sheet_cell_origin(4, 3, 320, 180)
    assert (sheet[y : y + 180, x : x + 320] == 160).all()
