"""`framebus demo`: the whole pipeline on generated cameras, on the local Kafka, with no GPU.

It starts the local Kafka (unless told where another broker is), creates the topics, generates
the ground-truth scene (`framebus_tools.scene`: people walking over a counting line, one standing
in a zone, a car) as a 720p H.264 video, an ONNX detector that finds its actors by colour, and the
scene's alert rules. It runs `framebus decoder`, `framebus inferencer`, `framebus track` and
`framebus alerts` as separate processes, prints each camera's current track ids and each alert as
they arrive, and ends with a summary once every published frame has its detections and tracks
records and the alerts consumer has caught up with them.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import yaml

from framebus.codec import AlertCodec, DetectionsCodec, TracksCodec
from framebus.errors import FramebusError
from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.kafka.topics import ensure_topics, framebus_topics
from framebus.messages import Alert, Detections, FrameStatus, RuleType, Tracks
from framebus.settings import check, setting
from framebus_tools.localkafka import LocalKafka
from framebus_tools.pipeline import (
    CameraSpec,
    DecoderScraper,
    PipelineProcesses,
    ServiceProcess,
    group_caught_up,
    model_input_size,
    topics_reader,
    watch_messages,
    write_cameras_file,
)
from framebus_tools.render.draw import short_track_label
from framebus_tools.runstats import DecoderView, RunStats, percentile
from framebus_tools.scene import Scene, default_scene, scene_rules_document, write_scene_video
from framebus_tools.scene_model import write_color_blob_model

# The colour detector at 320x320: a quarter of its cost at 640 (the demo shares 2 cores among four
# services), and the 1280x720 scene's boxes still come back within a few pixels.
SCENE_MODEL_INPUT = 320
DWELL_S = 2.0


@dataclass(frozen=True)
class DemoSettings:
    """Settings of `framebus demo`."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    cameras: int = setting(3, "Number of simulated cameras (each playing the generated scene).")
    frames_per_camera: int = setting(
        50, "Frames each camera publishes before the demo ends (10 s at 5 fps)."
    )
    target_fps: float = setting(5.0, "Frames per second sampled from each camera.")
    video: Path | None = setting(
        None, "Video to use instead of the generated scene (then no alert rules run)."
    )
    model_path: Path | None = setting(
        None, "YOLOv8 ONNX model to use instead of the generated one (then no alert rules run)."
    )
    output_dir: Path = setting(Path("demo-output"), "Where generated files and results go.")
    start_kafka: bool = setting(True, "Start the embedded local Kafka if nothing answers.")
    timeout_s: float = setting(150.0, "Give up if the pipeline has not finished after this long.")

    def __post_init__(self) -> None:
        check(1 <= self.cameras <= 128, "cameras", "must be between 1 and 128")
        check(self.frames_per_camera >= 1, "frames_per_camera", "must be >= 1")


@dataclass(frozen=True)
class DemoNames:
    """Topics and groups of the demo's tracker and alerts, named after its detections topic.

    Stable for a given detections topic, so a re-run resumes the groups where the last run left
    off (no old record is processed again) and restores the cameras' states: the cameras' seqs
    restart at 0 with newer capture times, which the tracker and the rules take for a decoder
    restart. Line counts are running counts and carry on; the summary counts this run's crossings.
    """

    tracks_topic: str
    alerts_topic: str
    tracker_group: str
    tracker_changelog_topic: str
    alerts_group: str
    alerts_changelog_topic: str


def demo_names(topics: TopicSettings) -> DemoNames:
    """`framebus.tracks`, `framebus.alerts`, ... for the default `framebus.detections`."""
    prefix = topics.detections_topic.removesuffix(".detections")
    return DemoNames(
        tracks_topic=f"{prefix}.tracks",
        alerts_topic=f"{prefix}.alerts",
        tracker_group=f"{prefix}-demo-tracker",
        tracker_changelog_topic=f"{prefix}.demo-tracker-changelog",
        alerts_group=f"{prefix}-demo-alerts",
        alerts_changelog_topic=f"{prefix}.demo-alerts-changelog",
    )


@dataclass(frozen=True)
class DemoInputs:
    """What the cameras play, the model, and the alert rules (None: no `framebus alerts`)."""

    videos: list[Path]
    model: Path
    rules: Path | None


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


