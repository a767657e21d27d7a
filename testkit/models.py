"""Small generated ONNX detectors for tests and benchmarks, re-exported from where they live.

Everything is built with the `onnx` package; nothing is downloaded. `testkit.model_heads` holds the
fixed-output heads (YOLOv5 `[N, anchors, 5 + C]`, YOLOv8 `[N, 4 + C, anchors]`, end-to-end
`[N, K, 6]` or `num_dets/boxes/scores/classes`, each repeating one known per-image tensor) and the
other small heads (`frame_dependent_model`, `strided_head_model`, `near_free_model`,
`poison_pixel_model`); `testkit.model_yolov8n` the YOLOv8n-sized random-weight detector (about 8.7
GFLOPs at 640x640) and `conv_gflops`; `testkit.model_exports` the copies with dynamic image or
output dims, as exports declare them (`with_static_batch` and `to_float16` are in
`framebus_tools.onnxedit`). Import from here or from those modules: the names are the same.
"""

from __future__ import annotations

from testkit.model_exports import with_dynamic_image_dims, with_dynamic_output_dims
from testkit.model_heads import (
    OPSET,
    end2end_model,
    end2end_nms_model,
    fixed_output_model,
    frame_dependent_model,
    near_free_model,
    poison_pixel_model,
    strided_head_model,
    yolov5_model,
    yolov8_model,
)
from testkit.model_yolov8n import conv_gflops, yolov8n_like_model

__all__ = [
    "OPSET",
    "conv_gflops",
    "end2end_model",
    "end2end_nms_model",
    "fixed_output_model",
    "frame_dependent_model",
    "near_free_model",
    "poison_pixel_model",
    "strided_head_model",
    "with_dynamic_image_dims",
    "with_dynamic_output_dims",
    "yolov5_model",
    "yolov8_model",
    "yolov8n_like_model",
]
