"""The decoder against real Kafka and real video: sampling, hot reload, bad input, backpressure."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import yaml

from framebus.codec import FrameCodec
from framebus.kafka.settings import KafkaSettings
from framebus.letterbox import letterbox_window
from framebus.messages import ColourMatrix, ColourRange, Frame
from framebus.pixels import FrameFormat
from framebus_decoder import service
from framebus_decoder.settings import BackpressurePolicy, DecoderSettings, HwAccel
from framebus_decoder.stats import CameraState, DecoderStats
from framebus_tools.synthetic import MovingSquare, write_square_video
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.integration.rtsp import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def small_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 s of 640x360 H.264 at 25 fps."""
    path = tmp_path_factory.mktemp("dec") / "small.mp4"
    return write_square_video(path, MovingSquare(width=640, height=360, side=60, frames=100))


def write_vfr_video(path: Path) -> Path:
    """2 s at 50 fps, then 2 s at 10 fps, in one H.264 MP4 with millisecond timestamps."""
    times_ms = [i * 20 for i in range(100)] + [2000 + i * 100 for i in range(20)]
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=50)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        stream.options = {"preset": "ultrafast", "tune": "zerolatency"}  # no B-frames
        stream.codec_context.time_base = Fraction(1, 1000)
        img = np.zeros((240, 320, 3), np.uint8)
        for i, t in enumerate(times_ms):
            img[:] = i % 255
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = t
            frame.time_base = Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def decode_frames(kafka: KafkaSettings, topic: str, n: int, **kw: float) -> list[Frame]:
    codec = FrameCodec()
    return [codec.decode(m.value()) for m in read_topic(kafka, topic, n, **kw)]


def per_second(pts: list[float]) -> list[int]:
    counts: dict[int, int] = defaultdict(int)
    for t in pts:
        counts[int(t)] += 1
    return [counts[s] for s in range(int(max(pts)) + 1)]


@pytest.mark.parametrize(
    ("fmt", "shape", "tensor_bytes"),
    [(FrameFormat.I420, (640, 640), 614_400), (FrameFormat.RGB, (640, 640, 3), 1_228_800)],
    ids=["i420", "rgb"],
)
def test_decoder_when_25fps_file_at_target_5_then_5_per_second_of_video_time(
    kafka: KafkaSettings,
    topics: TopicFactory,
    small_video: Path,
    fmt: FrameFormat,
    shape: tuple[int, ...],
    tensor_bytes: int,
) -> None:
    names = topics()
    stats = DecoderStats()
    settings = DecoderSettings(
        kafka=kafka, topics=names, camera_id="c", camera_url=str(small_video), target_fps=5
    )
    code = service.run(replace(settings, frame_format=fmt), stats=stats)
    assert code == 0
    frames = decode_frames(kafka, names.frames_topic, 20, settle_s=1.0)
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert all(4 <= n <= 6 for n in per_second([f.pts_s or 0.0 for f in frames]))
    snap = stats.snapshot()["c"]
    assert snap.count("decoded") == 100
    assert snap.count("sampled_out") == 100 - len(frames)
    assert snap.count("delivered") == len(frames)
    f = frames[0]
    assert (f.orig_width, f.orig_height, f.shape, f.pad_x, f.pad_y) == (640, 360, shape, 0, 140)
    assert (f.pixel_format, len(f.tensor)) == (fmt.pixel_format, tensor_bytes)
    # The clip says nothing of its colours: BT.601, limited range, as the RGB path assumed.
    assert (f.colour_matrix, f.colour_range) == (ColourMatrix.BT601, ColourRange.LIMITED)
    # The picture survives either way: a bright 60 x 60 square on a dark ground, all grey.
    window = letterbox_window(f).astype(int)
    assert window.shape == (360, 640, 3)
    assert abs(np.count_nonzero(window.mean(axis=2) > 128) - 60 * 60) < 300
    assert np.abs(window - window.mean(axis=2, keepdims=True)).max() <= 4


def test_decoder_when_variable_frame_rate_file_then_samples_by_time_not_count(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    video = write_vfr_video(tmp_path / "vfr.mp4")
    names = topics()
    stats = DecoderStats()
    settings = DecoderSettings(
        kafka=kafka, topics=names, camera_id="v", camera_url=str(video), target_fps=5
    )
    assert service.run(settings, stats=stats) == 0
    frames = decode_frames(kafka, names.frames_topic, 20, settle_s=1.0)
    counts = per_second([f.pts_s or 0.0 for f in frames])
    # 50 fps and 10 fps halves both give 5 +- 1 per second; a frame-count sampler gives 10 and 2.
    assert all(4 <= n <= 6 for n in counts), counts
    assert stats.snapshot()["v"].count("decoded") == 120


def write_cameras(path: Path, cameras: list[dict[str, object]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"cameras": cameras}), encoding="utf-8")
    tmp.replace(path)  # atomic: the watcher never reads half a file


