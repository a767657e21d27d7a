import numpy as np
import pytest

from framebus.compression import compress, decompress
from framebus.errors import CodecError
from framebus.messages import Compression


def tensor_bytes() -> bytes:
    rng = np.random.default_rng(0)
    img = np.full((64, 64, 3), 114, np.uint8)
    img[10:40, 10:40] = rng.integers(0, 255, (30, 30, 3), dtype=np.uint8)
    return img.tobytes()


@pytest.mark.parametrize("codec", list(Compression))
def test_compression_when_round_tripped_then_bytes_identical(codec: Compression) -> None:
    raw = tensor_bytes()
    packed = compress(codec, memoryview(bytearray(raw)))
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == raw


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_compression_when_padded_frame_then_smaller(codec: Compression) -> None:
    raw = tensor_bytes()
    assert len(compress(codec, raw)) < len(raw) // 2


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_decompress_when_bytes_corrupt_then_codec_error(codec: Compression) -> None:
    with pytest.raises(CodecError, match="corrupt"):
        decompress(codec, b"\x00\x01not compressed at all")
