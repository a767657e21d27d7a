import numpy as np
import pytest

from framebus.codec import FrameCodec
from framebus.messages import (
    ColourMatrix,
    ColourRange,
    Compression,
    Frame,
    PixelFormat,
    TensorLayout,
)
from framebus.pixels import Colour
from framebus_decoder.wire import FrameEncoder, zigzag_varint

RGB_FRAME = ((48, 64, 3), TensorLayout.HWC, PixelFormat.RGB, Colour())
I420_FRAME = (
    (48, 64),
    TensorLayout.CHW,
    PixelFormat.I420,
    Colour(ColourMatrix.BT709, ColourRange.FULL),
)


@pytest.mark.parametrize("pts_s", [None, 12.5])
@pytest.mark.parametrize("kind", [RGB_FRAME, I420_FRAME], ids=["rgb", "i420-bt709-full"])
def test_frame_encoder_when_encoding_then_bytes_equal_frame_codec(
    pts_s: float | None, kind: tuple[tuple[int, ...], TensorLayout, PixelFormat, Colour]
) -> None:
    shape, layout, pixel_format, colour = kind
    tensor = np.arange(int(np.prod(shape)), dtype=np.uint8)
    fields = dict(
        camera_id="gate-1",
        seq=123456,
        capture_ts_us=1_700_000_000_000_000,
        pts_s=pts_s,
        orig_width=1920,
        orig_height=1080,
        shape=shape,
        layout=layout,
        scale=1 / 30,
        pad_x=0,
        pad_y=6,
        compression=Compression.LZ4,
        pixel_format=pixel_format,
    )
    fast = FrameEncoder().encode(**fields, colour=colour, tensor=tensor.data.cast("B"))  # type: ignore[arg-type]
    as_record = Frame(
        **fields,  # type: ignore[arg-type]
        colour_matrix=colour.matrix,
        colour_range=colour.range,
        tensor=tensor.tobytes(),
    )
    assert fast == FrameCodec().encode(as_record)
    assert FrameCodec().decode(fast) == as_record


@pytest.mark.parametrize(
    ("n", "encoded"), [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (64, b"\x80\x01")]
)
def test_zigzag_varint_when_encoding_then_avro_long_bytes(n: int, encoded: bytes) -> None:
    assert zigzag_varint(n) == encoded