def _prepare_inputs(settings: DemoSettings) -> DemoInputs:
    """The scene's video (every camera plays it), its colour detector and its alert rules."""
    out = settings.output_dir
    out.mkdir(parents=True, exist_ok=True)
    scene = default_scene()
    video = settings.video or _scene_video(settings, scene)
    model = settings.model_path or write_color_blob_model(
        out / "scene-colour-blob-yolov8.onnx", scene, SCENE_MODEL_INPUT
    )
    rules = None
    if settings.video is None and settings.model_path is None:  # the rules fit the scene only
        rules = out / "scene-rules.yaml"
        document = scene_rules_document(scene, dwell_s=DWELL_S)
        rules.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return DemoInputs([video] * settings.cameras, model, rules)


def _scene_video(settings: DemoSettings, scene: Scene) -> Path:
    """The part of the scene the run plays (all of it when it plays longer: then it loops)."""
    seconds = min(scene.duration_s, settings.frames_per_camera / settings.target_fps + 1.0)
    digest = hashlib.sha256(repr(scene).encode()).hexdigest()[:8]  # a changed scene: a new file
    video = settings.output_dir / f"scene-{digest}-{seconds:g}s-720p.mp4"
    if not video.exists():
        print(f"generating {video.name} (1280x720 H.264, {seconds:g} s) ...", flush=True)
        write_scene_video(video, scene, end_s=seconds)
    return video


def _ensure_demo_topics(settings: DemoSettings, names: DemoNames, alerts: bool) -> None:
    """The tracker's topics, and the alerts topic: both exist before anyone reads them."""
    from framebus.kafka.changelog import partition_count
    from framebus_tools.alerts.consumer import AlertsSettings, alerts_topic_spec
    from framebus_tracker.service import tracker_topics
    from framebus_tracker.settings import TrackerSettings

    specs = tracker_topics(
        TrackerSettings(
            kafka=settings.kafka,
            topics=settings.topics,
            tracks_topic=names.tracks_topic,
            tracker_changelog_topic=names.tracker_changelog_topic,
        ),
        partition_count(settings.kafka, settings.topics.detections_topic),
        1,  # like the demo's other topics
    )
    if alerts:
        specs.append(alerts_topic_spec(AlertsSettings(alerts_topic=names.alerts_topic)))
    ensure_topics(settings.kafka, specs)


def _downstream(names: DemoNames, rules: Path | None) -> list[ServiceProcess]:
    """`framebus track` and, with rules, `framebus alerts` on the tracks."""
    idle = {"FRAMEBUS_STOP_AFTER_IDLE_S": "30"}  # no orphan outlives the demo for long
    tracker = ServiceProcess(
        "tracker",
        "track",
        {
            **idle,
            "FRAMEBUS_TRACKS_TOPIC": names.tracks_topic,
            "FRAMEBUS_TRACKER_GROUP": names.tracker_group,
            "FRAMEBUS_TRACKER_CHANGELOG_TOPIC": names.tracker_changelog_topic,
        },
    )
    if rules is None:
        return [tracker]
    alerts = ServiceProcess(
        "alerts",
        "alerts",
        {
            **idle,
            "FRAMEBUS_RULES": str(rules),
            "FRAMEBUS_ALERTS_SOURCE": "tracks",
            "FRAMEBUS_TRACKS_TOPIC": names.tracks_topic,
            "FRAMEBUS_ALERTS_TOPIC": names.alerts_topic,
            "FRAMEBUS_ALERTS_GROUP": names.alerts_group,
            "FRAMEBUS_ALERTS_CHANGELOG_TOPIC": names.alerts_changelog_topic,
        },
    )
    return [tracker, alerts]


class TracksBoard:
    """What the tracks and alerts topics said this run: latest tracks per camera, the alerts."""

    def __init__(self) -> None:
        self.latest: dict[str, Tracks] = {}
        self.records = 0
        self.confirmed: set[str] = set()  # track ids confirmed this run
        self.alerts: list[Alert] = []
        self.latencies_ms: list[float] = []  # capture -> tracked, looked-at frames

    def add_tracks(self, tracks: Tracks) -> None:
        """Account for one tracks record."""
        self.records += 1
        if tracks.status is FrameStatus.INFERRED:
            self.latencies_ms.append((tracks.tracked_at_us - tracks.capture_ts_us) / 1000)
        if tracks.seq >= getattr(self.latest.get(tracks.camera_id), "seq", -1):
            self.latest[tracks.camera_id] = tracks
        self.confirmed.update(o.track_id for o in tracks.objects if o.confirmed)

    def add_alert(self, alert: Alert) -> None:
        """Account for one alert."""
        self.alerts.append(alert)

    def table(self) -> str:
        """Per camera: the latest tracks record's seq and its objects' short track ids."""
        head = f"{'camera':<14}{'seq':>6}  tracks on the latest frame (? = not confirmed yet)"
        rows = [head, "-" * len(head)]
        for cid, tracks in sorted(self.latest.items()):
            rows.append(f"{cid:<14}{tracks.seq:>6}  {_objects(tracks, boxes=False)}")
        return "\n".join(rows)

    def line_counts(self) -> dict[str, int]:
        """Line crossings of this run, all cameras, by "<class>:<direction>"."""
        counts = Counter(
            f"{_class_of(a)}:{a.direction.value}"
            for a in self.alerts
            if a.rule_type is RuleType.LINE_CROSSING
        )
        return dict(sorted(counts.items()))

    def dwells(self) -> list[Alert]:
        """Dwell alerts of this run."""
        return [a for a in self.alerts if a.rule_type is RuleType.DWELL]


