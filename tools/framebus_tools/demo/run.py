"""`run_demo`: start the broker and the services, watch their topics, then summarize the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from framebus.codec import AlertCodec, DetectionsCodec, TracksCodec
from framebus.errors import FramebusError
from framebus.kafka.protocol import MessageProto
from framebus.messages import Detections
from framebus_tools.demo.board import Live, TracksBoard, alert_line, track_line
from framebus_tools.demo.inputs import (
    DemoNames,
    DemoSettings,
    demo_names,
    downstream,
    ensure_demo_topics,
    live_process,
    prepare_inputs,
)
from framebus_tools.demo.summary import startup_times, summarize
from framebus_tools.localkafka import LocalKafka
from framebus_tools.pipeline import (
    AlertsCaughtUp,
    CameraSpec,
    DecoderScraper,
    PipelineProcesses,
    drain,
    model_input_size,
    topics_reader,
    watch_messages,
    write_cameras_file,
)
from framebus_tools.process import free_port
from framebus_tools.runstats import RunStats


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


def run_demo(settings: DemoSettings) -> int:
    """Run the demo; return 0 when every published frame got its detections and tracks records."""
    _ensure_kafka(settings)
    ensure_demo_topics(settings)
    names = demo_names(settings.topics)
    inputs = prepare_inputs(settings)
    out = settings.output_dir
    gate = {"motion": {"enabled": settings.motion_gate}}
    cameras = [
        CameraSpec(f"demo-cam-{i}", str(v), settings.target_fps, gate)
        for i, v in enumerate(inputs.videos)
    ]
    cameras_file = write_cameras_file(out / "cameras.yaml", cameras)
    expected = settings.cameras * settings.frames_per_camera
    started_us = time.time_ns() // 1000
    read = [settings.topics.detections_topic, settings.topics.tracks_topic]
    if inputs.rules is not None:
        read.append(settings.topics.alerts_topic)
    consumer = topics_reader(settings.kafka, read, started_us // 1000)
    stats, board, live = RunStats(), TracksBoard(), Live()
    seen_tracks: dict[tuple[str, int], int] = {}  # (topic, partition) -> last offset read
    on_message = _dispatcher(settings, names, started_us, stats, board, live, seen_tracks)

    width, height = model_input_size(inputs.model)
    live_port = settings.live_port or free_port()
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
        downstream=[*downstream(names, inputs.rules), live_process(live_port)],
    )
    deadline = time.monotonic() + settings.timeout_s
    alerts_caught_up = AlertsCaughtUp(settings.kafka, names.alerts_group, seen_tracks)

    def finished() -> bool:
        if time.monotonic() > deadline or {"inferencer", "tracker"} & processes.exited().keys():
            return True
        if stats.total < expected or board.records < expected:
            return False
        return inputs.rules is None or "alerts" in processes.exited() or alerts_caught_up()

    try:
        with processes:
            # Kept above the tables: the URL once the page answers, else why there is none.
            live.banner = _live_line(processes, f"live page: http://127.0.0.1:{live_port}/")
            print(live.banner, flush=True)
            scraper = DecoderScraper(processes.decoder_metrics_url)
            watch_messages(
                consumer,
                on_message,
                until=finished,
                tick=lambda: live.show(stats, scraper.scrape(), board),
            )
            drain(consumer, on_message)  # the alerts committed with the last tracks
            codes = processes.stop()
    finally:
        consumer.close()
    live.show(stats, scraper.views, board, final=True)
    sheet = _render_sheet(settings, names, cameras[0].id)
    startup = startup_times(processes, stats)
    # A service that crashed (the alerts consumer, say) fails the demo even if the records came.
    done = stats.total >= expected and board.records >= expected and not any(codes.values())
    summarize(stats, board, expected, out, codes, sheet, startup)
    return 0 if done else 1


def _live_line(processes: PipelineProcesses, banner: str) -> str:
    """The live page's URL once it answers, or why there is none (its log says more)."""
    if processes.ready_s.get("live") is not None:
        return banner
    return f"{banner} did not start: see {processes.log_dir / 'live.log'}"


def _dispatcher(
    settings: DemoSettings,
    names: DemoNames,
    started_us: int,
    stats: RunStats,
    board: TracksBoard,
    live: Live,
    seen_tracks: dict[tuple[str, int], int],
) -> Callable[[MessageProto], None]:
    """Decode a message of any of the three topics and account for it."""
    detections, tracks, alerts = DetectionsCodec(), TracksCodec(), AlertCodec()

    def on_message(msg: MessageProto) -> None:
        topic, value = msg.topic(), msg.value() or b""
        # A record of an earlier run (at-least-once redelivery, or a group catching up) is skipped.
        if topic == settings.topics.detections_topic:
            det: Detections = detections.decode(value)
            if det.capture_ts_us >= started_us:
                stats.add(det)
        elif topic == settings.topics.tracks_topic:
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


def _render_sheet(settings: DemoSettings, names: DemoNames, camera: str) -> Path | None:
    """A contact sheet of the first camera's last frames, boxes drawn with their track ids."""
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
