"""Tile pixels: the letterbox window scaled to a tile, boxes drawn for /mjpeg, JPEG encoding.

No Kafka and no sockets; OpenCV resizes, draws and encodes (it releases the GIL, so the server
runs these on a thread pool).
"""

from __future__ import annotations

from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from framebus.drawing import dashed_rectangle
from framebus.letterbox import letterbox_window
from framebus.messages import Frame
from framebus_live.geometry import box_on_tile, tile_size
from framebus_live.records import BoxesRecord

Image = npt.NDArray[np.uint8]

# Box colours by class id, as RGB: saturated hues the generated scenes do not use, so a test (or
# an eye) finds a drawn box against the picture. The page gets the same list in its hello.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (0, 255, 255),
    (255, 128, 0),
    (128, 255, 0),
    (255, 0, 128),
    (0, 128, 255),
    (255, 255, 255),
)


def class_colour(class_id: int) -> tuple[int, int, int]:
    """The RGB colour of a class's boxes."""
    return PALETTE[class_id % len(PALETTE)]


def tile_image(frame: Frame, height: int) -> Image:
    """The frame cut out of its letterbox and scaled to at most `height` rows (RGB).

    Unscaled, it is a read-only view of the frame's tensor: OpenCV takes strided views, and
    encode_jpeg makes the one copy it draws on.
    """
    window = letterbox_window(frame)
    w, h = tile_size(window.shape[1], window.shape[0], height)
    if (w, h) == (window.shape[1], window.shape[0]):
        return window
    # cv2.resize keeps the uint8 dtype; its stubs only say MatLike.
    return cast(Image, cv2.resize(window, (w, h), interpolation=cv2.INTER_AREA))


def draw_boxes(bgr: Image, record: BoxesRecord) -> None:
    """Draw the record's boxes and labels onto a BGR tile, in place (for /mjpeg's viewers)."""
    h, w = bgr.shape[:2]
    thickness = max(2, round(h / 180))  # 1 px lines blur away in JPEG chroma subsampling
    for live_box in record.boxes:
        box = live_box.box
        x1, y1, x2, y2 = box_on_tile(box, record.orig_width, record.orig_height, w, h)
        r, g, b = class_colour(box.class_id)
        colour = (b, g, r)
        if live_box.carried:  # kept from the last full frame: dashed, and said so
            dashed_rectangle(bgr, (x1, y1), (x2, y2), colour, thickness)
        else:
            cv2.rectangle(bgr, (x1, y1), (x2, y2), colour, thickness)
        carried = "carried" if live_box.carried else ""
        parts = (live_box.track, box.class_name, f"{box.score:.2f}", carried)
        label = " ".join(p for p in parts if p)
        cv2.putText(bgr, label, (x1, max(10, y1 - 3)), cv2.FONT_HERSHEY_SIMPLEX, 0.4, colour, 1)


def encode_jpeg(image: Image, quality: int, boxes: BoxesRecord | None = None) -> bytes:
    """An RGB image (a view will do) as JPEG bytes, with `boxes` drawn when given."""
    # The BGR conversion OpenCV's encoder wants is a new array: the boxes are drawn on it.
    bgr = cast(Image, cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    if boxes is not None:
        draw_boxes(bgr, boxes)
    ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"OpenCV could not JPEG-encode a {image.shape} image")
    return bytes(data)
