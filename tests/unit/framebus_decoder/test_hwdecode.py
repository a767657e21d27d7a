"""Hardware decoding: what is tried, the fallback to software on this machine (no GPU), NV12."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import av
import numpy as np
import pytest

from framebus.messages import TensorLayout
from framebus_decoder.cameras import Camera
from framebus_decoder.hwdecode import (
    CODEC_NOT_ON_DEVICE,
    NO_DEVICE,
    NOT_IN_BUILD,
    SOFTWARE,
    candidates,
)
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.publisher import FramePublisher
from framebus_decoder.settings import BackpressurePolicy, DecoderSettings, HwAccel
from framebus_decoder.source import SourceOptions, VideoSource, letterbox_frame, open_device
from framebus_decoder.stats import DecoderStats
from framebus_decoder.telemetry import DecoderCollector
from framebus_decoder.worker import CameraWorker, WorkerConfig

SIZE = (96, 64)  # odd chroma would hide a stride mistake less well than a plain even size


@pytest.fixture(scope="module")
def h264_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short H.264 clip with distinct colours in its corners (chroma that must survive)."""
    path = tmp_path_factory.mktemp("hw") / "clip.mp4"
    w, h = SIZE
    with av.open(str(path), "w") as out:
        stream = out.add_stream("h264", rate=25)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for i in range(6):
            rgb = np.zeros((h, w, 3), np.uint8)
            rgb[: h // 2, : w // 2] = (200, 30, 30)
            rgb[h // 2 :, w // 2 :] = (30, 30, 200)
            rgb[: h // 2, w // 2 :] = (30, 180 + i, 30)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def no_device(device: str) -> None:
    raise av.error.PermissionError(1, "Operation not permitted")


def test_candidates_when_each_mode_then_only_what_the_build_lists_in_preference_order() -> None:
    listed = ["qsv", "cuda", "drm"]
    assert candidates(HwAccel.NONE, listed) == ()
    assert candidates(HwAccel.CUDA, listed) == ("cuda",)
    assert candidates(HwAccel.AUTO, listed) == ("cuda", "qsv")
    assert candidates(HwAccel.CUDA, ["vaapi"]) == ()


def test_open_device_when_none_asked_then_software_without_fallback() -> None:
    assert open_device(HwAccel.NONE, probe=no_device) == (SOFTWARE, None, None)


def test_open_device_when_build_lacks_cuda_then_fallback_names_the_build() -> None:
    device, accel, fallback = open_device(HwAccel.CUDA, listed=["vaapi"], probe=no_device)
    assert (device, accel) == (SOFTWARE, None)
    assert fallback is not None and fallback.reason == NOT_IN_BUILD
    assert "vaapi" in fallback.detail


def test_open_device_when_first_device_fails_then_next_one_is_used() -> None:
    def only_vaapi(device: str) -> None:
        if device != "vaapi":
            raise NotImplementedError(f"no {device}")

    device, accel, fallback = open_device(HwAccel.AUTO, listed=["cuda", "vaapi"], probe=only_vaapi)
    assert device == "vaapi" and accel is not None and fallback is None


def test_video_source_when_cuda_asked_on_a_machine_without_gpu_then_decodes_in_software(
    h264_file: Path,
) -> None:
    """The real probe on this machine: PyAV's wheel lists cuda, no device opens."""
    cam = Camera(id="c1", url=str(h264_file), target_fps=0)
    with VideoSource(cam, SourceOptions(hwaccel=HwAccel.CUDA)) as source:
        frames = [f for f, _, _ in source.frames()]
    assert source.device == SOFTWARE
    assert source.hw_fallback is not None
    assert source.hw_fallback.reason in (NO_DEVICE, NOT_IN_BUILD)
    assert len(frames) == 6


def test_video_source_when_device_opens_but_codec_has_no_decoder_on_it_then_software(
    h264_file: Path,
) -> None:
    """A qsv device that opens (stub probe); this build has no H.264 decoder on qsv."""

    def only_qsv(device: str) -> None:
        if device != "qsv":
            raise av.error.PermissionError(1, "Operation not permitted")

    if "qsv" not in av.codec.hwaccel.hwdevices_available():
        pytest.fail("this PyAV build lists no qsv device type; the test needs one it lists")
    cam = Camera(id="c1", url=str(h264_file), target_fps=0)
    with VideoSource(cam, SourceOptions(hwaccel=HwAccel.AUTO), probe=only_qsv) as source:
        frames = [f for f, _, _ in source.frames()]
    assert source.device == SOFTWARE
    assert source.hw_fallback is not None
    assert (source.hw_fallback.device, source.hw_fallback.reason) == ("qsv", CODEC_NOT_ON_DEVICE)
    assert len(frames) == 6


def test_letterbox_frame_when_nv12_then_same_tensor_as_the_same_planes_in_yuv420p(
    h264_file: Path,
) -> None:
    with av.open(str(h264_file)) as container:
        i420 = next(container.decode(video=0))
    w, h = i420.width, i420.height
    y = i420.to_ndarray()[:h]  # yuv420p as one (H * 3/2, W) array
    u = i420.to_ndarray()[h : h + h // 4].reshape(h // 2, w // 2)
    v = i420.to_ndarray()[h + h // 4 :].reshape(h // 2, w // 2)
    nv12 = av.VideoFrame.from_ndarray(
        np.concatenate([y, np.stack([u, v], axis=-1).reshape(h // 2, w)]), format="nv12"
    )
    a, b = LetterboxBuffer(64, 64), LetterboxBuffer(64, 64)
    assert letterbox_frame(i420, a) == letterbox_frame(nv12, b)
    np.testing.assert_array_equal(a.hwc, b.hwc)
    assert a.hwc[20, 5, 0] > 150  # the red corner is still red: U and V are not swapped
    assert a.hwc[40, 60, 2] > 150


class _Publisher:
    """Takes every frame (the worker's publisher, without Kafka)."""

    def queue_for(self, camera_id: str, policy: BackpressurePolicy) -> object:
        class _Q:
            def is_full(self) -> bool:
                return False

        return _Q()

    def submit(self, pending: object, policy: BackpressurePolicy, stop: object) -> object:
        pending.release()  # type: ignore[attr-defined]

        class _R:
            accepted, waited = True, False

        return _R()


def test_worker_when_cuda_unavailable_then_one_log_line_per_camera_and_a_fallback_per_open(
    h264_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A looping file reopens its source: each open counts, only the first is logged."""
    settings = DecoderSettings(hwaccel=HwAccel.CUDA)
    config = WorkerConfig(
        input_width=64,
        input_height=64,
        layout=TensorLayout.HWC,
        frame_format=settings.frame_format,
        compression=settings.compression,
        source=SourceOptions(hwaccel=HwAccel.CUDA),
        stall_timeout_s=5,
        reconnect_initial_s=0.1,
        reconnect_max_s=0.1,
        reconnect_jitter=0,
        max_frames=15,  # 6 frames a loop: the source opens three times
        policy=BackpressurePolicy.BLOCK,
        buffers=2,
    )
    stats = DecoderStats()
    cam = Camera(id="c1", url=str(h264_file), loop=True, target_fps=0)
    publisher: FramePublisher = _Publisher()  # type: ignore[assignment]
    worker = CameraWorker(cam, config, publisher, stats, threading.Event())
    with caplog.at_level(logging.INFO, logger="framebus_decoder.worker"):
        worker.run()
    fallbacks = [r for r in caplog.records if "decoding in software" in r.getMessage()]
    assert len(fallbacks) == 1 and fallbacks[0].levelno == logging.WARNING
    snap = stats.snapshot()["c1"]
    assert snap.device == SOFTWARE
    assert sum(snap.hw_fallbacks.values()) == 3
    families = {f.name: f for f in DecoderCollector(stats).collect()}
    samples = families["framebus_decoder_hwaccel_fallbacks"].samples
    assert [(s.labels["camera"], s.labels["device"], s.value) for s in samples] == [
        ("c1", "cuda", 3.0)
    ]
    device = families["framebus_decoder_decode_device"].samples
    assert [(s.labels["device"], s.value) for s in device] == [(SOFTWARE, 1.0)]
