"""Inferencer settings: batching, freshness, fairness, engine, memory and delivery."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from framebus.kafka.settings import KafkaSettings
from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES, MAX_TRIM_THRESHOLD_BYTES
from framebus.pixels import DEFAULT_FRAME_FORMAT, FrameFormat
from framebus.settings import (
    check,
    check_run_settings,
    http_port_setting,
    log_level_setting,
    setting,
    stage_timeout_setting,
    stop_after_idle_setting,
)
from framebus.topology import TopicSettings

# Floor of the default commit window: at small batches consecutive batches come from one partition
# (the client fetches partition by partition), so 2 x max_batch would pace them by the commit.
MIN_COMMIT_WINDOW = 32
MAX_CANDIDATES = 30000  # the host path's own cap on the candidates NMS sees (postprocess.py)
MAX_WORKERS = 16  # processes per GPU; each holds its own engine, clients and RSS


class Provider(enum.Enum):
    """ONNX Runtime execution providers framebus knows how to configure."""

    TENSORRT = "tensorrt"
    CUDA = "cuda"
    CPU = "cpu"

    @property
    def ort_name(self) -> str:
        """The provider's name in ONNX Runtime."""
        return {
            Provider.TENSORRT: "TensorrtExecutionProvider",
            Provider.CUDA: "CUDAExecutionProvider",
            Provider.CPU: "CPUExecutionProvider",
        }[self]


class DeliveryMode(enum.Enum):
    """How results and consumed offsets are made durable."""

    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE = "exactly_once"


class Spinning(enum.Enum):
    """Whether ONNX Runtime's CPU threads spin between runs; `auto`: not when a GPU runs it."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class HeadFormat(enum.Enum):
    """Layout of the detector's output; `auto` infers it from the output shapes."""

    AUTO = "auto"
    YOLOV5 = "yolov5"
    YOLOV8 = "yolov8"
    END2END = "end2end"


class CandidateSelection(enum.Enum):
    """Where a raw YOLO head's candidates are selected (`candidates.py`).

    `topk`: in the graph (best class score, threshold, top `max_candidates`), NMS on the host;
    `topk_nms`: NMS in the graph too; `host`: the whole raw head comes back to the host;
    `auto`: `topk` when a GPU provider runs the graph, else `host`.
    """

    AUTO = "auto"
    TOPK = "topk"
    TOPK_NMS = "topk_nms"
    HOST = "host"


class CudnnConvAlgoSearch(enum.Enum):
    """cuDNN convolution algorithm search of the CUDA provider."""

    EXHAUSTIVE = "exhaustive"
    HEURISTIC = "heuristic"
    DEFAULT = "default"


