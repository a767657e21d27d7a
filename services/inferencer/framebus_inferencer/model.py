"""What the inferencer knows of a loaded model, and the start-up checks of its shape (pure logic).

Models come as users export them: a dynamic or a static batch, float32 or float16, at some input
size. `ModelInfo` says which; `check_input_size` refuses frames of another size at start-up, and
`static_batch_note` is the line that says how a static-batch model runs a batch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from framebus.errors import ModelError
from framebus_inferencer.graph import InputSpec
from framebus_inferencer.postprocess import CandidateRows
from framebus_inferencer.settings import HeadFormat


class InputSizeError(ModelError):
    """The frames' letterbox size is not the model's input size."""


class BatchMode(enum.Enum):
    """How a batch reaches the model: one call per batch, or a loop of static-batch calls."""

    BATCHED = "batched"
    LOOP = "loop"


@dataclass(frozen=True)
class ModelInfo:
    """What the inferencer needs to know about a model."""

    name: str
    version: str
    input: InputSpec
    output_names: tuple[str, ...]
    class_names: tuple[str, ...]
    head: HeadFormat
    # The graph selects the head's candidates (candidates.py); None: the raw head comes back.
    candidates: CandidateRows | None = None

    @property
    def candidate_selection(self) -> str:
        """Where the candidates are selected: `device` (in the graph) or `host` (postprocess)."""
        on_device = self.candidates is not None or self.head is HeadFormat.END2END
        return "device" if on_device else "host"

    @property
    def static_batch(self) -> int | None:
        """The model's fixed batch size, or None when its batch dimension is dynamic."""
        return self.input.batch

    @property
    def batch_mode(self) -> BatchMode:
        """`batched` (one call per batch) or `loop` (static batch: calls of `static_batch`)."""
        return BatchMode.BATCHED if self.static_batch is None else BatchMode.LOOP

    @property
    def input_name(self) -> str:
        """Name of the uint8 image input."""
        return self.input.name

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of one frame tensor."""
        return (self.input.height, self.input.width, self.input.channels)


def static_batch_note(info: ModelInfo, max_batch: int) -> str:
    """The start-up line that says how a static-batch model runs a batch of `max_batch` frames."""
    b = info.static_batch
    calls = -(-max_batch // (b or 1))
    if b == 1:
        how = f"each batch of up to {max_batch} frames runs as {max_batch} batch-1 calls"
    else:
        how = (
            f"each batch of up to {max_batch} frames runs as {calls} call(s) of {b} frames, "
            "the last one padded"
        )
    return (
        f"model {info.name} has a static batch of {b} (input {info.input.exported_shape}): "
        f"{how} (export with dynamic=True to batch on the device)"
    )


def check_input_size(info: ModelInfo, width: int, height: int) -> None:
    """Refuse to start when the frames' letterbox size (0 = the model's) is not the model's."""
    model_w, model_h = info.input.width, info.input.height
    if (width or model_w, height or model_h) == (model_w, model_h):
        return
    raise InputSizeError(
        f"model {info.name} takes {model_w}x{model_h} images (its input {info.input.name} is "
        f"{info.input.exported_shape}) but frames are letterboxed to {width}x{height} "
        "(FRAMEBUS_INPUT_WIDTH / FRAMEBUS_INPUT_HEIGHT): set FRAMEBUS_INPUT_WIDTH="
        f"{model_w} FRAMEBUS_INPUT_HEIGHT={model_h} for the decoder and the inferencer, "
        f"or export the model at {width}x{height}"
    )
