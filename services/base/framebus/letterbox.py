"""Letterbox geometry: fit a frame into the model's square input keeping its aspect ratio.

Pure arithmetic shared by the decoder (forward map, when it resizes) and the inferencer (inverse
map, when it turns model-space boxes back into original pixels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PAD_VALUE = 114  # grey used by the YOLO family for padding; the models are trained with it


@dataclass(frozen=True)
class Letterbox:
    """How an original frame maps into the model input: scaled, then padded."""

    scale: float  # model-input pixels per original pixel
    pad_x: int  # padding on the left, model-input pixels
    pad_y: int  # padding on the top, model-input pixels
    resized_width: int
    resized_height: int

    @classmethod
    def fit(cls, src_width: int, src_height: int, dst_width: int, dst_height: int) -> Letterbox:
        """Largest scale that fits the source inside the destination, centred."""
        if min(src_width, src_height, dst_width, dst_height) <= 0:
            raise ValueError("letterbox sizes must be positive")
        scale = min(dst_width / src_width, dst_height / src_height)
        resized_w = min(dst_width, round(src_width * scale))
        resized_h = min(dst_height, round(src_height * scale))
        return cls(
            scale=scale,
            pad_x=(dst_width - resized_w) // 2,
            pad_y=(dst_height - resized_h) // 2,
            resized_width=resized_w,
            resized_height=resized_h,
        )

    def to_model(self, xy: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
        """Map original-pixel points (..., 2) into model-input pixels."""
        out = np.asarray(xy, dtype=np.float64) * self.scale
        out[..., 0] += self.pad_x
        out[..., 1] += self.pad_y
        return out


def boxes_to_original(
    boxes_xyxy: npt.NDArray[np.floating],
    scale: float,
    pad_x: float,
    pad_y: float,
    orig_width: int,
    orig_height: int,
) -> npt.NDArray[np.float32]:
    """Map (N, 4) model-input boxes x1,y1,x2,y2 back to original pixels, clipped to the frame."""
    out = np.array(boxes_xyxy, dtype=np.float32, copy=True).reshape(-1, 4)
    out[:, 0::2] = (out[:, 0::2] - pad_x) / scale
    out[:, 1::2] = (out[:, 1::2] - pad_y) / scale
    np.clip(out[:, 0::2], 0, orig_width, out=out[:, 0::2])
    np.clip(out[:, 1::2], 0, orig_height, out=out[:, 1::2])
    return out
