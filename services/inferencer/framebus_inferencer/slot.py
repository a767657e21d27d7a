"""A batch bucket's preallocated, IO-bound input and outputs (`Engine.input_slot` makes them).

A frame is written into its row of the input as the model's graph takes it: an RGB frame split
into planes (or copied, for a uint8 NHWC model), an I420 frame copied with its colour code after
it (`colourgraph.py`). A frame of the other format is converted on the host as it is written:
the costly way, for while decoders and inferencers are switched from one format to the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from framebus.messages import Frame, PixelFormat
from framebus.pixels import Colour, colour_code, i420_nbytes, i420_to_rgb, rgb_to_i420
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
        self.pixel_format = info.input.pixel_format
        self._picture = i420_nbytes(info.input.height, info.input.width)
        self._output_names = info.output_names
        shape = (bucket, *info.input.bound_shape)
        self.staging: npt.NDArray[np.uint8] = touched(shape, np.dtype(np.uint8))
        # Per frame, its planes in `staging`: cv2.split writes into them in place.
        planar = info.input.planar and self.pixel_format is PixelFormat.RGB
        self._planes = [list(row) for row in self.staging] if planar else None
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

    def fill(
        self,
        frames: Sequence[bytes | memoryview | npt.NDArray[np.uint8]],
        records: Sequence[Frame] | None = None,
    ) -> None:
        """Write `frames` into `staging`; zero the padding rows.

        Each frame is flat or (H, W, 3) uint8, in the pixel format and colour its record says
        (`records`, one per frame), or without records in the format the input takes.
        """
        for i, frame in enumerate(frames):
            src = frame if isinstance(frame, np.ndarray) else np.frombuffer(frame, np.uint8)
            record = None if records is None else records[i]
            if record is None or record.pixel_format is self.pixel_format:
                self._write(i, src, record)
            else:
                self._convert(i, src, Colour.of(record))
        if len(frames) < self.bucket:
            self.staging[len(frames) :] = 0  # padding frames; their outputs are ignored

    def _write(self, i: int, src: npt.NDArray[np.uint8], record: Frame | None = None) -> None:
        """A frame in the format the input takes: copied, or split into planes.

        An I420 frame's colour code comes from its record (the default colour without one).
        """
        if self.pixel_format is PixelFormat.I420:
            row = self.staging[i]
            row[: self._picture] = src.reshape(-1)
            row[self._picture] = colour_code(Colour() if record is None else Colour.of(record))
        elif self._planes is None:
            self.staging[i] = src.reshape(self.frame_shape)
        else:
            cv2.split(src.reshape(self.frame_shape), self._planes[i])

    def _convert(self, i: int, src: npt.NDArray[np.uint8], colour: Colour) -> None:
        """A frame in the other format: converted on the host with OpenCV, then written."""
        h, w, _ = self.frame_shape
        if self.pixel_format is PixelFormat.I420:  # an RGB frame
            rgb_to_i420(src.reshape(self.frame_shape), self.staging[i, : self._picture])
            self.staging[i, self._picture] = colour_code(Colour())
        else:  # an I420 frame
            self._write(i, i420_to_rgb(src.reshape(-1), h, w, colour))

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