def _class_of(alert: Alert) -> str:
    return alert.boxes[0].class_name if alert.boxes else "?"


def _objects(tracks: Tracks, boxes: bool) -> str:
    if tracks.status is not FrameStatus.INFERRED:
        return f"not looked at ({tracks.status.value})"
    parts = []
    for o in tracks.objects:
        label = short_track_label(o.track_id) + ("" if o.confirmed else "?")
        b = o.box
        where = f" [{b.x1:.0f},{b.y1:.0f},{b.x2:.0f},{b.y2:.0f}]" if boxes else ""
        parts.append(f"{label} {b.class_name}{where}")
    return ", ".join(parts) or "nothing"


def track_line(tracks: Tracks) -> str:
    """One tracks record as a line: camera, seq, latency, each object with its short track id."""
    return (
        f"{tracks.camera_id} #{tracks.seq:<4} {tracks.e2e_latency_ms:7.1f} ms  "
        f"{_objects(tracks, boxes=True)}"
    )


def alert_line(alert: Alert) -> str:
    """One alert as a line: what fired, on which track, and its measure or counts."""
    who = f"{short_track_label(alert.track_id)} {_class_of(alert)}" if alert.track_id else ""
    head = f"ALERT {alert.camera_id} frame {alert.seq}, {alert.rule}:"
    if alert.rule_type is RuleType.DWELL:
        return f"{head} {who} dwelt {alert.measure:.1f} s in the zone"
    if alert.rule_type is RuleType.LINE_CROSSING:
        counts = ", ".join(f"{k} {n}" for k, n in alert.counts)
        return f"{head} {who} crossed the line {alert.direction.value} (running counts: {counts})"
    if alert.rule_type is RuleType.OCCUPANCY:
        return f"{head} {alert.measure:.0f} objects in the zone"
    return f"{head} {alert.rule_type.value} {who}".rstrip()


@dataclass
class _Live:
    """What the demo prints as records arrive: redrawn in place on a terminal, else appended."""

    live: bool = field(default_factory=sys.stdout.isatty)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=10))
    recent_alerts: deque[str] = field(default_factory=lambda: deque(maxlen=6))

    def record(self, line: str) -> None:
        self.recent.append(line)
        if not self.live:
            print(line, flush=True)

    def alert(self, line: str) -> None:
        self.recent_alerts.append(line)
        if not self.live:
            print(line, flush=True)

    def show(self, stats: RunStats, inputs: dict[str, DecoderView], board: TracksBoard) -> None:
        tables = stats.table(inputs) + "\n\n" + board.table()
        if self.live:
            sys.stdout.write(
                "\x1b[H\x1b[2J"
                + tables
                + "\n\nlatest tracks:\n"
                + "\n".join(self.recent)
                + "\n\nlatest alerts:\n"
                + ("\n".join(self.recent_alerts) or "-")
                + "\n"
            )
            sys.stdout.flush()
        else:
            print("\n" + tables + "\n", flush=True)


