"""Per-camera motion gate: is a sampled frame worth a model run, or is the scene still.

Pure logic on the letterboxed picture (numpy and OpenCV only). The picture is shrunk by a whole
factor to about `GRID_WIDTH` pixels wide, blurred, and compared with the reference: the last
picture the camera sent in full, which is what the model and the tracker last saw. Pixels that
differ by more than `threshold` count as changed. A still frame therefore means "no change since
the last full frame", the condition under which the tracker may carry its objects through it;
docs/motion.md says why this beats a slowly learned background here, with the figures.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]
Polygon = tuple[tuple[float, float], ...]

GRID_WIDTH = 100  # pixels across the grid the gate compares; the factor down to it is whole
BLUR_KERNEL = (3, 3)
# pts are floats summed across file loops: a refresh due "now" may compute as a hair early.
TIME_EPSILON_S = 1e-6


class MotionReason(enum.Enum):
    """Why a sampled frame is sent in full, or STILL when it is not."""

    MOTION = "motion"
    FIRST = "first"  # no reference yet: the first frame of a stream
    MOTION_END = "motion_end"  # the first frame after motion stopped: the model sees the rest
    REFRESH = "refresh"  # still_refresh_s since the last full frame
    LIGHTING = "lighting"  # most of the picture changed at once: a new reference, not motion
    STILL = "still"


@dataclass(frozen=True)
class MotionConfig:
    """One camera's gate settings; `mask` polygons are in original-frame pixels."""

    threshold: float = 25.0  # luma difference (0..255) for a pixel to count as changed
    min_area: float = 0.002  # fraction of the picture that must change to count as motion
    still_refresh_s: float = 10.0
    lighting_fraction: float = 0.5  # more of the picture than this changed: lighting, not motion
    mask: tuple[Polygon, ...] = ()


@dataclass(frozen=True)
class MotionDecision:
    """The gate's answer for one sampled frame."""

    reason: MotionReason
    changed_fraction: float  # of the picture outside the mask, 0 on a first frame

    @property
    def still(self) -> bool:
        """True when the frame goes out without pixels."""
        return self.reason is MotionReason.STILL


def grid_factor(width: int) -> int:
    """The whole factor that shrinks a picture `width` wide to about GRID_WIDTH."""
    return max(1, round(width / GRID_WIDTH))


def shrink(picture: U8) -> U8:
    """The picture's luma on the gate's grid: a whole-factor area mean of a luma or RGB picture.

    The few rows and columns past the last whole block are left out. RGB is shrunk first and
    turned grey after, on a few thousand pixels instead of the full picture.
    """
    h, w = picture.shape[:2]
    k = grid_factor(w)
    gh, gw = max(1, h // k), max(1, w // k)
    crop = picture[: gh * k, : gw * k]
    small = crop if k == 1 else cv2.resize(crop, (gw, gh), interpolation=cv2.INTER_AREA)
    if small.ndim == 3:
        small = cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)
    return np.asarray(small, np.uint8)


def mask_grid(mask: tuple[Polygon, ...], scale: float, factor: int, shape: tuple[int, int]) -> U8:
    """1 where the gate ignores the grid: the mask polygons mapped from original pixels.

    `scale` is the letterbox's (picture pixels per original pixel); the pad is not in the picture.
    """
    grid = np.zeros(shape, np.uint8)
    for polygon in mask:
        points = np.rint(np.asarray(polygon, np.float64) * (scale / factor)).astype(np.int32)
        cv2.fillPoly(grid, [points], 1)
    return grid


class MotionGate:
    """One camera's reference picture and the decision for each of its sampled frames."""

    def __init__(self, config: MotionConfig) -> None:
        self.config = config
        self._reference: F32 | None = None  # the last full frame's picture on the grid
        self._ignored: U8 | None = None  # mask on the grid, for `_mask_key`
        self._mask_key: tuple[float, int, tuple[int, int]] | None = None
        self._in_motion = False
        self._last_full_s = 0.0

    def reset(self) -> None:
        """Forget the reference (a new stream): the next frame is sent in full as FIRST."""
        self._reference = None
        self._in_motion = False

    def check(self, picture: U8, scale: float, pts_s: float) -> MotionDecision:
        """Decide for one sampled frame: `picture` is the letterbox window (luma, or RGB)."""
        small = shrink(picture)
        blurred = cv2.GaussianBlur(small, BLUR_KERNEL, 0).astype(np.float32)
        reference = self._reference
        if reference is None or reference.shape != blurred.shape:
            self._in_motion = False
            return self._full(MotionReason.FIRST, 0.0, pts_s, blurred)
        fraction = self._changed_fraction(blurred, reference, scale, grid_factor(picture.shape[1]))
        if fraction > self.config.lighting_fraction:
            self._in_motion = False
            return self._full(MotionReason.LIGHTING, fraction, pts_s, blurred)
        if fraction >= self.config.min_area:
            self._in_motion = True
            return self._full(MotionReason.MOTION, fraction, pts_s, blurred)
        if self._in_motion:
            self._in_motion = False
            return self._full(MotionReason.MOTION_END, fraction, pts_s, blurred)
        since = pts_s - self._last_full_s
        if since < 0 or since >= self.config.still_refresh_s - TIME_EPSILON_S:
            return self._full(MotionReason.REFRESH, fraction, pts_s, blurred)
        return MotionDecision(MotionReason.STILL, fraction)

    def _full(
        self, reason: MotionReason, fraction: float, pts_s: float, picture: F32
    ) -> MotionDecision:
        """A frame sent in full: it becomes the reference the next frames are compared with."""
        self._reference = picture
        self._last_full_s = pts_s
        return MotionDecision(reason, fraction)

    def _changed_fraction(self, current: F32, reference: F32, scale: float, factor: int) -> float:
        changed = cv2.absdiff(current, reference) > self.config.threshold
        if not self.config.mask:
            return float(np.count_nonzero(changed)) / changed.size
        ignored = self._ignored_grid(scale, factor, changed.shape)
        seen = changed.size - int(np.count_nonzero(ignored))
        if seen == 0:
            return 0.0
        return float(np.count_nonzero(changed & (ignored == 0))) / seen

    def _ignored_grid(self, scale: float, factor: int, shape: tuple[int, ...]) -> U8:
        key = (scale, factor, (shape[0], shape[1]))
        if self._ignored is None or self._mask_key != key:
            self._ignored = mask_grid(self.config.mask, scale, factor, key[2])
            self._mask_key = key
        return self._ignored
