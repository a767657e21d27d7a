"""Decoder settings: which cameras, at what rate, into which model input, and what to do when slow."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from framebus.kafka.settings import KafkaSettings
from framebus.messages import Compression
from framebus.pixels import DEFAULT_FRAME_FORMAT, FrameFormat
from framebus.settings import (
    check,
    check_run_settings,
    http_port_setting,
    log_level_setting,
    setting,
)
from framebus.topology import TopicSettings


class RtspTransport(enum.Enum):
    """Transport of RTSP media: TCP (interleaved, survives NAT and loss) or UDP (lower latency)."""

    TCP = "tcp"
    UDP = "udp"


class BackpressurePolicy(enum.Enum):
    """What a camera does when its pending-frame queue in front of the Kafka producer is full."""

    DROP_OLDEST = "drop_oldest"  # freshest frames win: the usual choice for live detection
    DROP_NEWEST = "drop_newest"  # keep what is queued, discard the frame just decoded
    BLOCK = "block"  # stop decoding this camera until there is room (no frame lost here)


class DecodeThreading(enum.Enum):
    """FFmpeg's decoder threading (PyAV `thread_type`)."""

    AUTO = "auto"
    FRAME = "frame"
    SLICE = "slice"
    NONE = "none"


class HwAccel(enum.Enum):
    """Where a camera's video is decoded: in software, or on a device through PyAV's `hwaccel`.

    A camera whose device cannot be opened (none there, no driver, a codec the device does not
    decode) decodes in software: said once per camera in the log, counted in
    `framebus_decoder_hwaccel_fallbacks_total`.
    """

    NONE = "none"  # FFmpeg's software decoder
    CUDA = "cuda"  # NVDEC (listed by PyAV's PyPI wheel); a fallback is logged as a warning
    AUTO = "auto"  # the first device type this FFmpeg build lists that opens; else software