def run_demo(settings: DemoSettings) -> int:
    """Run the demo; return 0 when every published frame got its detections and tracks records."""
    _ensure_kafka(settings)
    ensure_topics(settings.kafka, framebus_topics(settings.topics, 6, 6))
    names = demo_names(settings.topics)
    inputs = _prepare_inputs(settings)
    _ensure_demo_topics(settings, names, alerts=inputs.rules is not None)
    out = settings.output_dir
    cameras = [
        CameraSpec(f"demo-cam-{i}", str(v), settings.target_fps)
        for i, v in enumerate(inputs.videos)
    ]
    cameras_file = write_cameras_file(out / "cameras.yaml", cameras)
    expected = settings.cameras * settings.frames_per_camera
    started_us = time.time_ns() // 1000
    read = [settings.topics.detections_topic, names.tracks_topic]
    if inputs.rules is not None:
        read.append(names.alerts_topic)
    consumer = topics_reader(settings.kafka, read, started_us // 1000)
    stats, board, live = RunStats(), TracksBoard(), _Live()
    seen_tracks: dict[tuple[str, int], int] = {}  # (topic, partition) -> last offset read
    on_message = _dispatcher(settings, names, started_us, stats, board, live, seen_tracks)

    width, height = model_input_size(inputs.model)
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
        inferencer_env={
            "FRAMEBUS_MODEL_PATH": str(inputs.model),
            "FRAMEBUS_STOP_AFTER_IDLE_S": "30",
        },
        downstream=_downstream(names, inputs.rules),
    )
    deadline = time.monotonic() + settings.timeout_s
    alerts_caught_up = _AlertsCaughtUp(settings.kafka, names.alerts_group, seen_tracks)

    def finished() -> bool:
        if time.monotonic() > deadline or {"inferencer", "tracker"} & processes.exited().keys():
            return True
        if stats.total < expected or board.records < expected:
            return False
        return inputs.rules is None or "alerts" in processes.exited() or alerts_caught_up()

    try:
        with processes:
            scraper = DecoderScraper(processes.decoder_metrics_url)
            watch_messages(
                consumer,
                on_message,
                until=finished,
                tick=lambda: live.show(stats, scraper.scrape(), board),
            )
            _drain(consumer, on_message)  # the alerts committed with the last tracks
            codes = processes.stop()
    finally:
        consumer.close()
    live.show(stats, scraper.views, board)
    sheet = _render_sheet(settings, names, cameras[0].id)
    startup = _startup(processes, stats)
    # A service that crashed (the alerts consumer, say) fails the demo even if the records came.
    done = stats.total >= expected and board.records >= expected and not any(codes.values())
    _summarize(stats, board, expected, out, codes, sheet, startup)
    return 0 if done else 1


def _dispatcher(
    settings: DemoSettings,
    names: DemoNames,
    started_us: int,
    stats: RunStats,
    board: TracksBoard,
    live: _Live,
    seen_tracks: dict[tuple[str, int], int],
) -> Callable[[confluent_kafka.Message], None]:
    """Decode a message of any of the three topics and account for it."""
    detections, tracks, alerts = DetectionsCodec(), TracksCodec(), AlertCodec()

    def on_message(msg: confluent_kafka.Message) -> None:
        topic, value = msg.topic(), msg.value() or b""
        # A record of an earlier run (at-least-once redelivery, or a group catching up) is skipped.
        if topic == settings.topics.detections_topic:
            det: Detections = detections.decode(value)
            if det.capture_ts_us >= started_us:
                stats.add(det)
        elif topic == names.tracks_topic:
            seen_tracks[(topic, msg.partition() or 0)] = msg.offset() or 0
            t = tracks.decode(value)
            if t.capture_ts_us >= started_us:
                board.add_tracks(t)
                live.record(track_line(t))
        else:
            alert = alerts.decode(value)
            if alert.capture_ts_us >= started_us:
                board.add_alert(alert)
                live.alert(alert_line(alert))

    return on_message


class _AlertsCaughtUp:
    """Whether the alerts consumer committed every tracks record read so far (asked 2x a second)."""

    def __init__(self, kafka: KafkaSettings, group: str, seen: dict[tuple[str, int], int]) -> None:
        self._kafka, self._group, self._seen = kafka, group, seen
        self._next = 0.0

    def __call__(self) -> bool:
        if time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + 0.5
        return group_caught_up(self._kafka, self._group, dict(self._seen))


def _drain(
    consumer: confluent_kafka.Consumer,
    on_message: Callable[[confluent_kafka.Message], None],
    quiet_s: float = 0.5,
    max_s: float = 3.0,
) -> None:
    """Read what is left until nothing arrives for `quiet_s`, for at most `max_s`.

    The bound matters after a timeout, when the decoder may still be publishing.
    """
    end = time.monotonic() + max_s
    while time.monotonic() < end and (messages := consumer.consume(256, quiet_s)):
        for msg in messages:
            if msg.error() is None:
                on_message(msg)


