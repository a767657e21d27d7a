"""`framebus demo`: the whole pipeline on generated cameras, on the local Kafka, with no GPU.

It starts the local Kafka (unless told where another broker is), creates the topics, generates a
1080p H.264 video and a bright-square ONNX detector, runs `framebus decoder` and
`framebus inferencer` as separate processes, prints detections as they arrive and ends with a
summary once every published frame has its detections record.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from framebus.errors import FramebusError
from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.kafka.topics import ensure_topics, framebus_topics
from framebus.messages import Detections
from framebus.settings import check, setting
from framebus_tools.localkafka import LocalKafka
from framebus_tools.pipeline import (
    CameraSpec,
    DecoderScraper,
    PipelineProcesses,
    detections_reader,
    model_input_size,
    watch_detections,
    write_cameras_file,
)
from framebus_tools.runstats import DecoderView, RunStats, percentile
from framebus_tools.synthetic import MovingSquare, write_bright_square_model, write_square_video


@dataclass(frozen=True)
class DemoSettings:
    """Settings of `framebus demo`."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    cameras: int = setting(3, "Number of simulated cameras (each a 1080p video of its own).")
    frames_per_camera: int = setting(
        50, "Frames each camera publishes before the demo ends (10 s at 5 fps)."
    )
    target_fps: float = setting(5.0, "Frames per second sampled from each camera.")
    video: Path | None = setting(None, "Video to use instead of the generated one.")
    model_path: Path | None = setting(
        None, "YOLOv8 ONNX model to use instead of the generated one."
    )
    output_dir: Path = setting(Path("demo-output"), "Where generated files and results go.")
    start_kafka: bool = setting(True, "Start the embedded local Kafka if nothing answers.")
    timeout_s: float = setting(150.0, "Give up if the pipeline has not finished after this long.")

    def __post_init__(self) -> None:
        check(1 <= self.cameras <= 128, "cameras", "must be between 1 and 128")
        check(self.frames_per_camera >= 1, "frames_per_camera", "must be >= 1")


def _ensure_kafka(settings: DemoSettings) -> None:
    from framebus.kafka.topics import broker_reachable

    if broker_reachable(settings.kafka, 3.0):
        return
    if not settings.start_kafka:
        raise FramebusError(f"no Kafka answers at {settings.kafka.bootstrap_servers}")
    port = int(settings.kafka.bootstrap_servers.rsplit(":", 1)[-1])
    broker = LocalKafka(port=port)
    print(f"starting the local Kafka on 127.0.0.1:{port} ...", flush=True)
    broker.start()
    print(f"local Kafka is up; logs: {broker.log_file}", flush=True)


def _prepare_inputs(settings: DemoSettings) -> tuple[list[Path], Path]:
    """One generated 1080p video per camera (the square at a different phase), and the model."""
    out = settings.output_dir
    out.mkdir(parents=True, exist_ok=True)
    if settings.video is not None:
        videos = [settings.video] * settings.cameras
    else:
        videos = []
        for i in range(settings.cameras):
            video = out / f"camera-{i}-1080p.mp4"
            if not video.exists():
                print(f"generating {video.name} (1920x1080 H.264, 10 s) ...", flush=True)
                write_square_video(video, MovingSquare(frames=250, fps=25, phase=i * 41))
            videos.append(video)
    model = settings.model_path or write_bright_square_model(out / "bright-square-yolov8.onnx")
    return videos, model


def _show(stats: RunStats, inputs: dict[str, DecoderView], recent: deque[str], live: bool) -> None:
    table = stats.table(inputs)
    if live:  # redraw in place on a terminal
        sys.stdout.write(
            "\x1b[H\x1b[2J" + table + "\n\nlatest detections:\n" + "\n".join(recent) + "\n"
        )
        sys.stdout.flush()
    else:
        print("\n" + table + "\n", flush=True)


def _line(det: Detections) -> str:
    boxes = (
        ", ".join(
            f"{b.class_name} {b.score:.2f} [{b.x1:.0f},{b.y1:.0f},{b.x2:.0f},{b.y2:.0f}]"
            for b in det.boxes
        )
        or "nothing"
    )
    return (
        f"{det.camera_id} #{det.seq:<4} {det.status.value:<13} {det.e2e_latency_ms:7.1f} ms  "
        f"batch {det.batch_size}  {boxes}"
    )


