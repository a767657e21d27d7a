"""Decoding of YOLO output heads, class-aware NMS, and class names (pure numpy).

Three output layouts are understood:
- YOLOv5: one output `[N, anchors, 5 + classes]` (cx, cy, w, h, objectness, class scores);
- YOLOv8 / YOLO11: one output `[N, 4 + classes, anchors]` (cx, cy, w, h, class scores);
- end-to-end (NMS inside the model): one output `[N, K, 6]` (x1, y1, x2, y2, score, class), or
  the four outputs `num_dets [N, 1]`, `boxes [N, K, 4]`, `scores [N, K]`, `classes [N, K]`.
Boxes are in model-input pixels; `framebus.letterbox.boxes_to_original` maps them back.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from framebus.errors import ModelError
from framebus_inferencer.settings import HeadFormat

FloatArray = npt.NDArray[np.float32]
MAX_NMS_CANDIDATES = 30000  # as in the YOLO reference code: bounds NMS time on noisy frames


@dataclass(frozen=True)
class RawDetections:
    """Detections of one image in model-input pixels: boxes (K, 4) x1y1x2y2, scores, class ids."""

    boxes: FloatArray
    scores: FloatArray
    class_ids: npt.NDArray[np.int64]

    @classmethod
    def empty(cls) -> RawDetections:
        """No detections."""
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))


def cxcywh_to_xyxy(boxes: FloatArray) -> FloatArray:
    """Centre-size boxes to corner boxes."""
    out = np.empty_like(boxes)
    half_w = boxes[..., 2] / 2
    half_h = boxes[..., 3] / 2
    out[..., 0] = boxes[..., 0] - half_w
    out[..., 1] = boxes[..., 1] - half_h
    out[..., 2] = boxes[..., 0] + half_w
    out[..., 3] = boxes[..., 1] + half_h
    return out


def detect_head(shapes: Sequence[Sequence[int | str | None]], num_classes: int) -> HeadFormat:
    """Infer the head layout from the output shapes (and the class count, when known)."""
    if len(shapes) == 4:
        return HeadFormat.END2END
    if len(shapes) < 1 or len(shapes[0]) != 3:
        raise ModelError(
            f"cannot tell the detector head from output shapes {list(shapes)}; set "
            "FRAMEBUS_HEAD_FORMAT to yolov5, yolov8 or end2end"
        )
    _, a, b = shapes[0]
    if num_classes and b == 5 + num_classes:
        return HeadFormat.YOLOV5
    if num_classes and a == 4 + num_classes:
        return HeadFormat.YOLOV8
    if b == 6 and num_classes != 1:
        return HeadFormat.END2END
    if isinstance(a, int) and isinstance(b, int):
        return HeadFormat.YOLOV8 if a < b else HeadFormat.YOLOV5
    raise ModelError(
        f"cannot tell the detector head from output shape {list(shapes[0])}; set "
        "FRAMEBUS_HEAD_FORMAT to yolov5, yolov8 or end2end"
    )


@dataclass(frozen=True)
class Decoder:
    """Turns raw model outputs of a batch into per-image detections."""

    head: HeadFormat
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 300

    def decode(self, outputs: Sequence[npt.NDArray[np.generic]], n: int) -> list[RawDetections]:
        """Detections of the first `n` images of a (possibly padded) batch."""
        if self.head is HeadFormat.YOLOV8:
            return [self._candidates_v8(outputs[0][i]) for i in range(n)]
        if self.head is HeadFormat.YOLOV5:
            return [self._candidates_v5(outputs[0][i]) for i in range(n)]
        if self.head is HeadFormat.END2END:
            return [self._end2end(outputs, i) for i in range(n)]
        raise ModelError("head format must be resolved before decoding")

    # Both YOLO heads are filtered by score before anything else is computed: most of the 8400
    # anchors of a frame score below the threshold, and a full argmax over all classes of all
    # anchors (what a naive decode does) costs ~1 ms per 640x640 frame on one CPU core.

    def _candidates_v8(self, image: npt.NDArray[np.generic]) -> RawDetections:
        classes = image[4:]  # (C, A): each class a contiguous row
        # An anchor is a candidate when any class reaches the threshold: one compare of the head
        # and an OR down the class rows read it faster than a max over the rows; the
        # candidates' best class is found below, on few columns.
        keep = np.flatnonzero(np.greater_equal(classes, self.conf_threshold).any(axis=0))
        if keep.size == 0:
            return RawDetections.empty()
        cand = np.asarray(image[:, keep], np.float32).T  # (K, 4 + C) of the candidates only
        return self._nms(cand[:, :4], cand[:, 4:])

    def _candidates_v5(self, pred: npt.NDArray[np.generic]) -> RawDetections:
        # score = objectness x class probability <= objectness: filter on objectness first.
        keep = np.flatnonzero(np.greater_equal(pred[:, 4], self.conf_threshold))
        if keep.size == 0:
            return RawDetections.empty()
        cand = np.asarray(pred[keep], np.float32)
        return self._nms(cand[:, :4], cand[:, 5:] * cand[:, 4:5])

    def _nms(self, cxcywh: FloatArray, class_scores: FloatArray) -> RawDetections:
        class_ids = class_scores.argmax(axis=1)
        scores = class_scores[np.arange(len(class_scores)), class_ids]
        keep = np.flatnonzero(scores >= self.conf_threshold)
        if keep.size > MAX_NMS_CANDIDATES:
            keep = keep[np.argsort(-scores[keep], kind="stable")[:MAX_NMS_CANDIDATES]]
        if keep.size == 0:
            return RawDetections.empty()
        boxes = cxcywh_to_xyxy(cxcywh[keep])
        kept = nms(boxes, scores[keep], class_ids[keep], self.iou_threshold)[: self.max_detections]
        return RawDetections(
            boxes[kept].astype(np.float32),
            scores[keep][kept].astype(np.float32),
            class_ids[keep][kept].astype(np.int64),
        )

    def _end2end(self, outputs: Sequence[npt.NDArray[np.generic]], i: int) -> RawDetections:
        if len(outputs) == 4:
            count = int(np.asarray(outputs[0][i]).reshape(-1)[0])
            boxes = np.asarray(outputs[1][i][:count], np.float32).reshape(-1, 4)
            scores = np.asarray(outputs[2][i][:count], np.float32).reshape(-1)
            classes = np.asarray(outputs[3][i][:count]).reshape(-1).astype(np.int64)
        else:
            rows = np.asarray(outputs[0][i], np.float32).reshape(-1, 6)
            boxes, scores, classes = rows[:, :4], rows[:, 4], rows[:, 5].astype(np.int64)
        keep = np.flatnonzero(scores >= self.conf_threshold)
        keep = keep[np.argsort(-scores[keep], kind="stable")][: self.max_detections]
        return RawDetections(boxes[keep], scores[keep], classes[keep])


def nms(
    boxes: FloatArray, scores: FloatArray, class_ids: npt.NDArray[np.int64], iou_threshold: float
) -> npt.NDArray[np.int64]:
    """Class-aware non-maximum suppression; returns kept indices, best score first.

    Boxes of different classes never suppress each other: each class is offset to its own region
    of the plane (the batched-NMS trick), so one vectorised pass handles all classes.
    """
    if len(boxes) == 0:
        return np.zeros(0, dtype=np.int64)
    span = float(np.abs(boxes).max()) * 2 + 1.0
    shifted = boxes + (class_ids.astype(np.float32) * span)[:, None]
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = (shifted[:, i] for i in range(4))
    areas = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    keep: list[int] = []
    while order.size:
        best = int(order[0])
        keep.append(best)
        rest = order[1:]
        iw = np.clip(np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest]), 0, None)
        ih = np.clip(np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest]), 0, None)
        inter = iw * ih
        iou = inter / np.maximum(areas[best] + areas[rest] - inter, 1e-9)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def class_names(metadata: Mapping[str, str], labels_path: Path | None = None) -> tuple[str, ...]:
    """Class names from a labels file (one a line) or the model's `names` metadata, else ()."""
    if labels_path is not None:
        try:
            lines = labels_path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ModelError(f"cannot read labels file {labels_path}: {exc.strerror}") from None
        return tuple(line.strip() for line in lines if line.strip())
    raw = metadata.get("names")
    if not raw:
        return ()
    try:
        parsed = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return ()
    if isinstance(parsed, dict):
        return tuple(str(parsed[k]) for k in sorted(parsed))
    if isinstance(parsed, list | tuple):
        return tuple(str(x) for x in parsed)
    return ()


def class_name(names: Sequence[str], class_id: int) -> str:
    """The name of a class id, or the id as text when unknown."""
    return names[class_id] if 0 <= class_id < len(names) else str(class_id)