@dataclass(frozen=True)
class InferencerSettings:
    """Everything `framebus inferencer` is configured with."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    model_path: Path | None = setting(None, "ONNX detection model (YOLOv5/YOLOv8/YOLO11 export).")
    labels_path: Path | None = setting(
        None, "Text file of class names, one a line; overrides the model's `names` metadata."
    )
    head_format: HeadFormat = setting(HeadFormat.AUTO, "Output layout of the model.")
    input_width: int = setting(
        0,
        "Width the decoder letterboxes frames to (the decoder's setting of the same name); "
        "start-up fails unless it is the model's input width; a model exported with dynamic "
        "height and width runs at this size (0 = the model's, or its `imgsz` metadata's).",
    )
    input_height: int = setting(
        0, "Height the decoder letterboxes frames to; checked like input_width (0 = the model's)."
    )
    frame_format: FrameFormat = setting(
        DEFAULT_FRAME_FORMAT,
        "Pixels the model graph's input takes (the decoders' setting of the same name): i420 "
        "converts colour inside the graph, on the device with a GPU provider; frames of the "
        "other format are converted on the host, frame by frame (counted in "
        "framebus_inferencer_frames_converted_on_host).",
    )
    consumer_group: str = setting("framebus-inferencer", "Kafka consumer group of the inferencers.")
    max_batch: int = setting(8, "A batch closes when it holds this many frames ...")
    max_wait_ms: float = setting(20.0, "... or this long after its first frame arrived, if sooner.")
    max_frame_age_ms: float = setting(
        0.0,
        "Frames older than this (capture time to now) are not inferred but reported "
        "DROPPED_STALE (0 = no limit).",
    )
    max_frames_per_camera: int = setting(
        0, "At most this many frames of one camera in a batch; the rest wait (0 = max_batch)."
    )
    max_pending_frames: int = setting(
        0, "Frames held in memory waiting for a batch before consuming pauses (0 = 4 x max_batch)."
    )
    max_uncommitted_frames: int = setting(
        0,
        "At-least-once: at most this many delivered frames per partition whose commit has not "
        "returned, what a crash delivers again (0 = max(2 x max_batch, 32)).",
    )
    confidence_threshold: float = setting(0.25, "Minimum score of a reported box.")
    iou_threshold: float = setting(0.45, "IoU above which NMS suppresses a box of the same class.")
    max_detections: int = setting(300, "At most this many boxes per frame, best first.")
    candidate_selection: CandidateSelection = setting(
        CandidateSelection.AUTO,
        "Where a raw YOLO head's candidates are selected: topk (in the model graph, on the "
        "device: threshold and top max_candidates; NMS on the host), topk_nms (NMS in the graph "
        "too), host (the whole head comes back), auto (topk when a GPU provider runs the graph, "
        "else host); a head the graph cannot take stays on the host.",
    )
    max_candidates: int = setting(
        300,
        "topk, topk_nms: candidate rows per frame the graph returns, best score first (a frame "
        "with more anchors above the threshold loses the rest).",
    )
    providers: tuple[Provider, ...] = setting(
        (Provider.TENSORRT, Provider.CUDA, Provider.CPU),
        "Execution providers to try, in order; unavailable ones are skipped.",
    )
    require_gpu: bool = setting(
        False, "Fail at start-up unless TensorRT or CUDA really loaded (no silent CPU fallback)."
    )
    device_id: int = setting(0, "GPU index for the TensorRT and CUDA providers.")
    trt_fp16: bool = setting(True, "TensorRT: build FP16 engines.")
    trt_cache_dir: Path = setting(
        Path("~/.cache/framebus/trt").expanduser(),
        "TensorRT: directory of the engine cache and the timing cache.",
    )
    trt_workspace_bytes: int = setting(2 * 1024**3, "TensorRT: builder workspace limit, bytes.")
    gpu_mem_limit_bytes: int = setting(
        4 * 1024**3,
        "GPU: limit on ONNX Runtime's GPU memory, bytes (the CUDA provider's arena; with "
        "TensorRT first a shared CUDA arena; TensorRT's engines are outside it).",
    )
    cudnn_conv_algo_search: CudnnConvAlgoSearch = setting(
        CudnnConvAlgoSearch.HEURISTIC, "CUDA: how cuDNN picks convolution algorithms."
    )
    cpu_arena_limit_bytes: int = setting(
        0, "CPU: byte limit of the shared CPU memory arena (0 = unlimited)."
    )
    intra_op_threads: int = setting(
        0, "ONNX Runtime intra-op threads on the CPU (0 = its default)."
    )
    malloc_trim_threshold_bytes: int = setting(
        MALLOC_TRIM_THRESHOLD_BYTES,
        "glibc: freed heap kept for reuse before it goes back to the kernel, with a fixed 32 MiB "
        "mmap threshold and a 64 MiB top pad (threads' emptied heaps kept), so 1.2 MB records "
        "reuse pages instead of faulting in fresh ones (0 = glibc's defaults).",
    )
    intra_op_spinning: Spinning = setting(
        Spinning.AUTO,
        "Spin ONNX Runtime's CPU threads between runs: on (its default), off (cores "
        "left to Kafka and the other stages), auto (off when a GPU provider is available).",
    )
    delivery: DeliveryMode = setting(
        DeliveryMode.AT_LEAST_ONCE,
        "at_least_once: offsets stored after delivery; exactly_once: Kafka transactions.",
    )
    transactional_id: str | None = setting(
        None,
        "Transactional id for exactly_once; stable per instance (default: group + host name).",
    )
    workers: int = setting(
        1,
        "Inferencer processes sharing this host's (pod's) GPU, members of the same consumer "
        "group; above 1 this process supervises them (restarts, /readyz of all, /metrics with a "
        "`worker` label) and splits gpu_mem_limit_bytes and cpu_arena_limit_bytes among them.",
    )
    worker_index: int | None = setting(
        None,
        "Set by the supervisor of --workers N on each worker it starts (0..N-1); not for setting "
        "by hand.",
    )
    stop_after_idle_s: float = stop_after_idle_setting("frames")
    stage_timeout_s: float = stage_timeout_setting()
    http_port: int = http_port_setting()
    log_level: str = log_level_setting()

    def __post_init__(self) -> None:
        check(1 <= self.max_batch <= 256, "max_batch", "must be between 1 and 256")
        for name, value in (("input_width", self.input_width), ("input_height", self.input_height)):
            check(value == 0 or 16 <= value <= 4096, name, "must be 0 or between 16 and 4096")
        check(
            (self.input_width == 0) == (self.input_height == 0),
            "input_width",
            "set it and FRAMEBUS_INPUT_HEIGHT together, or neither (0 = the model's size)",
        )
        check(self.max_wait_ms >= 0, "max_wait_ms", "must be >= 0")
        check(self.max_frame_age_ms >= 0, "max_frame_age_ms", "must be >= 0 (0 = no limit)")
        check(
            0 <= self.max_frames_per_camera <= self.max_batch,
            "max_frames_per_camera",
            "must be between 0 and max_batch",
        )
        check(self.max_pending_frames >= 0, "max_pending_frames", "must be >= 0")
        check(self.max_uncommitted_frames >= 0, "max_uncommitted_frames", "must be >= 0")
        check(0 <= self.confidence_threshold <= 1, "confidence_threshold", "must be in [0, 1]")
        check(0 <= self.iou_threshold <= 1, "iou_threshold", "must be in [0, 1]")
        check(self.max_detections >= 1, "max_detections", "must be >= 1")
        check(
            self.candidate_selection is CandidateSelection.HOST
            or self.max_detections <= self.max_candidates <= MAX_CANDIDATES,
            "max_candidates",
            f"must be between max_detections and {MAX_CANDIDATES}",
        )
        check(bool(self.providers), "providers", "must name at least one provider")
        check(self.intra_op_threads >= 0, "intra_op_threads", "must be >= 0")
        check(self.cpu_arena_limit_bytes >= 0, "cpu_arena_limit_bytes", "must be >= 0")
        check(
            0 <= self.malloc_trim_threshold_bytes <= MAX_TRIM_THRESHOLD_BYTES,
            "malloc_trim_threshold_bytes",
            f"must be between 0 and {MAX_TRIM_THRESHOLD_BYTES}",
        )
        check(self.gpu_mem_limit_bytes > 0, "gpu_mem_limit_bytes", "must be > 0")
        check(self.trt_workspace_bytes > 0, "trt_workspace_bytes", "must be > 0")
        check(1 <= self.workers <= MAX_WORKERS, "workers", f"must be between 1 and {MAX_WORKERS}")
        check(
            self.worker_index is None or (self.worker_index >= 0 and self.workers == 1),
            "worker_index",
            "is the supervisor's to set, on a worker (>= 0, with workers 1)",
        )
        check_run_settings(self)

    @property
    def camera_quota(self) -> int:
        """Frames of one camera allowed in one batch."""
        return self.max_frames_per_camera or self.max_batch

    @property
    def pending_limit(self) -> int:
        """Frames held waiting for a batch before consuming pauses."""
        return self.max_pending_frames or 4 * self.max_batch

    @property
    def commit_window(self) -> int:
        """Delivered frames per partition allowed to wait for their commit."""
        return self.max_uncommitted_frames or max(2 * self.max_batch, MIN_COMMIT_WINDOW)
