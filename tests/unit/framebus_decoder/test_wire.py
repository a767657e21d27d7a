import numpy as np
import pytest

from framebus.codec import FrameCodec
from framebus.messages import Compression, Frame, TensorLayout
from framebus_decoder.wire import FrameEncoder, zigzag_varint


@pytest.mark.parametrize("pts_s", [None, 12.5])
def test_frame_encoder_when_encoding_then_bytes_equal_frame_codec(pts_s: float | None) -> None:
    tensor = np.arange(64 * 48 * 3, dtype=np.uint8).reshape(48, 64, 3)
    fields = dict(
        camera_id="gate-1",
        seq=123456,
        capture_ts_us=1_700_000_000_000_000,
        pts_s=pts_s,
        orig_width=1920,
        orig_height=1080,
        shape=(48, 64, 3),
        layout=TensorLayout.HWC,
        scale=1 / 30,
        pad_x=0,
        pad_y=6,
        compression=Compression.LZ4,
    )
    fast = FrameEncoder().encode(**fields, tensor=tensor.data.cast("B"))  # type: ignore[arg-type]
    assert fast == FrameCodec().encode(Frame(**fields, tensor=tensor.tobytes()))  # type: ignore[arg-type]
    assert FrameCodec().decode(fast).tensor == tensor.tobytes()


@pytest.mark.parametrize(
    ("n", "encoded"), [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (64, b"\x80\x01")]
)
def test_zigzag_varint_when_encoding_then_avro_long_bytes(n: int, encoded: bytes) -> None:
    assert zigzag_varint(n) == encoded