@pytest.fixture
def running_decoder() -> Iterator[Callable[[DecoderSettings, DecoderStats], list[int]]]:
    threads: list[tuple[threading.Thread, threading.Event]] = []
    codes: list[int] = []

    def start(settings: DecoderSettings, stats: DecoderStats) -> list[int]:
        stop = threading.Event()
        t = threading.Thread(target=lambda: codes.append(service.run(settings, stop, stats)))
        t.start()
        threads.append((t, stop))
        return codes

    yield start
    for t, stop in threads:
        stop.set()
        t.join(30)
        assert not t.is_alive()


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def count(stats: DecoderStats, camera_id: str, name: str) -> int:
    snap = stats.snapshot().get(camera_id)
    return 0 if snap is None else snap.count(name)


def dropped(stats: DecoderStats, camera_id: str) -> int:
    snap = stats.snapshot().get(camera_id)
    return 0 if snap is None else sum(snap.dropped.values())


def test_decoder_when_cameras_start_together_then_each_samples_at_its_own_phase(
    kafka: KafkaSettings, topics: TopicFactory, small_video: Path, tmp_path: Path
) -> None:
    # Three copies of one 25 fps file at 2 fps (a 0.5 s interval): "a" and "b" get the decoder's
    # spread phases (0 and 0.618 of the interval), "c" its own 0.5. Frames are at multiples of 0.04 s.
    names = topics()
    cams_file = tmp_path / "cameras.yaml"
    cam = {"url": str(small_video), "target_fps": 2}
    write_cameras(
        cams_file,
        [{"id": "a", **cam}, {"id": "b", **cam}, {"id": "c", **cam, "sample_phase": 0.5}],
    )
    stats = DecoderStats()
    code = service.run(
        DecoderSettings(kafka=kafka, topics=names, cameras_file=cams_file), stats=stats
    )
    assert code == 0
    total = sum(s.count("delivered") for s in stats.snapshot().values())
    by_cam: dict[str, list[float]] = defaultdict(list)
    for f in decode_frames(kafka, names.frames_topic, total, timeout_s=20):
        by_cam[f.camera_id].append(f.pts_s or 0.0)
    assert by_cam["a"][:3] == pytest.approx([0.0, 0.52, 1.0])
    assert by_cam["b"][:3] == pytest.approx([0.32, 0.84, 1.32])  # first frames at or after 0.309
    assert by_cam["c"][:3] == pytest.approx([0.28, 0.76, 1.28])  # at or after 0.25
    assert {cid: len(v) for cid, v in by_cam.items()} == {"a": 8, "b": 8, "c": 8}


def max_gap_s(frames: list[Frame]) -> float:
    ts = sorted(f.capture_ts_us for f in frames)
    return max((b - a) / 1e6 for a, b in zip(ts, ts[1:], strict=False))


def test_decoder_when_cameras_file_changes_then_adds_and_removes_without_disturbing_others(
    kafka: KafkaSettings,
    topics: TopicFactory,
    small_video: Path,
    tmp_path: Path,
    running_decoder: Callable[[DecoderSettings, DecoderStats], list[int]],
) -> None:
    names = topics()
    cams_file = tmp_path / "cameras.yaml"
    cam = {"url": str(small_video), "target_fps": 5, "loop": True, "realtime": True}
    write_cameras(cams_file, [{"id": "keep", **cam}, {"id": "old", **cam}])
    stats = DecoderStats()
    settings = DecoderSettings(
        kafka=kafka, topics=names, cameras_file=cams_file, cameras_reload_s=0.2
    )
    running_decoder(settings, stats)
    wait_for(
        lambda: count(stats, "old", "delivered") > 0 and count(stats, "keep", "delivered") > 0,
        20,
        "first frames",
    )
    time.sleep(1.0)
    write_cameras(cams_file, [{"id": "keep", **cam}, {"id": "new", **cam}])
    wait_for(lambda: stats.state("old") is CameraState.STOPPED, 10, "old to stop")
    old_final = stats.snapshot()["old"].count("published")
    wait_for(lambda: count(stats, "new", "delivered") >= 5, 20, "new camera frames")
    time.sleep(1.0)
    assert stats.snapshot()["old"].count("published") == old_final
    total = sum(s.count("published") for s in stats.snapshot().values())
    by_cam: dict[str, list[Frame]] = defaultdict(list)
    for f in decode_frames(kafka, names.frames_topic, total, timeout_s=20):
        by_cam[f.camera_id].append(f)
    keep = by_cam["keep"]
    assert [f.seq for f in keep] == list(range(len(keep)))
    assert max_gap_s(keep) < 1.0  # 5 fps: 0.2 s apart, undisturbed by the reload
    assert stats.state("keep") is CameraState.STREAMING
    assert len(by_cam["new"]) >= 5