def run_demo(settings: DemoSettings) -> int:
    """Run the demo; return 0 when every published frame got its detections record."""
    _ensure_kafka(settings)
    ensure_topics(settings.kafka, framebus_topics(settings.topics, 6, 6))
    videos, model = _prepare_inputs(settings)
    out = settings.output_dir
    cameras = [
        CameraSpec(f"demo-cam-{i}", str(v), settings.target_fps) for i, v in enumerate(videos)
    ]
    cameras_file = write_cameras_file(out / "cameras.yaml", cameras)
    expected = settings.cameras * settings.frames_per_camera
    started_us = time.time_ns() // 1000
    consumer = detections_reader(
        settings.kafka, settings.topics.detections_topic, started_us // 1000
    )
    stats = RunStats()
    recent: deque[str] = deque(maxlen=10)
    live = sys.stdout.isatty()

    def on_record(det: Detections) -> None:
        if det.capture_ts_us < started_us:
            return  # a frame left over from an earlier run, replayed by at-least-once delivery
        stats.add(det)
        recent.append(_line(det))
        if not live:
            print(recent[-1], flush=True)

    width, height = model_input_size(model)
    processes = PipelineProcesses(
        settings.kafka,
        settings.topics,
        out,
        decoder_env={
            "FRAMEBUS_INPUT_WIDTH": str(width),
            "FRAMEBUS_INPUT_HEIGHT": str(height),
            "FRAMEBUS_CAMERAS_FILE": str(cameras_file),
            "FRAMEBUS_MAX_FRAMES": str(settings.frames_per_camera),
            "FRAMEBUS_LOOP": "true",
            "FRAMEBUS_REALTIME": "true",  # files played as live cameras
        },
        inferencer_env={"FRAMEBUS_MODEL_PATH": str(model), "FRAMEBUS_STOP_AFTER_IDLE_S": "30"},
    )
    deadline = time.monotonic() + settings.timeout_s
    try:
        with processes:
            scraper = DecoderScraper(processes.decoder_metrics_url)
            watch_detections(
                consumer,
                on_record,
                until=lambda: (
                    stats.total >= expected
                    or time.monotonic() > deadline
                    or "inferencer" in processes.exited()
                ),
                tick=lambda: _show(stats, scraper.scrape(), recent, live),
            )
            codes = processes.stop()
    finally:
        consumer.close()
    _show(stats, scraper.views, recent, live)
    sheet = _render_sheet(settings, cameras[0].id)
    startup = _startup(processes, stats)
    return _summarize(stats, expected, out, codes, sheet, startup)


def _startup(processes: PipelineProcesses, stats: RunStats) -> dict[str, float | None]:
    """Start-up, reported apart from the frames' latency (no frame is captured before it ends)."""
    first = stats.first_capture_us()
    return {
        "inferencer_ready_s": processes.inferencer_ready_s,
        "first_frame_after_decoder_start_s": (
            (first - processes.decoder_started_us) / 1e6 if first is not None else None
        ),
    }


def _render_sheet(settings: DemoSettings, camera: str) -> Path | None:
    """A contact sheet of the first camera's last frames with their boxes drawn."""
    from framebus_tools.render.service import RenderSettings, render

    path = settings.output_dir / f"{camera}.png"
    try:
        render(
            RenderSettings(
                kafka=settings.kafka,
                topics=settings.topics,
                camera=camera,
                out=path,
                max_frames=8,
                thumb_width=480,
                read_idle_s=2.0,
            )
        )
    except FramebusError as exc:
        print(f"  (no contact sheet: {exc})")
        return None
    return path


def _summarize(
    stats: RunStats,
    expected: int,
    out: Path,
    codes: dict[str, int],
    sheet: Path | None,
    startup: dict[str, float | None],
) -> int:
    statuses = stats.statuses()
    latencies = stats.all_latencies()
    summary = {
        "frames_published": expected,
        "detections_records": stats.total,
        "by_status": dict(statuses),
        "boxes": sum(c.boxes for c in stats.cameras.values()),
        "latency_ms": {
            "mean": statistics.fmean(latencies) if latencies else None,
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
        },
        "batch_sizes": dict(sorted(stats.all_batch_sizes().items())),
        "startup_s": startup,
        "exit_codes": codes,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print("\nsummary")
    print(f"  frames in (published):  {expected}")
    print(
        f"  detections out:         {stats.total} ({', '.join(f'{s} {n}' for s, n in statuses.items()) or 'none'})"
    )
    print(f"  boxes:                  {summary['boxes']}")
    mean = summary["latency_ms"]["mean"]  # type: ignore[index]
    print(
        f"  mean latency:           {mean if mean is None else round(mean, 1)} ms "
        f"(p50 {percentile(latencies, 50):.0f}, p99 {percentile(latencies, 99):.0f}; capture -> result)"
    )
    ready, first = startup["inferencer_ready_s"], startup["first_frame_after_decoder_start_s"]
    print(
        "  start-up (apart):       inferencer ready in "
        f"{'-' if ready is None else f'{ready:.1f} s'} (model, warm-up, partitions); first frame "
        f"captured {'-' if first is None else f'{first:.1f} s'} after the decoder started "
        "(camera open, producer id)"
    )
    print(
        f"  wrote:                  {out.resolve()}/summary.json, decoder.log, inferencer.log, cameras.yaml"
    )
    if sheet is not None:
        print(f"  detections drawn:       {sheet.resolve()}")
    for name, code in codes.items():
        if code not in (0, -15):  # -15: stopped by our SIGTERM
            log_tail = (out / f"{name}.log").read_text(errors="replace").splitlines()[-8:]
            print(
                f"  {name} exited with code {code}; last lines of its log:", *log_tail, sep="\n    "
            )
    return 0 if stats.total >= expected else 1
