"""The I420 wire format finds what the RGB one finds: the decoder's and the engine's own paths.

Each source frame is letterboxed by the decoder's `letterbox_frame` into an RGB and an I420
buffer, and each buffer is inferred by an engine whose graph takes that format (the I420 one
converts colour inside the graph); the boxes are mapped back to the source's pixels as the
inferencer maps them. Sources: the generated scene (H.264, the demo's colour-blob detector, whose
boxes depend on colours within a tolerance), an odd-sized variable-frame-rate VP9 clip of the same
scene (H.264 has no odd sizes in 4:2:0), and the real YOLOv8s on Debian's darknet photos, both as
a camera would send them (4:2:0 planes) and as the decoder opens the JPEG files.
"""

from __future__ import annotations

import fractions
from collections.abc import Iterator
from pathlib import Path

import av
import cv2
import pytest

from framebus.letterbox import Letterbox
from framebus.messages import Box, Frame
from framebus.pixels import FrameFormat
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.source import letterbox_frame
from framebus_inferencer.engine import Engine
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.records import boxes_of
from framebus_inferencer.settings import Provider
from framebus_tools.scene import Scene, write_scene_video
from framebus_tools.scene_model import write_color_blob_model
from framebus_tools.scenes import default_scene
from tests.integration.test_pretrained_model import CONF, IOU, MAX_DET, PHOTOS, fall_model, iou

pytestmark = pytest.mark.integration

__all__ = ["fall_model"]  # the session fixture, shared with test_pretrained_model
SIZE = 640
FORMATS = (FrameFormat.RGB, FrameFormat.I420)
ODD = (641, 359)  # an odd letterbox pad (141 rows, 140 in I420) and odd chroma planes
VFR_MS = (0, 33, 73, 93, 160, 170, 250, 290, 340, 420)  # uneven frame intervals, ms
PHOTO_NAMES = ("person.jpg", "dog.jpg", "horses.jpg", "eagle.jpg", "giraffe.jpg", "kite.jpg")


def engines(model: Path, max_batch: int = 1) -> dict[FrameFormat, Engine]:
    """One engine per format on the CPU, warmed up as the service does."""
    out = {}
    for fmt in FORMATS:
        engine = Engine(
            model, EngineOptions(providers=(Provider.CPU,), max_batch=max_batch, frame_format=fmt)
        )
        engine.warm_up()
        out[fmt] = engine
    return out


def detect(engine: Engine, decoder: Decoder, frame: av.VideoFrame, fmt: FrameFormat) -> list[Box]:
    """The decoder's letterbox, the engine, the head decode and the map back, for one frame."""
    buffer = LetterboxBuffer(SIZE, SIZE, fmt=fmt)
    lb = letterbox_frame(frame, buffer)
    record = Frame(
        camera_id="formats",
        seq=0,
        capture_ts_us=0,
        orig_width=frame.width,
        orig_height=frame.height,
        shape=buffer.shape,
        layout=buffer.layout,
        scale=lb.scale,
        pad_x=lb.pad_x,
        pad_y=lb.pad_y,
        tensor=b"",
        pixel_format=fmt.pixel_format,
        colour_matrix=buffer.colour.matrix,
        colour_range=buffer.colour.range,
    )
    (det,) = decoder.decode(engine.infer([buffer.tensor], [record]), 1)
    return list(boxes_of(det, record, engine.info.class_names))


def both(
    pair: dict[FrameFormat, Engine], decoder: Decoder, frames: Iterator[av.VideoFrame]
) -> Iterator[tuple[list[Box], list[Box]]]:
    """Per frame, the boxes of the RGB path and of the I420 path."""
    for frame in frames:
        rgb, i420 = (detect(pair[fmt], decoder, frame, fmt) for fmt in FORMATS)
        yield rgb, i420


def worst_corner_px(pairs: Iterator[tuple[list[Box], list[Box]]]) -> tuple[float, int]:
    """The largest corner difference between matched boxes (same class, by position), frames."""
    worst, frames = 0.0, 0
    for rgb, i420 in pairs:
        frames += 1
        assert sorted(b.class_id for b in rgb) == sorted(b.class_id for b in i420), (rgb, i420)
        for box in rgb:
            mate = min(
                (b for b in i420 if b.class_id == box.class_id),
                key=lambda b: abs(b.x1 - box.x1) + abs(b.y1 - box.y1),
            )
            corners = (box.x1 - mate.x1, box.y1 - mate.y1, box.x2 - mate.x2, box.y2 - mate.y2)
            worst = max(worst, *map(abs, corners))
    return worst, frames


def decoded(path: Path, step: int = 1) -> Iterator[av.VideoFrame]:
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i % step == 0:
                yield frame


def write_vfr_odd_clip(path: Path, scene: Scene) -> Path:
    """The scene at `VFR_MS` (from 2 s, when three actors are in view), 641 x 359, in VP9."""
    tb = fractions.Fraction(1, 1000)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libvpx-vp9")
        stream.width, stream.height, stream.pix_fmt = *ODD, "yuv420p"
        stream.time_base = stream.codec_context.time_base = tb
        stream.options = {"deadline": "realtime", "cpu-used": "8", "crf": "18", "b:v": "0"}
        for ms in VFR_MS:
            picture = cv2.resize(
                scene.render(2.0 + 3 * ms / 1000), ODD, interpolation=cv2.INTER_AREA
            )
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts, frame.time_base = ms, tb
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@pytest.fixture(scope="module")
def scene() -> Scene:
    return default_scene()


