import av
import numpy as np
import pytest

from framebus.messages import ColourMatrix, ColourRange
from framebus.pixels import Colour, FrameFormat, i420_planes
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.source import letterbox_frame, stream_colour

UNSPECIFIED = 2  # AVCOL_SPC_UNSPECIFIED
BT470BG, BT2020 = 5, 9


@pytest.mark.parametrize(
    ("colorspace", "color_range", "pixel_format", "colour"),
    [
        (UNSPECIFIED, 0, "yuv420p", Colour()),  # a stream that says nothing: today's default
        (1, 1, "yuv420p", Colour(ColourMatrix.BT709, ColourRange.LIMITED)),
        (BT470BG, 2, "yuv420p", Colour(ColourMatrix.BT601, ColourRange.FULL)),
        (UNSPECIFIED, 0, "yuvj420p", Colour(ColourMatrix.BT601, ColourRange.FULL)),
        (1, 1, "yuvj420p", Colour(ColourMatrix.BT709, ColourRange.LIMITED)),  # it says MPEG
        (BT2020, 1, "yuv420p", Colour()),  # no BT.2020 conversion: the default matrix
    ],
)
def test_stream_colour_when_metadata_then_matrix_and_range(
    colorspace: int, color_range: int, pixel_format: str, colour: Colour
) -> None:
    assert stream_colour(colorspace, color_range, pixel_format) == colour


def frame_of(pixel_format: str, colorspace: int, color_range: int) -> av.VideoFrame:
    tall = np.arange(48 * 3 // 2 * 64, dtype=np.uint32).astype(np.uint8).reshape(72, 64)
    frame = av.VideoFrame.from_ndarray(tall, format=pixel_format)
    frame.colorspace, frame.color_range = colorspace, color_range
    return frame


def test_letterbox_frame_when_i420_buffer_then_planes_and_the_stream_colour_kept() -> None:
    buf = LetterboxBuffer(64, 48, fmt=FrameFormat.I420)
    letterbox_frame(frame_of("yuv420p", 1, 2), buf)
    assert buf.colour == Colour(ColourMatrix.BT709, ColourRange.FULL)
    y, _, v = i420_planes(buf.tensor, 48, 64)
    tall = np.arange(72 * 64, dtype=np.uint32).astype(np.uint8)
    assert (y.reshape(-1) == tall[: 48 * 64]).all()  # the same size: the planes as decoded
    assert (v.reshape(-1) == tall[48 * 64 + 24 * 32 :]).all()


def test_letterbox_frame_when_yuvj420p_then_i420_takes_its_planes_and_rgb_asks_ffmpeg() -> None:
    yuv, rgb = LetterboxBuffer(64, 48, fmt=FrameFormat.I420), LetterboxBuffer(64, 48)
    letterbox_frame(frame_of("yuvj420p", UNSPECIFIED, 0), yuv)
    letterbox_frame(frame_of("yuvj420p", UNSPECIFIED, 0), rgb)
    assert yuv.colour == Colour(ColourMatrix.BT601, ColourRange.FULL)
    assert rgb.colour == Colour()  # converted by FFmpeg to RGB, as before