def test_decoder_when_inputs_are_bad_then_each_fails_counted_and_logged_and_good_camera_carries_on(
    kafka: KafkaSettings,
    topics: TopicFactory,
    small_video: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    running_decoder: Callable[[DecoderSettings, DecoderStats], list[int]],
) -> None:
    data = small_video.read_bytes()
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(data[: len(data) // 2])
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 64)
    unsupported = tmp_path / "unsupported.avi"
    unsupported.write_bytes(mjpeg_avi_bytes().replace(b"MJPG", b"QQQQ"))
    cams_file = tmp_path / "cameras.yaml"
    write_cameras(
        cams_file,
        [
            {"id": "good", "url": str(small_video), "target_fps": 0},
            {"id": "truncated", "url": str(truncated)},
            {"id": "corrupt", "url": str(corrupt)},
            {"id": "unsupported", "url": str(unsupported)},
            {"id": "unreachable", "url": f"rtsp://127.0.0.1:{free_port()}/nothing"},
        ],
    )
    names = topics()
    stats = DecoderStats()
    caplog.set_level(logging.WARNING)
    settings = DecoderSettings(
        kafka=kafka,
        topics=names,
        cameras_file=cams_file,
        open_timeout_s=2,
        reconnect_initial_s=0.2,
        reconnect_max_s=0.5,
    )
    codes = running_decoder(settings, stats)
    wait_for(lambda: count(stats, "good", "delivered") == 100, 30, "the good camera's frames")
    wait_for(lambda: count(stats, "unreachable", "reconnects") >= 2, 10, "reconnects")
    snaps = stats.snapshot()
    assert snaps["good"].count("delivered") == 100
    assert snaps["truncated"].state is CameraState.FAILED
    assert snaps["corrupt"].state is CameraState.FAILED
    assert snaps["corrupt"].errors == {"open_failed": 1}
    assert snaps["unsupported"].state is CameraState.FAILED
    assert snaps["unsupported"].errors == {"unsupported_codec": 1}
    assert snaps["unreachable"].state is CameraState.RECONNECTING
    assert snaps["unreachable"].state_reason == "open_failed"
    assert snaps["unreachable"].errors["open_failed"] >= 2
    assert sum(snaps["truncated"].errors.values()) == 1
    logged = {getattr(r, "camera_id", None) for r in caplog.records if r.levelno >= logging.WARNING}
    assert {"truncated", "corrupt", "unsupported", "unreachable"} <= logged
    assert not codes  # still running: the unreachable camera keeps trying


def mjpeg_avi_bytes() -> bytes:
    import io

    out = io.BytesIO()
    with av.open(out, "w", format="avi") as c:
        s = c.add_stream("mjpeg", rate=25)
        s.width, s.height, s.pix_fmt = 64, 64, "yuvj420p"
        for _ in range(5):
            frame = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")
            for p in s.encode(frame):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return out.getvalue()


@pytest.mark.parametrize("policy", list(BackpressurePolicy))
def test_decoder_when_producer_queue_full_then_policy_applies_and_no_reconnect(
    policy: BackpressurePolicy,
    small_video: Path,
    running_decoder: Callable[[DecoderSettings, DecoderStats], list[int]],
) -> None:
    # Nobody listens on this port: librdkafka's 1 MiB queue fills with the first frame.
    nowhere = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}")
    stats = DecoderStats()
    settings = DecoderSettings(
        kafka=nowhere,
        camera_id="bp",
        camera_url=str(small_video),
        target_fps=10,
        loop=True,
        realtime=True,
        backpressure=policy,
        producer_queue_kbytes=1024,
        stall_timeout_s=1.0,
        drain_timeout_s=0.5,
    )
    running_decoder(settings, stats)
    if policy is BackpressurePolicy.BLOCK:
        wait_for(lambda: stats.state("bp") is CameraState.BACKPRESSURE, 10, "backpressure")
        time.sleep(2.5)  # longer than stall_timeout_s
        assert stats.state("bp") is CameraState.BACKPRESSURE
    else:
        wait_for(lambda: dropped(stats, "bp") >= 5, 15, "drops")
    snap = stats.snapshot()["bp"]
    assert snap.count("reconnects") == 0
    assert snap.errors == {}
    if policy is not BackpressurePolicy.BLOCK:
        assert set(snap.dropped) == {f"backpressure_{policy.value}"}


def test_decoder_when_cuda_decoding_asked_without_gpu_then_software_frames_logged_and_counted(
    kafka: KafkaSettings,
    topics: TopicFactory,
    small_video: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No GPU here: every frame still published, equal to software decoding's, said once."""
    tensors = []
    for hwaccel in (HwAccel.NONE, HwAccel.CUDA):
        names = topics()
        stats = DecoderStats()
        settings = DecoderSettings(
            kafka=kafka,
            topics=names,
            camera_id="c",
            camera_url=str(small_video),
            target_fps=5,
            hwaccel=hwaccel,
        )
        with caplog.at_level(logging.INFO, logger="framebus_decoder"):
            assert service.run(settings, stats=stats) == 0
        frames = decode_frames(kafka, names.frames_topic, 20, settle_s=1.0)
        tensors.append([bytes(f.tensor) for f in frames])
        snap = stats.snapshot()["c"]
        assert snap.device == "software"
        assert snap.count("delivered") == len(frames) == 20
    assert tensors[0] == tensors[1]
    assert snap.hw_fallbacks == {("cuda", "no_device"): 1}
    said = [r for r in caplog.records if "decoding in software" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
