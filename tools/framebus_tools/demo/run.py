"""`run_demo`: start the broker and the services, watch their topics, then summarize the run.

After the summary the services keep running (the cameras loop) until Ctrl-C, unless
`exit_after_summary` is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from framebus.codec import AlertCodec, ClipCodec, DetectionsCodec, TracksCodec
from framebus.errors import FramebusError
from framebus.kafka.protocol import MessageProto
from framebus.messages import Detections
from framebus_tools.demo.board import Live, TracksBoard, alert_line, track_line
from framebus_tools.demo.cliptally import ClipTally
from framebus_tools.demo.inputs import (
    DemoInputs,
    DemoNames,
    DemoSettings,
    clips_process,
    demo_names,
    downstream,
    ensure_demo_topics,
    live_process,
    prepare_inputs,
)
from framebus_tools.demo.summary import Clips, startup_times, summarize
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

# How long the summary waits for the last alerts' clip records: a clip waits for its post-roll
# and then for its packets (the demo's clips settings, `clips_process`), plus a margin.
CLIPS_WAIT_S = 15.0


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
    """Run the demo; return 0 when every published frame got its detections and tracks records.

    The run counts the first `frames_per_camera` frames of each camera (seq below it): with
    `exit_after_summary` the decoder stops there; otherwise the cameras keep looping, and the
    services run on after the summary until Ctrl-C.
    """
    _ensure_kafka(settings)
    ensure_demo_topics(settings)
    names = demo_names(settings.topics)
    inputs = prepare_inputs(settings)
    out = settings.output_dir
    gate = {"motion": {"enabled": settings.motion_gate}}
    # `video: true`: the decoder also publishes the camera's packets, which clips are cut from.
    options = {**gate, "video": True}
    cameras = [
        CameraSpec(f"demo-cam-{i}", str(v), settings.target_fps, options)
        for i, v in enumerate(inputs.videos)
    ]
    cameras_file = write_cameras_file(out / "cameras.yaml", cameras)
    expected = settings.cameras * settings.frames_per_camera
    started_us = time.time_ns() // 1000
    read = [settings.topics.detections_topic, settings.topics.tracks_topic]
    if inputs.rules is not None:
        read += [settings.topics.alerts_topic, settings.topics.clips_topic]
    consumer = topics_reader(settings.kafka, read, started_us // 1000)
    stats, board, live, clips = RunStats(), TracksBoard(), Live(), ClipTally()
    seen_tracks: dict[tuple[str, int], int] = {}  # (topic, partition) -> last offset read
    on_message = _dispatcher(settings, started_us, stats, board, live, clips, seen_tracks)

    live_port = settings.live_port or free_port()
    keep_running = not settings.exit_after_summary
    processes = _processes(settings, names, inputs, cameras_file, live_port)
    deadline = time.monotonic() + settings.timeout_s
    alerts_caught_up = AlertsCaughtUp(settings.kafka, names.alerts_group, seen_tracks)
    clips_deadline: list[float] = []  # set once the frames are all answered

    def finished() -> bool:
        if time.monotonic() > deadline or {"inferencer", "tracker"} & processes.exited().keys():
            return True
        if stats.total < expected or board.records < expected:
            return False
        if inputs.rules is None:
            return True
        if "alerts" not in processes.exited() and not alerts_caught_up():
            return False
        # Every alert's clip record, within a bound: a clip waits for its post-roll.
        clips_deadline[:] = clips_deadline or [time.monotonic() + CLIPS_WAIT_S]
        return clips.pending() == 0 or time.monotonic() > clips_deadline[0]

    url = f"http://127.0.0.1:{live_port}/"
    try:
        with processes:
            # Kept above the tables: the URL once the page answers, else why there is none.
            live.banner = _live_line(processes, f"live page: {url}")
            print(live.banner, flush=True)
            scraper = DecoderScraper(processes.decoder_metrics_url)
            watch_messages(
                consumer,
                on_message,
                until=finished,
                tick=lambda: live.show(stats, scraper.scrape(), board),
            )
            drain(consumer, on_message)  # the alerts committed with the last tracks
            live.show(stats, scraper.views, board, final=True)
            consumer.close()
            codes = processes.exited() if keep_running else processes.stop()
            done = _summary(settings, names, stats, board, clips, processes, codes, cameras)
            if keep_running:
                codes = _run_until_interrupted(processes, url)
                done = done and all(code in (0, -15) for code in codes.values())
    finally:
        consumer.close()
    return 0 if done else 1


def _processes(
    settings: DemoSettings,
    names: DemoNames,
    inputs: DemoInputs,
    cameras_file: Path,
    live_port: int,
) -> PipelineProcesses:
    """The demo's services: the decoder, inferencer, tracker, alerts, clips and live."""
    width, height = model_input_size(inputs.model)
    keep_running = not settings.exit_after_summary
    decoder_env = {
        "FRAMEBUS_INPUT_WIDTH": str(width),
        "FRAMEBUS_INPUT_HEIGHT": str(height),
        "FRAMEBUS_CAMERAS_FILE": str(cameras_file),
        "FRAMEBUS_LOOP": "true",
        "FRAMEBUS_REALTIME": "true",  # files played as live cameras
    }
    if not keep_running:
        decoder_env["FRAMEBUS_MAX_FRAMES"] = str(settings.frames_per_camera)
    # Running on after the summary, a quiet stretch (no alert for a while) must not stop anyone.
    idle_s = "0" if keep_running else "30"
    clips_dir = settings.output_dir / "clips"
    services = downstream(names, inputs.rules, idle_s)
    if inputs.rules is not None:
        services.append(clips_process(names, clips_dir, idle_s))
    return PipelineProcesses(
        settings.kafka,
        settings.topics,
        settings.output_dir,
        decoder_env=decoder_env,
        inferencer_env={
            "FRAMEBUS_MODEL_PATH": str(inputs.model),
            "FRAMEBUS_STOP_AFTER_IDLE_S": idle_s,
        },
        downstream=[*services, live_process(live_port, clips_dir)],
    )