def _startup(processes: PipelineProcesses, stats: RunStats) -> dict[str, float | None]:
    """Start-up, reported apart from the frames' latency (no frame is captured before it ends)."""
    first = stats.first_capture_us()
    return {
        "inferencer_ready_s": processes.inferencer_ready_s,
        "tracker_ready_s": processes.ready_s.get("tracker"),
        "alerts_ready_s": processes.ready_s.get("alerts"),
        "first_frame_after_decoder_start_s": (
            (first - processes.decoder_started_us) / 1e6 if first is not None else None
        ),
    }


def _render_sheet(settings: DemoSettings, names: DemoNames, camera: str) -> Path | None:
    """A contact sheet of the first camera's last frames, boxes drawn with their track ids."""
    from framebus_tools.render.service import RenderSettings, render

    path = settings.output_dir / f"{camera}.png"
    try:
        render(
            RenderSettings(
                kafka=settings.kafka,
                topics=settings.topics,
                tracks_topic=names.tracks_topic,
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
    board: TracksBoard,
    expected: int,
    out: Path,
    codes: dict[str, int],
    sheet: Path | None,
    startup: dict[str, float | None],
) -> None:
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
        "tracks_records": board.records,
        "tracks_confirmed": len(board.confirmed),
        "tracked_latency_ms": {
            "p50": percentile(board.latencies_ms, 50),
            "p99": percentile(board.latencies_ms, 99),
        },
        "alerts": dict(Counter(a.rule_type.value for a in board.alerts)),
        "line_counts": board.line_counts(),
        "dwell_alerts": [
            {"camera": a.camera_id, "track": a.track_id, "seq": a.seq, "seconds": a.measure}
            for a in board.dwells()
        ],
        "startup_s": startup,
        "exit_codes": codes,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print("\nsummary")
    print(f"  frames in (published):  {expected}")
    by_status = ", ".join(f"{s} {n}" for s, n in statuses.items()) or "none"
    print(f"  detections out:         {stats.total} ({by_status})")
    print(f"  boxes:                  {summary['boxes']}")
    mean = summary["latency_ms"]["mean"]  # type: ignore[index]
    print(
        f"  mean latency:           {mean if mean is None else round(mean, 1)} ms "
        f"(p50 {percentile(latencies, 50):.0f}, p99 {percentile(latencies, 99):.0f}; capture -> result)"
    )
    _print_tracks(board)
    _print_startup(startup)
    logs = ", ".join(f"{name}.log" for name in codes)
    print(f"  wrote:                  {out.resolve()}/summary.json, {logs}, cameras.yaml")
    if sheet is not None:
        print(f"  tracks drawn:           {sheet.resolve()}")
    for name, code in codes.items():
        if code not in (0, -15):  # -15: stopped by our SIGTERM
            log_tail = (out / f"{name}.log").read_text(errors="replace").splitlines()[-8:]
            print(
                f"  {name} exited with code {code}; last lines of its log:", *log_tail, sep="\n    "
            )


def _print_tracks(board: TracksBoard) -> None:
    lat = board.latencies_ms
    print(
        f"  tracks out:             {board.records} records, {len(board.confirmed)} tracks "
        f"confirmed (p50 {percentile(lat, 50):.0f} ms, p99 {percentile(lat, 99):.0f} ms; "
        "capture -> tracked)"
    )
    by_type = Counter(a.rule_type.value for a in board.alerts)
    print(
        f"  alerts:                 {', '.join(f'{k} {n}' for k, n in by_type.items()) or 'none'}"
    )
    counts = ", ".join(f"{k.replace(':', ' ')} {n}" for k, n in board.line_counts().items())
    print(f"  line crossings:         {counts or 'none'} (this run, all cameras)")
    dwells = [
        f"{a.camera_id} {short_track_label(a.track_id)} {_class_of(a)} {a.measure:.1f} s "
        f"(frame #{a.seq})"
        for a in board.dwells()
    ]
    print(f"  dwell alerts:           {'; '.join(dwells) or 'none'}")


def _print_startup(startup: dict[str, float | None]) -> None:
    def secs(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    ready, first = startup["inferencer_ready_s"], startup["first_frame_after_decoder_start_s"]
    print(
        f"  start-up (apart):       inferencer ready in {secs(ready)} (model, warm-up, "
        f"partitions), tracker in {secs(startup['tracker_ready_s'])}, alerts in "
        f"{secs(startup['alerts_ready_s'])}; first frame captured {secs(first)} after the decoder "
        "started (camera open, producer id)"
    )
