"""`framebus loadtest`: N simulated live cameras through the real decoder, broker and inferencer.

Each camera is a generated video of its own phase, played in real time and looped, and samples at
its own phase of the sampling interval (`camera_phases`). After the
run, the decoder is stopped (it flushes), the inferencer drains, and every frame published is
matched against the detections records: inferred + dropped by reason must equal published.
"""

from __future__ import annotations

import enum
import json
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from framebus.errors import ConfigError
from framebus.kafka.reader import Reader
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.messages import Detections
from framebus.settings import check, setting
from framebus.topology import INFERENCE_TOPICS, Sizing, TopicSettings, pipeline_specs
from framebus_tools.perf.extras import require_tools_extra
from framebus_tools.perf.tuned import TunedLoad, tuned_load
from framebus_tools.pipeline import (
    CameraSpec,
    PipelineProcesses,
    model_input_size,
    topics_reader,
    watch_detections,
    write_cameras_file,
)
from framebus_tools.runstats import RunStats, percentile
from framebus_tools.synthetic import MovingSquare, write_bright_square_model, write_square_video


class CameraPhases(enum.Enum):
    """When in each sampling interval the simulated cameras take their frames."""

    # Camera i samples at i/N of the interval: unsynchronised cameras, spread as well as they can
    # be; the load the inferencer sees is as smooth as the camera count allows.
    EVEN = "even"
    # Every camera samples the same instant (genlocked cameras, a recorder's synchronised
    # playback): the inferencer gets all N frames at once each interval, the worst case.
    ALIGNED = "aligned"


