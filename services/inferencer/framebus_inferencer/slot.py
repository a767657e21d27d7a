"""A batch bucket's preallocated, IO-bound input and outputs (`Engine.input_slot` makes them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from framebus_inferencer.model import ModelInfo

# Per bucket, the shape and dtype of each output, known once the bucket has run.
OutputLayout = list[tuple[tuple[int, ...], np.dtype[Any]]]


class InputSlot:
    """One batch bucket's preallocated buffers and IO binding (used by one thread at a time).

    `staging` is the bound input itself on the CPU (and its host side on a GPU): a frame
    written there is a frame handed to the model.
    """

    def __init__(
        self,
        session: ort.InferenceSession,
        info: ModelInfo,
        device: tuple[str, int],
        bucket: int,
        known: OutputLayout | None,
    ) -> None:
        self.bucket = bucket
        self.frame_shape = info.frame_shape
        self._output_names = info.output_names
        shape = (bucket, *info.input.bound_shape)
        self.staging: npt.NDArray[np.uint8] = touched(shape, np.dtype(np.uint8))
        # Per frame, its planes in `staging`: cv2.split writes into them in place.
        self._planes = [list(row) for row in self.staging] if info.input.planar else None
        if device[0] == "cpu":
            # Shares the numpy buffer: writing a frame into `staging` is writing the input.
            self.input = ort.OrtValue.ortvalue_from_numpy(self.staging)
        else:
            self.input = ort.OrtValue.ortvalue_from_shape_and_type(shape, np.uint8, *device)
        self.binding = session.io_binding()
        self.binding.bind_ortvalue_input(info.input_name, self.input)
        self.outputs: list[npt.NDArray[Any]] | None = None
        if known is None:
            for name in info.output_names:
                self.binding.bind_output(name, "cpu")
        else:  # a bucket run before: bind its outputs now, their pages already written
            self._bind_outputs([touched(shape, dtype) for shape, dtype in known])

    def fill(self, frames: Sequence[bytes | memoryview | npt.NDArray[np.uint8]]) -> None:
        """Write `frames` (flat or (H, W, 3) uint8) into `staging`; zero the padding rows."""
        for i, frame in enumerate(frames):
            src = frame if isinstance(frame, np.ndarray) else np.frombuffer(frame, np.uint8)
            if self._planes is None:
                self.staging[i] = src.reshape(self.frame_shape)
            else:
                cv2.split(src.reshape(self.frame_shape), self._planes[i])
        if len(frames) < self.bucket:
            self.staging[len(frames) :] = 0  # padding frames; their outputs are ignored

    @property
    def nbytes(self) -> int:
        """Host bytes this slot holds: its input and its reused outputs."""
        return self.staging.nbytes + sum(a.nbytes for a in self.outputs or ())

    def preallocate_outputs(self) -> list[npt.NDArray[Any]]:
        """After one run, bind host arrays of the now-known output shapes, reused from then on."""
        first = [v.numpy() for v in self.binding.get_outputs()]
        self.binding.clear_binding_outputs()
        self._bind_outputs([np.empty_like(a) for a in first])
        return first

    @property
    def layout(self) -> OutputLayout | None:
        """Its outputs' shapes and dtypes, once bound."""
        return None if self.outputs is None else [(a.shape, a.dtype) for a in self.outputs]

    def _bind_outputs(self, arrays: list[npt.NDArray[Any]]) -> None:
        self.outputs = arrays
        for name, arr in zip(self._output_names, arrays, strict=True):
            self.binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(arr))


def touched(shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """A zeroed array whose pages are mapped now (np.zeros leaves them to the first write)."""
    arr = np.empty(shape, dtype)
    arr.fill(0)
    return arr