@dataclass(frozen=True)
class DecoderSettings:
    """Everything `framebus decoder` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    camera_id: str = setting("cam0", "Camera id for a single camera given by --camera-url.")
    camera_url: str | None = setting(
        None, "Video of a single camera: rtsp://, rtsps://, http(s):// (also HLS .m3u8) or a file."
    )
    cameras_file: Path | None = setting(
        None,
        "YAML or JSON file listing cameras (id, url, target_fps, per-camera options); "
        "re-read while running, so cameras are added and removed without a restart.",
    )
    cameras_reload_s: float = setting(
        2.0, "How often the cameras file is checked for changes, in seconds (0 = never)."
    )
    target_fps: float = setting(
        5.0, "Default frames per second published per camera, by timestamp (0 = every frame)."
    )
    input_width: int = setting(640, "Model input width in pixels; frames are letterboxed to it.")
    input_height: int = setting(640, "Model input height in pixels.")
    frame_format: FrameFormat = setting(
        DEFAULT_FRAME_FORMAT,
        "Pixels on the wire: i420 (YUV 4:2:0, 1.5 bytes a pixel, converted to RGB inside the "
        "inferencer's model graph) or rgb (3 bytes a pixel, converted here); docs/decoder.md.",
    )
    compression: Compression = setting(Compression.NONE, "Compression of the tensor bytes.")
    loop: bool = setting(False, "Restart file sources at their end (demos, load tests).")
    realtime: bool = setting(
        False,
        "Pace file sources to their timestamps, like a live camera (demos, load tests); "
        "off = decode files as fast as possible (benchmarks).",
    )
    rtsp_transport: RtspTransport = setting(RtspTransport.TCP, "Default RTSP transport.")
    decode_threading: DecodeThreading = setting(
        DecodeThreading.AUTO, "FFmpeg decoder threading (auto = frame and slice threads)."
    )
    decode_threads: int = setting(0, "FFmpeg decoder threads per camera (0 = FFmpeg decides).")
    hwaccel: HwAccel = setting(
        HwAccel.NONE,
        "Hardware decoding: none (software), cuda (NVDEC) or auto (the first device this FFmpeg "
        "build lists that opens); a camera whose device does not open decodes in software, "
        "logged once and counted. The device is the default one (CUDA_VISIBLE_DEVICES picks).",
    )
    open_timeout_s: float = setting(10.0, "Give up opening a source after this many seconds.")
    stall_timeout_s: float = setting(
        10.0,
        "No frame from a source for this long = reconnect. Time held back by backpressure and "
        "time the decoder process itself did not run (stopped, starved of CPU) do not count.",
    )
    reconnect_initial_s: float = setting(0.5, "First reconnect delay; it doubles on each failure.")
    reconnect_max_s: float = setting(30.0, "Longest reconnect delay.")
    reconnect_jitter: float = setting(
        0.2, "Random spread of each reconnect delay, as a fraction of it (0..1)."
    )
    backpressure: BackpressurePolicy = setting(
        BackpressurePolicy.DROP_OLDEST,
        "What a camera does when its pending frames are not taken by the producer fast enough.",
    )
    max_pending_frames: int = setting(
        2, "Frames per camera waiting for the Kafka producer before the backpressure policy acts."
    )
    # Frames are keyed by camera, and a camera's next frame comes 1/fps later (33-200 ms): no
    # linger short enough to keep latency low ever puts two frames in one partition's batch, so
    # it only delays each frame. Under load librdkafka batches what queued meanwhile anyway.
    producer_linger_ms: int = setting(
        0,
        "Kafka producer linger.ms; 0 sends each frame at once (a camera's frames are 1/fps "
        "apart, so waiting batches nothing), more lets one request carry several partitions' frames.",
    )
    producer_queue_kbytes: int = setting(
        64 * 1024,
        "Kafka producer's local queue in KiB (64 MiB = ~50 frames of 640x640x3, ~100 in I420) "
        "before "
        "backpressure starts.",
    )
    drain_timeout_s: float = setting(
        15.0, "At shutdown, how long queued frames may take to be delivered."
    )
    max_frames: int = setting(
        0, "Stop each camera after publishing this many frames (0 = no limit)."
    )
    motion_enabled: bool = setting(
        False,
        "Default of each camera's motion gate: frames without motion go out as still records "
        "(no pixels, no model run); off by default, as it changes what downstream sees "
        "(docs/motion.md).",
    )
    motion_threshold: float = setting(
        25.0, "Luma difference (0..255) for a pixel to count as changed by the motion gate."
    )
    motion_min_area: float = setting(
        0.002, "Fraction of the picture (0..1) that must change to count as motion."
    )
    motion_still_refresh_s: float = setting(
        10.0, "With the motion gate, a full frame at least this often in seconds while still."
    )
    motion_lighting_fraction: float = setting(
        0.5,
        "More of the picture than this fraction changing at once is a lighting change: the "
        "frame is sent in full (the gate's new reference), not counted as motion.",
    )
    video_enabled: bool = setting(
        False,
        "Default of each camera's `video`: publish every compressed packet to the video topic "
        "for `framebus clips`; off by default, as it costs the cameras' whole bitrate in broker "
        "disk and network (docs/decoder.md).",
    )
    video_max_pending_packets: int = setting(
        1000,
        "Video packets (all cameras) waiting for the video producer; when full the oldest is "
        "dropped and counted, so a slow broker never holds up decoding.",
    )
    video_linger_ms: int = setting(
        20,
        "The video producer's linger.ms: packets are small and many, so a short wait lets one "
        "request carry many of them.",
    )
    video_queue_kbytes: int = setting(
        32 * 1024, "The video producer's local queue in KiB (its own, apart from the frames')."
    )
    http_port: int = http_port_setting()
    log_level: str = log_level_setting()

    def __post_init__(self) -> None:
        check(self.target_fps >= 0, "target_fps", "must be >= 0")
        check(16 <= self.input_width <= 4096, "input_width", "must be between 16 and 4096")
        check(16 <= self.input_height <= 4096, "input_height", "must be between 16 and 4096")
        check(self.max_frames >= 0, "max_frames", "must be >= 0")
        check_run_settings(self)
        check(self.cameras_reload_s >= 0, "cameras_reload_s", "must be >= 0")
        check(self.decode_threads >= 0, "decode_threads", "must be >= 0")
        check(self.open_timeout_s > 0, "open_timeout_s", "must be > 0")
        check(self.stall_timeout_s > 0, "stall_timeout_s", "must be > 0")
        check(self.reconnect_initial_s > 0, "reconnect_initial_s", "must be > 0")
        check(
            self.reconnect_max_s >= self.reconnect_initial_s,
            "reconnect_max_s",
            "must be >= reconnect_initial_s",
        )
        check(0 <= self.reconnect_jitter <= 1, "reconnect_jitter", "must be between 0 and 1")
        check(self.max_pending_frames >= 1, "max_pending_frames", "must be >= 1")
        check(self.producer_linger_ms >= 0, "producer_linger_ms", "must be >= 0")
        check(self.producer_queue_kbytes >= 1024, "producer_queue_kbytes", "must be >= 1024")
        check(self.video_max_pending_packets >= 1, "video_max_pending_packets", "must be >= 1")
        check(self.video_linger_ms >= 0, "video_linger_ms", "must be >= 0")
        check(self.video_queue_kbytes >= 1024, "video_queue_kbytes", "must be >= 1024")
        check(self.drain_timeout_s >= 0, "drain_timeout_s", "must be >= 0")
        check(0 < self.motion_threshold < 255, "motion_threshold", "must be between 0 and 255")
        check(0 < self.motion_min_area <= 1, "motion_min_area", "must be in (0, 1]")
        check(self.motion_still_refresh_s > 0, "motion_still_refresh_s", "must be > 0")
        check(
            self.motion_min_area < self.motion_lighting_fraction <= 1,
            "motion_lighting_fraction",
            "must be above motion_min_area and at most 1",
        )
