"""Decoding of YOLO output heads, class-aware NMS, and class names (pure numpy).

Three output layouts are understood:
- YOLOv5: one output `[N, anchors, 5 + classes]` (cx, cy, w, h, objectness, class scores);
- YOLOv8 / YOLO11: one output `[N, 4 + classes, anchors]` (cx, cy, w, h, class scores);
- end-to-end (NMS inside the model): one output `[N, K, 6]` (x1, y1, x2, y2, score, class), or
  the four outputs `num_dets [N, 1]`, `boxes [N, K, 4]`, `scores [N, K]`, `classes [N, K]`.
A YOLOv5 or YOLOv8 head whose candidates the graph selects (`candidates.py`) comes out as
`CandidateRows`: K rows a frame, decoded with the same arithmetic and NMS as the raw head.
Boxes are in model-input pixels; `framebus.letterbox.boxes_to_original` maps them back.
`detect_head` tells the layout from the output shapes, or refuses to guess; `Decoder.check` proves
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


Shape = Sequence[int | str | None]
LAYOUTS = (HeadFormat.YOLOV5, HeadFormat.YOLOV8, HeadFormat.END2END)
LAYOUT_HELP = (
    "YOLOv5 [N, anchors, 5 + classes], YOLOv8 [N, 4 + classes, anchors], end-to-end [N, K, 6] or "
    "num_dets/boxes/scores/classes"
)
HEAD_FLAG = "--head-format / FRAMEBUS_HEAD_FORMAT"
# A YOLO head has one anchor per cell of each output stride (P5 models: 8, 16, 32; P6 models add
# 64), three per cell for YOLOv5: the anchor count follows from the input size.
STRIDE_SETS = ((8, 16, 32), (8, 16, 32, 64))


def format_shapes(shapes: Sequence[Shape]) -> str:
    """Output shapes as `[N, 6, 1]`, several joined by commas; unknown dims as `?`."""
    return ", ".join("[" + ", ".join("?" if d is None else str(d) for d in s) + "]" for s in shapes)


def _known(dim: int | str | None) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def head_misfit(head: HeadFormat, shapes: Sequence[Shape]) -> str | None:
    """Why outputs of these shapes cannot be a `head` head (impossible dims), or None if they can.

    Unknown (dynamic) dims are taken as possible: the engine checks the real outputs after warm-up.
    """
    if head is HeadFormat.AUTO:
        return "the head format must be resolved first"
    if head is HeadFormat.END2END and len(shapes) == 4:
        return None
    if not shapes or len(shapes[0]) != 3:
        return "a YOLOv5, YOLOv8 or [N, K, 6] end-to-end head is one output of 3 dimensions"
    a, b = _known(shapes[0][1]), _known(shapes[0][2])
    if head is HeadFormat.YOLOV5 and b is not None and b < 6:
        return f"a YOLOv5 row needs 6 or more values (4 box, objectness, class scores), not {b}"
    if head is HeadFormat.YOLOV8 and a is not None and a < 5:
        return f"a YOLOv8 head needs 5 or more rows (4 box, class scores), not {a}"
    if head is HeadFormat.END2END and b is not None and b != 6:
        return f"an end-to-end row has 6 values (x1, y1, x2, y2, score, class), not {b}"
    return None


def _class_fit(head: HeadFormat, shape: Shape, num_classes: int) -> bool | None:
    """True: the shape holds exactly `num_classes` classes this way; False: it cannot; None: unknown."""
    if head is HeadFormat.END2END:  # any class count: a row names its class
        return True if len(shape) != 3 or _known(shape[2]) == 6 else None
    dim, extra = (shape[2], 5) if head is HeadFormat.YOLOV5 else (shape[1], 4)
    return None if _known(dim) is None else dim == extra + num_classes


def anchor_counts(head: HeadFormat, height: int, width: int) -> set[int]:
    """The anchor counts a YOLOv5 or YOLOv8 head of a `height` x `width` input can have."""
    per_cell = 3 if head is HeadFormat.YOLOV5 else 1
    return {
        per_cell * sum(-(-height // s) * -(-width // s) for s in strides) for strides in STRIDE_SETS
    }


def _anchor_fit(head: HeadFormat, shape: Shape, input_hw: tuple[int, int]) -> bool | None:
    if head is HeadFormat.END2END or len(shape) != 3:
        return None  # K, the most detections an end-to-end head returns, is any number
    dim = _known(shape[1] if head is HeadFormat.YOLOV5 else shape[2])
    return None if dim is None else dim in anchor_counts(head, *input_hw)


def _narrow(heads: list[HeadFormat], verdicts: Sequence[bool | None]) -> list[HeadFormat]:
    """The heads whose evidence matches, else those it does not contradict (possibly none)."""
    matches = [h for h, v in zip(heads, verdicts, strict=True) if v is True]
    return matches or [h for h, v in zip(heads, verdicts, strict=True) if v is None]


def detect_head(
    shapes: Sequence[Shape], num_classes: int, input_hw: tuple[int, int] | None = None
) -> HeadFormat:
    """The head layout of outputs of these shapes, or a ModelError when it cannot be told.

    What is impossible for a layout rules it out (`head_misfit`); the class count (names metadata
    or labels, 0 when unknown) decides between the rest, then the anchor count a YOLO head of the
    model's input size (H, W) has. A shape still fitting two layouts is refused, never guessed.
    """
    where = f"cannot tell the detector head from output shape {format_shapes(shapes)}"
    heads = [h for h in LAYOUTS if head_misfit(h, shapes) is None]
    if not heads:
        raise ModelError(f"{where}: it fits no layout framebus decodes ({LAYOUT_HELP})")
    shape = shapes[0]
    if num_classes:
        heads = _narrow(heads, [_class_fit(h, shape, num_classes) for h in heads])
        if not heads:
            raise ModelError(
                f"{where}: its {num_classes} class names (the model's names metadata or "
                f"--labels-path) fit no layout (YOLOv5 rows of {5 + num_classes} values, YOLOv8 "
                f"{4 + num_classes} rows, or end-to-end [N, K, 6]); use the model's own class "
                f"names, or set {HEAD_FLAG} to its layout"
            )
    if input_hw is not None and len(heads) > 1:
        heads = _narrow(heads, [_anchor_fit(h, shape, input_hw) for h in heads]) or heads
    if len(heads) == 1:
        return heads[0]
    raise ModelError(
        f"{where}: it could be {' or '.join(h.value for h in heads)}"
        + ("" if num_classes else " and the model has no class names to decide")
        + f"; set {HEAD_FLAG} to the model's layout"
    )


def check_head(head: HeadFormat, shapes: Sequence[Shape]) -> None:
    """Refuse a head format set by hand that outputs of these shapes cannot have."""
    why = head_misfit(head, shapes)
    if why is not None:
        raise ModelError(
            f"{HEAD_FLAG} is {head.value} but the model's output shape {format_shapes(shapes)} "
            f"does not fit that layout: {why}; set it to the model's layout, or to auto"
        )


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
