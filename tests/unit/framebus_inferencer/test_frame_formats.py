"""The engine and the receive checks with RGB and I420 frames, on the real ONNX Runtime (CPU)."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from framebus.messages import ColourMatrix, ColourRange, Frame, PixelFormat, TensorLayout
from framebus.pixels import FrameFormat, i420_nbytes, rgb_to_i420
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_inferencer.engine import Engine
from framebus_inferencer.pipeline.staging import StagingPool
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.records import boxes_of, check_tensor
from framebus_tools.synthetic import write_bright_square_model
from tests.unit.framebus_inferencer.frames import record

SIZE = 640
RGB_RECORD = record(SIZE)
I420_RECORD = record(SIZE, PixelFormat.I420)


def squares(n: int) -> list[np.ndarray]:
    """RGB frames, each with a bright square at even edges (exact through 4:2:0)."""
    out = []
    for i in range(n):
        frame = np.full((SIZE, SIZE, 3), 24, np.uint8)
        frame[100 + 10 * i : 200 + 10 * i, 300:380] = 235
        out.append(frame)
    return out


def boxes(engine: Engine, frames: list[np.ndarray], records: list[Frame] | None = None) -> list:
    outputs = engine.infer([f.reshape(-1) for f in frames], records)
    return [d.boxes.tolist() for d in Decoder(engine.info.head).decode(outputs, len(frames))]


def engine_of(path: Path, fmt: FrameFormat, max_batch: int = 4) -> Engine:
    engine = Engine(path, EngineOptions(max_batch=max_batch, frame_format=fmt))
    engine.warm_up()
    return engine


@pytest.fixture(scope="module")
def expected(square_model: Path) -> list:
    return boxes(engine_of(square_model, FrameFormat.RGB), squares(3))


def test_engine_when_i420_input_and_i420_frames_then_the_rgb_engine_boxes(
    square_model: Path, expected: list
) -> None:
    engine = engine_of(square_model, FrameFormat.I420)
    assert engine.info.input.pixel_format is PixelFormat.I420
    i420 = [rgb_to_i420(f) for f in squares(3)]
    assert boxes(engine, i420, [I420_RECORD] * 3) == expected
    assert boxes(engine, i420) == expected  # without records: the input's own format


def test_engine_when_a_batch_mixes_formats_then_each_converted_to_the_input_and_same_boxes(
    square_model: Path, expected: list
) -> None:
    rgb, i420 = squares(3), [rgb_to_i420(f) for f in squares(3)]
    mixed, records = [rgb[0], i420[1], rgb[2]], [RGB_RECORD, I420_RECORD, RGB_RECORD]
    assert boxes(engine_of(square_model, FrameFormat.I420), mixed, records) == expected
    assert boxes(engine_of(square_model, FrameFormat.RGB), mixed, records) == expected


def test_engine_when_static_batch_model_loops_over_i420_frames_then_records_follow_frames(
    tmp_path: Path, expected: list
) -> None:
    model = write_bright_square_model(tmp_path / "static.onnx", static_batch=1)
    engine = engine_of(model, FrameFormat.I420)
    frames = [rgb_to_i420(squares(3)[0]), squares(3)[1], rgb_to_i420(squares(3)[2])]
    assert boxes(engine, frames, [I420_RECORD, RGB_RECORD, I420_RECORD]) == expected


def test_staging_pool_when_i420_frames_staged_then_same_boxes_as_the_copying_path(
    square_model: Path, expected: list
) -> None:
    engine = engine_of(square_model, FrameFormat.I420)
    frames = [rgb_to_i420(f) for f in squares(3)]
    slot = StagingPool(engine).stage(frames, [I420_RECORD] * 3)
    assert slot is not None
    assert slot.staging.shape == (4, i420_nbytes(SIZE, SIZE) + 1)  # the row: frame + colour code
    staged = Decoder(engine.info.head).decode(engine.infer_slot(slot, 3), 3)
    assert [d.boxes.tolist() for d in staged] == expected


@pytest.mark.parametrize(
    ("record", "size", "problem"),
    [
        (RGB_RECORD, SIZE * SIZE * 3, None),
        (I420_RECORD, i420_nbytes(SIZE, SIZE), None),
        (I420_RECORD, SIZE * SIZE * 3, "does not match the model input (640, 640) (I420)"),
        (replace(I420_RECORD, shape=(SIZE, SIZE, 3)), i420_nbytes(SIZE, SIZE), "does not match"),
        (replace(RGB_RECORD, layout=TensorLayout.CHW), SIZE * SIZE * 3, "is not HWC"),
        (
            replace(I420_RECORD, pixel_format=PixelFormat.UNKNOWN),
            i420_nbytes(SIZE, SIZE),
            "pixel format UNKNOWN: a format of a later release: upgrade the inferencer",
        ),
        (
            replace(I420_RECORD, colour_matrix=ColourMatrix.UNKNOWN),
            i420_nbytes(SIZE, SIZE),
            "no conversion for UNKNOWN LIMITED, a colour of a later release",
        ),
        (
            replace(I420_RECORD, colour_range=ColourRange.UNKNOWN),
            i420_nbytes(SIZE, SIZE),
            "no conversion for BT601 UNKNOWN",
        ),
    ],
)
def test_check_tensor_when_a_frame_of_either_format_then_reason_or_none(
    record: Frame, size: int, problem: str | None
) -> None:
    found = check_tensor(record, bytes(size), (SIZE, SIZE, 3))
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_engine_when_odd_input_size_then_i420_frames_of_the_decoder_give_the_rgb_boxes(
    tmp_path: Path,
) -> None:
    odd = 161
    model = write_bright_square_model(tmp_path / "odd.onnx", odd)
    picture = np.full((300, 500, 3), 24, np.uint8)
    picture[60:200, 100:260] = 235
    found = []
    for fmt in (FrameFormat.RGB, FrameFormat.I420):
        buffer = LetterboxBuffer(odd, odd, fmt=fmt)
        lb = buffer.fill_rgb(picture)
        frame = replace(
            record(odd, fmt.pixel_format),
            orig_width=500,
            orig_height=300,
            scale=lb.scale,
            pad_x=lb.pad_x,
            pad_y=lb.pad_y,
        )
        engine = engine_of(model, fmt)
        (det,) = Decoder(engine.info.head).decode(engine.infer([buffer.tensor], [frame]), 1)
        found.append([(b.x1, b.y1, b.x2, b.y2) for b in boxes_of(det, frame, ("square", "o"))])
    rgb, i420 = found
    assert len(rgb) == len(i420) == 1, (rgb, i420)
    # Both formats letterbox to the same place (odd pads included): a model pixel would be 3.1.
    assert np.allclose(rgb, i420, atol=1.0)
