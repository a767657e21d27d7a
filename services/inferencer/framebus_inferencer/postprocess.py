"""Decoding of YOLO output heads, class-aware NMS, and mapping of boxes to original pixels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]


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


def decode_yolov8(
    output: FloatArray, conf_threshold: float, iou_threshold: float
) -> list[RawDetections]:
    """YOLOv8/YOLO11 head `[N, 4 + classes, anchors]` -> per-image detections after NMS."""
    results = []
    for image in output:  # (4 + C, A)
        pred = image.T  # (A, 4 + C)
        class_scores = pred[:, 4:]
        class_ids = class_scores.argmax(axis=1)
        scores = class_scores[np.arange(len(pred)), class_ids]
        keep = scores >= conf_threshold
        boxes = cxcywh_to_xyxy(pred[keep, :4])
        results.append(_nms_result(boxes, scores[keep], class_ids[keep], iou_threshold))
    return results


def _nms_result(
    boxes: FloatArray, scores: FloatArray, class_ids: npt.NDArray[np.int64], iou_threshold: float
) -> RawDetections:
    if len(boxes) == 0:
        return RawDetections.empty()
    keep = nms(boxes, scores, class_ids, iou_threshold)
    return RawDetections(
        boxes[keep].astype(np.float32),
        scores[keep].astype(np.float32),
        class_ids[keep].astype(np.int64),
    )


def nms(
    boxes: FloatArray, scores: FloatArray, class_ids: npt.NDArray[np.int64], iou_threshold: float
) -> npt.NDArray[np.int64]:
    """Class-aware non-maximum suppression; returns kept indices, best score first.

    Boxes of different classes never suppress each other: each class is offset to its own region
    of the plane (the batched-NMS trick), so one vectorised pass handles all classes.
    """
    if len(boxes) == 0:
        return np.zeros(0, dtype=np.int64)
    span = float(boxes.max()) + 1.0
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
