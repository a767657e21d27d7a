"""Pure drawing: rebuild an original-size frame from its letterboxed tensor and draw detections.

No Kafka and no video I/O here; OpenCV only draws and resizes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import cv2
import numpy as np
import numpy.typing as npt

from framebus.drawing import dashed_rectangle
from framebus.letterbox import letterbox_window
from framebus.messages import Detections, Frame, FrameStatus

Image = npt.NDArray[np.uint8]
RGB = tuple[int, int, int]

# Saturated colours that a video frame rarely contains exactly, so a drawn box can be found again.
PALETTE: tuple[RGB, ...] = (
    (0, 255, 0),
    (255, 0, 255),
    (0, 200, 255),
    (255, 160, 0),
    (255, 40, 40),
    (120, 80, 255),
    (0, 255, 170),
    (255, 255, 0),
)
TEXT: RGB = (255, 255, 255)
HEADER_BG: RGB = (0, 0, 0)
NOT_LOOKED_AT: RGB = (255, 140, 0)
FONT = cv2.FONT_HERSHEY_SIMPLEX


def class_colour(class_id: int) -> RGB:
    """The box colour of a class (RGB)."""
    return PALETTE[class_id % len(PALETTE)]


def line_thickness(width: int, height: int) -> int:
    """Box line width in pixels: 2 px at 360p, 4 px at 1080p."""
    return max(2, round(min(width, height) / 270))


def original_frame(frame: Frame) -> Image:
    """The frame at its original size (RGB, HWC): crop the letterbox window, resize it back up."""
    window = letterbox_window(frame)
    h, w = window.shape[:2]
    if (w, h) == (frame.orig_width, frame.orig_height):
        return np.ascontiguousarray(window)
    return cv2.resize(
        window, (frame.orig_width, frame.orig_height), interpolation=cv2.INTER_LINEAR
    ).astype(np.uint8)


def draw_detections(
    image: Image,
    frame: Frame,
    det: Detections | None,
    box_labels: Sequence[str | None] | None = None,
) -> Image:
    """A copy of `image` with each box, its class name and score, and a header saying which frame.

    `box_labels`, one per box of `det` (None or "" for none), goes before the class name: e.g. the
    box's track, as `short_track_label` writes it. A STILL record's boxes are carried (kept at
    where they were last seen, nothing moved): dashed and labelled so.
    """
    out = image.copy()
    h, w = out.shape[:2]
    thickness = line_thickness(w, h)
    scale = max(0.5, min(w, h) / 720)
    if det is not None and det.status in (FrameStatus.INFERRED, FrameStatus.STILL):
        if box_labels is not None and len(box_labels) != len(det.boxes):
            raise ValueError(f"{len(box_labels)} box labels for {len(det.boxes)} boxes")
        for i, box in enumerate(det.boxes):
            colour = class_colour(box.class_id)
            x1, y1 = round(box.x1), round(box.y1)
            x2, y2 = round(box.x2) - 1, round(box.y2) - 1  # record edges are exclusive
            if det.status is FrameStatus.STILL:
                dashed_rectangle(out, (x1, y1), (x2, y2), colour, thickness)
            else:
                cv2.rectangle(out, (x1, y1), (x2, y2), colour, thickness)
            text = f"{box.class_name} {box.score:.2f}"
            if det.status is FrameStatus.STILL:
                text += " carried"
            extra = box_labels[i] if box_labels is not None else None
            if extra:
                text = f"{extra} {text}"
            _label(out, text, (x1, y1), colour, scale, thickness)
    _header(out, frame, det, scale)
    return out


def _label(
    image: Image, text: str, corner: tuple[int, int], colour: RGB, scale: float, t: int
) -> None:
    (tw, th), base = cv2.getTextSize(text, FONT, scale, 1)
    x, y = corner
    top = y - th - base - 2 * t
    if top < 0:  # no room above the box: put the label just inside it
        top = y + t
    # A darker shade of the box colour, so the exact box colour marks only the box's outline.
    dark = tuple(c // 2 for c in colour)
    x = max(0, x - t // 2)
    cv2.rectangle(image, (x, top), (x + tw + 4, top + th + base + 2), dark, cv2.FILLED)
    cv2.putText(image, text, (x + 2, top + th + 1), FONT, scale, TEXT, 1, cv2.LINE_AA)


def _header(image: Image, frame: Frame, det: Detections | None, scale: float) -> None:
    when = dt.datetime.fromtimestamp(frame.capture_ts_us / 1e6, dt.UTC).strftime("%H:%M:%S.%f")
    lines = [f"{frame.camera_id} #{frame.seq}  {when[:-3]} UTC"]
    colour = TEXT
    if det is None:
        lines.append("no detections record")
        colour = NOT_LOOKED_AT
    elif det.status is FrameStatus.STILL:
        lines.append(f"STILL: nothing moved, the last picture; {len(det.boxes)} boxes carried")
    elif det.status is not FrameStatus.INFERRED:
        lines.append(f"NOT LOOKED AT: {det.status.value} {det.reason or ''}".strip())
        colour = NOT_LOOKED_AT
    else:
        lines.append(f"{len(det.boxes)} boxes  {det.model_name} v{det.model_version}")
    y = 0
    for i, text in enumerate(lines):
        (tw, th), base = cv2.getTextSize(text, FONT, scale, 1)
        cv2.rectangle(image, (0, y), (tw + 8, y + th + base + 6), HEADER_BG, cv2.FILLED)
        cv2.putText(
            image, text, (4, y + th + 3), FONT, scale, TEXT if i == 0 else colour, 1, cv2.LINE_AA
        )
        y += th + base + 6


def contact_sheet(images: Sequence[Image], columns: int, thumb_width: int, gap: int = 4) -> Image:
    """Images side by side, `columns` per row, each scaled to `thumb_width` (aspect kept)."""
    if not images:
        raise ValueError("a contact sheet needs at least one image")
    thumbs = [_fit_width(im, thumb_width) for im in images]
    cell_h = max(t.shape[0] for t in thumbs)
    cols = min(columns, len(thumbs))
    rows = -(-len(thumbs) // cols)
    sheet = np.full(
        (rows * cell_h + (rows + 1) * gap, cols * thumb_width + (cols + 1) * gap, 3),
        40,
        dtype=np.uint8,
    )
    for i, thumb in enumerate(thumbs):
        r, c = divmod(i, cols)
        y, x = gap + r * (cell_h + gap), gap + c * (thumb_width + gap)
        sheet[y : y + thumb.shape[0], x : x + thumb.shape[1]] = thumb
    return sheet


def sheet_cell_origin(
    index: int, columns: int, thumb_width: int, cell_height: int, gap: int = 4
) -> tuple[int, int]:
    """Top-left (x, y) of image `index` in a contact sheet (to find a frame in it again)."""
    r, c = divmod(index, columns)
    return gap + c * (thumb_width + gap), gap + r * (cell_height + gap)


def _fit_width(image: Image, width: int) -> Image:
    h, w = image.shape[:2]
    if w == width:
        return image
    height = max(1, round(h * width / w))
    interp = cv2.INTER_AREA if width < w else cv2.INTER_LINEAR
    return cv2.resize(image, (width, height), interpolation=interp).astype(np.uint8)