def _summary(
    settings: DemoSettings,
    names: DemoNames,
    stats: RunStats,
    board: TracksBoard,
    clips: ClipTally,
    processes: PipelineProcesses,
    codes: dict[str, int],
    cameras: list[CameraSpec],
) -> bool:
    """Print and write the summary; whether every frame was answered and no service failed."""
    expected = settings.cameras * settings.frames_per_camera
    sheet = _render_sheet(settings, names, cameras[0].id)
    startup = startup_times(processes, stats)
    clips_line = clips.line(settings.output_dir / "clips") if "clips" in processes.procs else None
    summarize(
        stats,
        board,
        expected,
        settings.output_dir,
        codes,
        sheet,
        startup,
        Clips(clips.by_status(), clips_line),
        list(processes.procs),
    )
    # A service that crashed (the alerts consumer, say) fails the demo even if the records came.
    return stats.total >= expected and board.records >= expected and not any(codes.values())


def _run_until_interrupted(processes: PipelineProcesses, url: str) -> dict[str, int]:
    """Keep the services running until Ctrl-C (or until one of them exits); their exit codes."""
    print(
        f"\nstill running: the cameras loop, {url} shows them with their alerts and clips; "
        "Ctrl-C stops everything",
        flush=True,
    )
    try:
        while not processes.exited():
            time.sleep(0.5)
        print(f"stopping: {', '.join(processes.exited())} exited", flush=True)
    except KeyboardInterrupt:
        print("\nstopping the services ...", flush=True)
    codes = processes.stop()
    print(f"stopped ({', '.join(f'{n} {c}' for n, c in codes.items())})", flush=True)
    return codes


def _live_line(processes: PipelineProcesses, banner: str) -> str:
    """The live page's URL once it answers, or why there is none (its log says more)."""
    if processes.ready_s.get("live") is not None:
        return banner
    return f"{banner} did not start: see {processes.log_dir / 'live.log'}"


def _dispatcher(
    settings: DemoSettings,
    started_us: int,
    stats: RunStats,
    board: TracksBoard,
    live: Live,
    clips: ClipTally,
    seen_tracks: dict[tuple[str, int], int],
) -> Callable[[MessageProto], None]:
    """Decode a message of any of the four topics and account for it.

    Records of a camera's first `frames_per_camera` frames count; later ones (the cameras loop
    on) and those of an earlier run (at-least-once redelivery, a group catching up) do not.
    """
    detections, tracks, alerts, clip_codec = (
        DetectionsCodec(),
        TracksCodec(),
        AlertCodec(),
        ClipCodec(),
    )
    topics, last_seq = settings.topics, settings.frames_per_camera

    def counted(seq: int, capture_ts_us: int) -> bool:
        return seq < last_seq and capture_ts_us >= started_us

    def on_message(msg: MessageProto) -> None:
        topic, value = msg.topic(), msg.value() or b""
        if topic == topics.detections_topic:
            det: Detections = detections.decode(value)
            if counted(det.seq, det.capture_ts_us):
                stats.add(det)
        elif topic == topics.tracks_topic:
            t = tracks.decode(value)
            if counted(t.seq, t.capture_ts_us):
                seen_tracks[(topic, msg.partition() or 0)] = msg.offset() or 0
                board.add_tracks(t)
                live.record(track_line(t))
        elif topic == topics.alerts_topic:
            alert = alerts.decode(value)
            if counted(alert.seq, alert.capture_ts_us):
                board.add_alert(alert)
                clips.add_alert(alert)
                live.alert(alert_line(alert))
        else:
            clip = clip_codec.decode(value)
            if counted(clip.seq, clip.capture_ts_us):
                clips.add_clip(clip)

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
