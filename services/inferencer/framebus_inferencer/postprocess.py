"""Decoding of YOLO output heads, class-aware NMS, and class names (pure numpy).

Three output layouts are understood:
- YOLOv5: one output `[N, anchors, 5 + classes]` (cx, cy, w, h, objectness, class scores);
- YOLOv8 / YOLO11: one output `[N, 4 + classes, anchors]` (cx, cy, w, h, class scores);
- end-to-end (NMS inside the model): one output `[N, K, 6]` (x1, y1, x2, y2, score, class), or
  the four outputs `num_dets [N, 1]`, `boxes [N, K, 4]`, `scores [N, K]`, `classes [N, K]`.
A YOLOv5 or YOLOv8 head whose candidates the graph selects (`candidates.py`) comes out as
`CandidateRows`: K rows a frame, decoded with the same arithmetic and NMS as the raw head.
Boxes are in model-input pixels; `framebus.letterbox.boxes_to_original` maps them back.
`headlayout.detect_head` tells the layout from the output shapes; `Decoder.check` proves
on real (warm-up) outputs that they decode, so a wrong head stops start-up, not a stream.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt

from framebus.errors import ModelError
from framebus_inferencer.headlayout import HEAD_FLAG, Shape, format_shapes, head_misfit
from framebus_inferencer.settings import MAX_CANDIDATES, HeadFormat

FloatArray = npt.NDArray[np.float32]
MAX_NMS_CANDIDATES = MAX_CANDIDATES  # as in the YOLO reference code: bounds NMS time
ROW_WIDTH = 7  # a candidate row: cx, cy, w, h, score, class id, anchor index


@dataclass(frozen=True)
class CandidateRows:
    """The output of candidate selection in the graph: [N, K, 7] float32, best score first.

    Each row is cx, cy, w, h, score, class id, anchor index; a row whose anchor is below the
    graph's `threshold` has score -inf. `iou_threshold` is None when NMS runs on the host; when
    the graph ran it, the rows it suppressed have class id -1. `anchors`: the head's anchor count.
    """

    k: int
    anchors: int
    threshold: float
    iou_threshold: float | None = None


@dataclass(frozen=True)
class RawDetections:
    """Detections of one image in model-input pixels: boxes (K, 4) x1y1x2y2, scores, class ids."""

    boxes: FloatArray
    scores: FloatArray
    class_ids: npt.NDArray[np.int64]
    # All K candidate rows of the graph were above the threshold: more may have been cut.
    saturated: bool = False


def _no_detections() -> RawDetections:
    empty = RawDetections(
        np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)
    )
    for array in (empty.boxes, empty.scores, empty.class_ids):
        array.flags.writeable = False
    return empty


# No detections: one shared, read-only value (most frames of a camera find nothing).
NO_DETECTIONS = _no_detections()


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


@dataclass(frozen=True)
class Decoder:
    """Turns raw model outputs of a batch into per-image detections."""

    head: HeadFormat
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 300
    candidates: CandidateRows | None = None  # the graph selected them (candidates.py)

    def __post_init__(self) -> None:
        rows = self.candidates
        if rows is None:
            return
        if self.conf_threshold < rows.threshold:
            raise ModelError(
                f"the model's graph keeps candidates from a score of {rows.threshold:g}, above "
                f"the confidence threshold {self.conf_threshold:g}: build the engine with it"
            )
        if rows.iou_threshold is not None and rows.iou_threshold != self.iou_threshold:
            raise ModelError(
                f"the model's graph runs NMS at IoU {rows.iou_threshold:g}, not "
                f"{self.iou_threshold:g}: build the engine with it"
            )

    def decode(self, outputs: Sequence[npt.NDArray[np.generic]], n: int) -> list[RawDetections]:
        """Detections of the first `n` images of a (possibly padded) batch."""
        if self.candidates is not None:
            rows, layout = outputs[0], self.candidates
            found = self._frames_with(rows[:n, :, 4])
            return [
                self._candidate_rows(rows[i], layout) if found[i] else NO_DETECTIONS
                for i in range(n)
            ]
        if self.head is HeadFormat.YOLOV8:
            return [self._candidates_v8(outputs[0][i]) for i in range(n)]
        if self.head is HeadFormat.YOLOV5:
            found = self._frames_with(outputs[0][:n, :, 4])
            return [
                self._candidates_v5(outputs[0][i]) if found[i] else NO_DETECTIONS for i in range(n)
            ]
        if self.head is HeadFormat.END2END:
            return [self._end2end(outputs, i) for i in range(n)]
        raise ModelError("head format must be resolved before decoding")

    def _frames_with(self, scores: npt.NDArray[np.generic]) -> list[bool]:
        """Which frames of a batch have a row scoring the threshold, in one step for the batch.

        A frame with none then costs no numpy calls of its own.
        """
        return cast(list[bool], np.greater_equal(scores, self.conf_threshold).any(axis=1).tolist())

    def check(self, outputs: Sequence[npt.NDArray[np.generic]], n: int) -> None:
        """Refuse outputs this decoder cannot decode: run on warm-up outputs, before any frame.

        A declared shape may leave dims unknown; the real outputs show whether the head fits.
        """
        shapes = [o.shape for o in outputs]
        why = (
            head_misfit(self.head, shapes) if self.candidates is None else self._rows_misfit(shapes)
        )
        if why is None:
            try:
                self.decode(outputs, n)
            except (IndexError, ValueError, TypeError) as exc:
                why = f"decoding them fails ({type(exc).__name__}: {exc})"
        if why is not None:
            raise ModelError(
                f"the model's output shape {format_shapes(shapes)} cannot be decoded as the "
                f"{self.head.value} head it was taken for: {why}; set {HEAD_FLAG} to the "
                "model's layout (yolov5, yolov8 or end2end)"
            )

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
            return NO_DETECTIONS
        cand = np.asarray(image[:, keep], np.float32).T  # (K, 4 + C) of the candidates only
        return self._nms(cand[:, :4], cand[:, 4:])

    def _candidates_v5(self, pred: npt.NDArray[np.generic]) -> RawDetections:
        # score = objectness x class probability <= objectness: filter on objectness first.
        keep = np.flatnonzero(np.greater_equal(pred[:, 4], self.conf_threshold))
        if keep.size == 0:
            return NO_DETECTIONS
        cand = np.asarray(pred[keep], np.float32)
        return self._nms(cand[:, :4], cand[:, 5:] * cand[:, 4:5])

    def _rows_misfit(self, shapes: Sequence[Shape]) -> str | None:
        k = self.candidates.k if self.candidates is not None else 0
        if len(shapes) != 1 or tuple(shapes[0][1:]) != (k, ROW_WIDTH):
            return f"candidate selection in the graph returns one [N, {k}, {ROW_WIDTH}] output"
        return None

    def _candidate_rows(
        self, rows: npt.NDArray[np.generic], layout: CandidateRows
    ) -> RawDetections:
        # The rows the raw head's filter would find, in its order (by anchor): the same NMS input.
        found = np.asarray(rows, np.float32)
        valid = np.flatnonzero(found[:, 4] >= self.conf_threshold)
        saturated = valid.size == layout.k < layout.anchors
        if valid.size == 0:
            return NO_DETECTIONS
        cand = found[valid]
        cand = cand[np.argsort(cand[:, 6], kind="stable")]
        class_ids = cand[:, 5].astype(np.int64)
        if layout.iou_threshold is None:
            det = self._kept(cand[:, :4], cand[:, 4], class_ids)
        else:  # NMS ran in the graph: its survivors, best first, ties by anchor as nms() orders
            kept = np.flatnonzero(class_ids >= 0)
            kept = kept[np.argsort(-cand[kept, 4], kind="stable")][: self.max_detections]
            det = RawDetections(cxcywh_to_xyxy(cand[kept, :4]), cand[kept, 4], class_ids[kept])
        return RawDetections(det.boxes, det.scores, det.class_ids, saturated)

    def _nms(self, cxcywh: FloatArray, class_scores: FloatArray) -> RawDetections:
        class_ids = class_scores.argmax(axis=1)
        scores = class_scores[np.arange(len(class_scores)), class_ids]
        return self._kept(cxcywh, scores, class_ids)

    def _kept(
        self, cxcywh: FloatArray, scores: FloatArray, class_ids: npt.NDArray[np.int64]
    ) -> RawDetections:
        keep = np.flatnonzero(scores >= self.conf_threshold)
        if keep.size > MAX_NMS_CANDIDATES:
            keep = keep[np.argsort(-scores[keep], kind="stable")[:MAX_NMS_CANDIDATES]]
        if keep.size == 0:
            return NO_DETECTIONS
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