@dataclass(frozen=True)
class LoadtestSettings:
    """Settings of `framebus loadtest`."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    cameras: int = setting(8, "Simulated cameras.")
    fps: float = setting(5.0, "Frames per second sampled from each camera.")
    camera_phases: CameraPhases = setting(
        CameraPhases.EVEN,
        "When in each sampling interval the cameras take their frames: `even` (camera i at i/N "
        "of the interval) or `aligned` (all at once, the bursty worst case).",
    )
    duration_s: float = setting(60.0, "How long the cameras publish.")
    video: Path | None = setting(
        None, "Video every camera loops (default: generated, one phase per camera)."
    )
    video_width: int = setting(640, "Width of the generated videos.")
    video_height: int = setting(360, "Height of the generated videos.")
    model_path: Path | None = setting(
        None, "ONNX model (default: the generated bright-square detector)."
    )
    max_batch: int = setting(8, "Inferencer max_batch.")
    max_wait_ms: float = setting(20.0, "Inferencer max_wait_ms.")
    inferencer_env: tuple[str, ...] = setting((), "Extra KEY=VALUE settings for the inferencer.")
    warmup_s: float = setting(
        5.0, "Latency percentiles leave out frames of the first seconds (connections, cold caches)."
    )
    drain_timeout_s: float = setting(
        120.0, "How long to wait for the inferencer to catch up after the run."
    )
    output_dir: Path = setting(Path("loadtest-output"), "Where the JSON, PNG and logs go.")
    tune_json: Path | None = setting(
        None,
        "A `framebus tune` result (tune.json): run at `load_fraction` of the capacity it measured, "
        "with its model, threads and recommended max_batch/max_wait_ms/max_frame_age_ms (these "
        "replace fps, max_batch and max_wait_ms), and check p99 <= max_wait_ms + 2 x its batch p99.",
    )
    load_fraction: float = setting(0.8, "With tune_json: the load, as a fraction of capacity.")

    def __post_init__(self) -> None:
        check(1 <= self.cameras <= 256, "cameras", "must be between 1 and 256")
        check(self.fps > 0, "fps", "must be > 0")
        check(self.duration_s > 0, "duration_s", "must be > 0")


@dataclass
class LoadtestResult:
    """What the run measured."""

    settings: dict[str, str]
    published: int
    records: int
    by_status: dict[str, int]
    dead_letters: int
    unaccounted: int
    throughput_fps: float
    latency_ms: dict[str, float]
    batch_sizes: dict[int, int]
    fairness_min_max_share: tuple[float, float]
    duplicates: int
    exit_codes: dict[str, int] = field(default_factory=dict)
    # With tune_json: the tuned load and whether p99 stayed within its goal.
    goal: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """Every frame accounted for, no repeats, and the latency goal met when there was one."""
        met = self.goal is None or bool(self.goal["met"])
        return self.unaccounted == 0 and self.duplicates == 0 and met


def _camera_videos(settings: LoadtestSettings) -> list[Path]:
    if settings.video is not None:
        return [settings.video] * settings.cameras
    out = settings.output_dir / "videos"
    videos = []
    for i in range(settings.cameras):
        scene = MovingSquare(
            width=settings.video_width,
            height=settings.video_height,
            side=max(16, settings.video_height // 6),
            frames=250,
            fps=25,
            phase=i * 37,
        )
        path = out / f"cam-{i}-{settings.video_width}x{settings.video_height}.mp4"
        if not path.exists():
            write_square_video(path, scene)
        videos.append(path)
    return videos


def _phase(settings: LoadtestSettings, camera: int) -> float:
    if settings.camera_phases is CameraPhases.ALIGNED:
        return 0.0
    return camera / settings.cameras


def end_offsets(kafka: KafkaSettings, topic: str) -> int:
    """Sum of the high watermarks of a topic: how many records it holds (for a fresh topic)."""
    with Reader(kafka) as reader:
        return sum(reader.end_offsets(topic).values())


def _prepare(settings: LoadtestSettings) -> tuple[TopicSettings, PipelineProcesses]:
    """Fresh topics, the model, one video per camera, and the two services ready to start."""
    out = settings.output_dir
    out.mkdir(parents=True, exist_ok=True)
    run = uuid.uuid4().hex[:8]
    topics = TopicSettings.with_prefix(f"loadtest-{run}")
    partitions = min(settings.cameras, 12)
    sizing = Sizing(partitions, partitions, replication_factor=1)
    ensure_topics(settings.kafka, pipeline_specs(topics, sizing, INFERENCE_TOPICS))
    model = settings.model_path or write_bright_square_model(out / "bright-square.onnx")
    cameras = [
        CameraSpec(f"cam-{i:03d}", str(v), settings.fps, {"sample_phase": _phase(settings, i)})
        for i, v in enumerate(_camera_videos(settings))
    ]
    cameras_file = write_cameras_file(out / "cameras.yaml", cameras)
    width, height = model_input_size(model)
    extra = dict(item.split("=", 1) for item in settings.inferencer_env)
    processes = PipelineProcesses(
        settings.kafka,
        topics,
        out,
        decoder_env={
            "FRAMEBUS_CAMERAS_FILE": str(cameras_file),
            "FRAMEBUS_LOOP": "true",
            "FRAMEBUS_REALTIME": "true",
            "FRAMEBUS_INPUT_WIDTH": str(width),
            "FRAMEBUS_INPUT_HEIGHT": str(height),
        },
        inferencer_env={
            "FRAMEBUS_MODEL_PATH": str(model),
            "FRAMEBUS_MAX_BATCH": str(settings.max_batch),
            "FRAMEBUS_MAX_WAIT_MS": str(settings.max_wait_ms),
            **extra,
        },
    )
    return topics, processes


class _Collector:
    """Detections records of the run: first occurrences into RunStats, repeats counted."""

    def __init__(self, progress: Any) -> None:
        self.stats = RunStats()
        self.timeline: list[tuple[float, float]] = []  # (seconds since start, e2e latency)
        self.seen: set[tuple[str, int]] = set()
        self.duplicates = 0
        self._progress = progress

    def on_record(self, det: Detections) -> None:
        key = (det.camera_id, det.seq)
        if key in self.seen:
            self.duplicates += 1
            return
        self.seen.add(key)
        self.stats.add(det)
        self.timeline.append((time.monotonic() - self.stats.started, det.e2e_latency_ms))

    def tick(self) -> None:
        lat = self.stats.all_latencies()[-200:]
        self._progress(
            f"[{time.monotonic() - self.stats.started:5.0f} s] records {self.stats.total:6d}  "
            f"p50 {percentile(lat, 50):6.0f} ms  p99 {percentile(lat, 99):6.0f} ms  "
            f"batches {dict(sorted(self.stats.all_batch_sizes().items()))}"
        )

    def steady_latencies(self, warmup_s: float) -> list[float]:
        first = min((t for t, _ in self.timeline), default=0.0)
        steady = [ms for t, ms in self.timeline if t >= first + warmup_s]
        return steady or self.stats.all_latencies()

    def span_s(self) -> float:
        times = [t for t, _ in self.timeline]
        return (max(times) - min(times)) if len(times) > 1 else 0.0


def apply_tune(settings: LoadtestSettings) -> tuple[LoadtestSettings, TunedLoad | None]:
    """The settings a tune result asks for (unchanged without `tune_json`), and the tuned load."""
    if settings.tune_json is None:
        return settings, None
    try:
        doc = json.loads(settings.tune_json.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"FRAMEBUS_TUNE_JSON: cannot read {settings.tune_json}: {exc}") from None
    load = tuned_load(doc, settings.cameras, settings.load_fraction)
    tuned = replace(
        settings,
        fps=load.fps_per_camera,
        max_batch=load.max_batch,
        max_wait_ms=load.max_wait_ms,
        model_path=settings.model_path or load.model_path,
        # The engine threads tune measured with and its staleness bound; the user's own
        # inferencer_env still wins.
        inferencer_env=(
            f"FRAMEBUS_INTRA_OP_THREADS={load.threads}",
            f"FRAMEBUS_MAX_FRAME_AGE_MS={load.max_frame_age_ms:g}",
            *settings.inferencer_env,
        ),
    )
    return tuned, load


def _goal(
    load: TunedLoad | None, settings: LoadtestSettings, p99_ms: float
) -> dict[str, Any] | None:
    if load is None:
        return None
    return {
        "load_fraction": settings.load_fraction,
        "max_frame_age_ms": load.max_frame_age_ms,
        "capacity_fps": load.capacity_fps,
        "batch_p99_ms": load.batch_p99_ms,
        "p99_goal_ms": load.goal_p99_ms,
        "p99_ms": p99_ms,
        "met": p99_ms <= load.goal_p99_ms,
    }


def run_loadtest(settings: LoadtestSettings, progress: Any = print) -> LoadtestResult:
    """Run the load, drain, account for every frame, write the JSON and the plot."""
    settings, load = apply_tune(settings)
    topics, processes = _prepare(settings)
    consumer = topics_reader(settings.kafka, [topics.detections_topic], 0)
    col = _Collector(progress)
    processes.start()
    try:
        load_end = time.monotonic() + settings.duration_s
        watch_detections(
            consumer,
            col.on_record,
            until=lambda: time.monotonic() > load_end or bool(processes.exited()),
            tick=col.tick,
        )
        processes.procs["decoder"].stop(60)  # SIGTERM: it flushes its producer and exits
        published = end_offsets(settings.kafka, topics.frames_topic)
        drain_end = time.monotonic() + settings.drain_timeout_s
        watch_detections(
            consumer,
            col.on_record,
            until=lambda: col.stats.total >= published or time.monotonic() > drain_end,
            tick=col.tick,
        )
        codes = processes.stop()
    finally:
        consumer.close()
        processes.stop()
    dead = end_offsets(settings.kafka, topics.deadletter_topic)
    stats, lat = col.stats, col.steady_latencies(settings.warmup_s)
    span = col.span_s()
    result = LoadtestResult(
        settings={k: str(v) for k, v in asdict(settings).items() if k != "kafka"},
        published=published,
        records=stats.total,
        by_status=dict(stats.statuses()),
        dead_letters=dead,
        unaccounted=published - stats.total - dead,
        throughput_fps=stats.total / span if span else 0.0,
        latency_ms={
            "p50": percentile(lat, 50),
            "p95": percentile(lat, 95),
            "p99": percentile(lat, 99),
            "max": max(lat) if lat else float("nan"),
            "p99_including_warmup": percentile(stats.all_latencies(), 99),
        },
        batch_sizes=dict(sorted(stats.all_batch_sizes().items())),
        fairness_min_max_share=stats.fairness(),
        duplicates=col.duplicates,
        exit_codes=codes,
        goal=_goal(load, settings, percentile(lat, 99)),
    )
    out = settings.output_dir
    (out / "loadtest.json").write_text(json.dumps(asdict(result), indent=2), encoding="utf-8")
    plot_latency(col.timeline, settings, out / "loadtest-latency.png")
    return result


def plot_latency(
    timeline: list[tuple[float, float]], settings: LoadtestSettings, path: Path
) -> None:
    """End-to-end latency over time and its distribution."""
    require_tools_extra("loadtest", "matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=110)
    if timeline:
        xs, ys = zip(*timeline, strict=True)
        left.plot(xs, ys, ".", ms=2)
        right.hist(ys, bins=40)
    left.set_xlabel("seconds since start")
    left.set_ylabel("end-to-end latency, ms")
    right.set_xlabel("end-to-end latency, ms")
    right.set_ylabel("frames")
    fig.suptitle(
        f"framebus loadtest: {settings.cameras} cameras x {settings.fps:g} fps "
        f"({settings.camera_phases.value} phases), "
        f"max_batch {settings.max_batch}, max_wait {settings.max_wait_ms:g} ms",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def format_report(result: LoadtestResult) -> str:
    """The terminal summary."""
    lo, hi = result.fairness_min_max_share
    lines = []
    if result.goal is not None:
        g = result.goal
        lines.append(
            f"tuned load: {g['load_fraction']:.0%} of {g['capacity_fps']:.1f} frames/s, "
            f"max_batch {result.settings['max_batch']}, max_wait_ms {result.settings['max_wait_ms']}, "
            f"max_frame_age_ms {g['max_frame_age_ms']:g}; "
            f"p99 {g['p99_ms']:.0f} ms vs goal {g['p99_goal_ms']:.0f} ms "
            f"(max_wait_ms + 2 x batch p99 {g['batch_p99_ms']:.0f} ms): "
            + ("met" if g["met"] else "NOT met")
        )
    return "\n".join(
        [
            f"published {result.published}, detections records {result.records} {result.by_status}, "
            f"dead letters {result.dead_letters}, unaccounted {result.unaccounted}, duplicates {result.duplicates}",
            f"throughput {result.throughput_fps:.1f} frames/s",
            "end-to-end latency ms: "
            + ", ".join(f"{k} {v:.0f}" for k, v in result.latency_ms.items()),
            f"batch sizes (frames per size): {result.batch_sizes}",
            f"fairness: min/max share of inferred frames {lo:.3f}/{hi:.3f}",
            *lines,
        ]
    )