@pytest.fixture(scope="module")
def blob_engines(
    scene: Scene, tmp_path_factory: pytest.TempPathFactory
) -> dict[FrameFormat, Engine]:
    return engines(write_color_blob_model(tmp_path_factory.mktemp("blob") / "blob.onnx", scene))


def test_frame_formats_when_generated_scene_then_i420_boxes_within_1px_of_rgb(
    scene: Scene, blob_engines: dict[FrameFormat, Engine], tmp_path: Path
) -> None:
    video = write_scene_video(tmp_path / "scene.mp4", scene)
    worst, frames = worst_corner_px(
        both(blob_engines, Decoder(blob_engines[FrameFormat.RGB].info.head), decoded(video, step=5))
    )
    print(f"generated scene: {frames} frames, worst corner difference {worst:.2f} px")  # noqa: T201
    assert frames == scene.frames // 5
    assert worst <= 1.0


def test_frame_formats_when_odd_sized_variable_frame_rate_clip_then_i420_boxes_within_1px(
    scene: Scene, blob_engines: dict[FrameFormat, Engine], tmp_path: Path
) -> None:
    video = write_vfr_odd_clip(tmp_path / "odd-vfr.mkv", scene)
    with av.open(str(video)) as container:
        pts = [f.pts for f in container.decode(video=0)]
        assert pts == list(VFR_MS)  # the clip is what it claims: variable frame intervals
    worst, frames = worst_corner_px(
        both(blob_engines, Decoder(blob_engines[FrameFormat.RGB].info.head), decoded(video))
    )
    print(f"odd {ODD[0]}x{ODD[1]} VFR clip: {frames} frames, worst {worst:.2f} px")  # noqa: T201
    assert frames == len(VFR_MS)
    # One model-input pixel (1.0016 px of the clip): the 141-row pad is odd, so the picture's
    # chroma is resampled half a sample over, and a colour detector's edge may move by a pixel.
    assert worst <= 1.0 / Letterbox.fit(*ODD, SIZE, SIZE).scale


def camera_frame(path: Path) -> av.VideoFrame:
    """A photo as a camera sends it: 4:2:0 planes, BT.601 limited range (OpenCV's conversion)."""
    bgr = cv2.imread(str(path))
    if bgr is None:
        pytest.fail(f"needs {path}, from Debian's darknet package (scripts/system-packages.txt)")
    h, w = bgr.shape[:2]
    even = cv2.copyMakeBorder(bgr, 0, h & 1, 0, w & 1, cv2.BORDER_REPLICATE)  # 4:2:0 sizes
    tall = cv2.cvtColor(even, cv2.COLOR_BGR2YUV_I420)
    return av.VideoFrame.from_ndarray(tall, format="yuv420p")


def jpeg_frame(path: Path) -> av.VideoFrame:
    """The photo as the decoder opens the file (4:4:0 or 4:4:4 full-range JPEG)."""
    with av.open(str(path)) as container:
        return next(container.decode(video=0))


def matched(rgb: list[Box], i420: list[Box]) -> tuple[float, float]:
    """(lowest IoU, largest score difference) over the RGB path's boxes and their I420 mates."""
    lowest, widest = 1.0, 0.0
    unmatched = list(i420)
    for box in sorted(rgb, key=lambda b: -b.score):
        same = [b for b in unmatched if b.class_id == box.class_id]
        assert same, (box, i420)
        xyxy = (box.x1, box.y1, box.x2, box.y2)
        mate = max(same, key=lambda b: iou(xyxy, (b.x1, b.y1, b.x2, b.y2)))
        unmatched.remove(mate)
        lowest = min(lowest, iou(xyxy, (mate.x1, mate.y1, mate.x2, mate.y2)))
        widest = max(widest, abs(box.score - mate.score))
    # A box one path keeps and the other drops can only be one at the confidence threshold.
    assert all(b.score < CONF + 0.01 for b in unmatched), unmatched
    return lowest, widest


# Score differences of the I420 path from the RGB path on the real photos, by how they differ.
# Same picture, same place (a 4:2:0 camera, even letterbox pads): only rounding. An odd pad: the
# picture's first row shares a 2 x 2 chroma block of the canvas with the pad, so the chroma is
# resampled half a sample over (kite.jpg: 0.015). A 4:4:x JPEG: the I420 path subsamples its
# chroma, the RGB path keeps it whole (kite.jpg: 0.044).
SCORE_TOLERANCE = {"camera": 0.01, "camera-odd-pad": 0.02, "jpeg": 0.05}


@pytest.mark.parametrize("source", ["camera", "jpeg"])
def test_frame_formats_when_real_yolov8s_on_photos_then_boxes_matched_at_iou_098(
    fall_model: Path, source: str
) -> None:
    pair = engines(fall_model)
    decoder = Decoder(pair[FrameFormat.RGB].info.head, CONF, IOU, MAX_DET)
    to_frame = camera_frame if source == "camera" else jpeg_frame
    boxes = 0
    for name in PHOTO_NAMES:
        frame = to_frame(PHOTOS / name)
        rgb, i420 = (detect(pair[fmt], decoder, frame, fmt) for fmt in FORMATS)
        lowest, widest = matched(rgb, i420)
        lb = Letterbox.fit(frame.width, frame.height, SIZE, SIZE)
        kind = f"{source}-odd-pad" if source == "camera" and (lb.pad_x | lb.pad_y) & 1 else source
        print(f"{source} {name}: {len(rgb)} boxes, IoU {lowest:.4f}, score diff {widest:.4f}")  # noqa: T201
        assert lowest >= 0.98, name
        assert widest <= SCORE_TOLERANCE[kind], name
        boxes += len(rgb)
    assert boxes >= len(PHOTO_NAMES)
