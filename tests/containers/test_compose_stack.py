"""compose.yaml run for real: every service in its container, the scene's camera over RTSP.

Judged from the topics, the clips volume and the page, through the host ports compose publishes:
every frame the decoder published has exactly one detections and one tracks record, every rule
of the scene fires on every camera, every alert has exactly one clip record and its MP4 decodes,
the page answers only after a login, every container is healthy and none restarted, and `down`
then `up` resumes with nothing lost or doubled. The tests run in order on one stack.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any, TypeVar

import av
import confluent_kafka
import pytest

from framebus.codec import AlertCodec, ClipCodec, DetectionsCodec, FrameCodec, TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, Clip, ClipStatus, CrossingDirection, Detections, Frame, Tracks
from framebus.topology import TopicSettings
from testkit.podman_compose import container_logs, container_state, health_status, podman
from tests.containers.conftest import CAMERAS, PASSWORD, RunningStack
from tests.reliability.harness import metric, scrape

pytestmark = [pytest.mark.containers, pytest.mark.slow]

KAFKA = KafkaSettings(bootstrap_servers="127.0.0.1:19092")
TOPICS = TopicSettings()
PAGE = "http://127.0.0.1:8090"
DECODER_PORT = 8081  # compose publishes the decoder's /metrics there
DECODER_FRAMES = "framebus_decoder_frames_total"
SERVICES = (
    "kafka",
    "rtsp-camera",
    "decoder",
    "inferencer-cpu",
    "tracker",
    "alerts",
    "clips",
    "live",
)
SCENE_RULES = {"person-crosses-line", "person-dwells-in-zone", "people-crowd-the-middle"}
FIRST_RUN_FRAMES = 150  # per camera: 30 s at 5 fps, more than one pass of the 24 s scene
SECOND_RUN_FRAMES = 60  # per camera, after `down` and `up`
FENCED_AT_START = "transactional producer fenced by newer producer instance"

T = TypeVar("T")


def read_all(topic: str, take: Callable[[Any], T], idle_s: float = 3.0) -> list[T]:
    """`take(message)` of every committed record of `topic`, read until none came for `idle_s`."""
    consumer = confluent_kafka.Consumer(
        {
            **KAFKA.client_config(),
            "group.id": f"test-reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    out: list[T] = []
    last = time.monotonic()
    deadline = last + 120
    try:
        while time.monotonic() - last < idle_s and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                out.append(take(msg))
                last = time.monotonic()
    finally:
        consumer.close()
    return out


def read_values(topic: str, decode: Callable[[bytes], T]) -> list[T]:
    """Every committed record of `topic`, decoded."""
    return read_all(topic, lambda msg: decode(msg.value()))


def read_alerts() -> list[tuple[int, int, Alert]]:
    """(partition, offset, alert) of every alert: a clip record names its alert so."""
    codec = AlertCodec()
    return read_all(
        TOPICS.alerts_topic, lambda msg: (msg.partition(), msg.offset(), codec.decode(msg.value()))
    )


@dataclass(frozen=True)
class Ledger:
    """What the stack published, read back from its topics."""

    frames: list[tuple[str, int, int]]  # frame_key of each record of the frames topic
    detections: list[Detections]
    tracks: list[Tracks]
    alerts: list[tuple[int, int, Alert]]
    clips: list[Clip]

    def unanswered(self) -> str:
        """What is still missing, or "" once every frame and alert has its records."""
        missing = []
        if len(self.detections) < len(self.frames):
            missing.append(f"{len(self.frames) - len(self.detections)} detections")
        if len(self.tracks) < len(self.detections):
            missing.append(f"{len(self.detections) - len(self.tracks)} tracks")
        if len(self.clips) < len(self.alerts):
            missing.append(f"{len(self.alerts) - len(self.clips)} clips")
        return ", ".join(missing)


def read_frame_keys() -> list[tuple[str, int, int]]:
    """(camera, seq, capture time) of every frame on the frames topic (pixels left unread)."""
    codec = FrameCodec()
    return read_values(TOPICS.frames_topic, lambda v: frame_key(codec.decode_view(v)))


def read_ledger(frames: list[tuple[str, int, int]]) -> Ledger:
    return Ledger(
        frames=frames,
        detections=read_values(TOPICS.detections_topic, DetectionsCodec().decode),
        tracks=read_values(TOPICS.tracks_topic, TracksCodec().decode),
        alerts=read_alerts(),
        clips=read_values(TOPICS.clips_topic, ClipCodec().decode),
    )


def wait_answered(timeout_s: float = 180.0) -> Ledger:
    """The ledger once every frame, detections record and alert is answered (or the timeout).

    The cameras have stopped: the frames topic is read once.
    """
    deadline = time.monotonic() + timeout_s
    frames = read_frame_keys()
    while True:
        ledger = read_ledger(frames)
        if not ledger.unanswered() or time.monotonic() > deadline:
            return ledger
        time.sleep(3.0)


def frame_key(record: Frame | Detections | Tracks) -> tuple[str, int, int]:
    """A frame's identity across decoder restarts (its seq starts again at 0)."""
    return (record.camera_id, record.seq, record.capture_ts_us)


def doubled(keys: Iterable[Any]) -> list[Any]:
    return [key for key, n in Counter(keys).items() if n > 1]


def check_exactly_once(ledger: Ledger) -> None:
    """Each frame one detections and one tracks record; each alert once, with one clip record."""
    assert not ledger.unanswered(), f"missing after the wait: {ledger.unanswered()}"
    frames = ledger.frames
    assert not doubled(frames), f"frames published twice: {doubled(frames)[:5]}"
    for name, records in (("detections", ledger.detections), ("tracks", ledger.tracks)):
        keys = [frame_key(r) for r in records]
        assert not doubled(keys), f"{name} doubled: {doubled(keys)[:5]}"
        assert set(keys) == set(frames), (
            f"{name}: {len(set(frames) - set(keys))} frames without a record, "
            f"{len(set(keys) - set(frames))} records of no frame"
        )
    # The frame's capture time too: a camera's seq starts again at 0 when the decoder restarts.
    alerts = [
        (a.rule, a.camera_id, a.seq, a.capture_ts_us, a.track_id, a.direction)
        for _, _, a in ledger.alerts
    ]
    assert not doubled(alerts), f"alerts fired twice: {doubled(alerts)[:5]}"
    clip_of = Counter((c.alert_partition, c.alert_offset) for c in ledger.clips)
    alert_at = {(p, o) for p, o, _ in ledger.alerts}
    assert set(clip_of) == alert_at, (
        f"alerts without a clip record: {sorted(alert_at - set(clip_of))[:5]}; "
        f"clip records of no alert: {sorted(set(clip_of) - alert_at)[:5]}"
    )
    assert max(clip_of.values()) == 1, f"alerts with two clip records: {doubled(clip_of)[:5]}"


def check_scene_alerts(alerts: list[Alert]) -> None:
    """Every rule of the scene fires on every camera; the crossings go both ways, by persons."""
    for camera in CAMERAS:
        mine = [a for a in alerts if a.camera_id == camera]
        assert {a.rule for a in mine} == SCENE_RULES, (camera, Counter(a.rule for a in mine))
        directions = {a.direction for a in mine if a.rule == "person-crosses-line"}
        assert directions == {CrossingDirection.IN, CrossingDirection.OUT}, (camera, directions)
        for alert in mine:
            assert {b.class_name for b in alert.boxes} <= {"person"}, alert


def check_clip_files(clips: list[Clip], clips_dir: Path) -> None:
    """Every clip WRITTEN, its MP4 in the clips volume, decoding to at least two seconds."""
    for clip in clips:
        assert clip.status is ClipStatus.WRITTEN, clip
        assert clip.uri is not None and clip.uri.startswith("file:///var/lib/framebus/clips/")
        path = clips_dir / clip.uri.removeprefix("file:///var/lib/framebus/clips/")
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            times = [float(f.time) for f in container.decode(stream) if f.time is not None]
        assert times and max(times) - min(times) >= 2.0, (path.name, len(times))


def wait_healthy(stack: RunningStack, services: Iterable[str], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        stack.ticker.tick()
        states = {s: health_status(stack.stack.container(s)) for s in services}
        if set(states.values()) == {"healthy"}:
            return
        time.sleep(2.0)
    pytest.fail(f"not every container turned healthy: {states}")


def check_containers(stack: RunningStack, running: Iterable[str]) -> None:
    """The topics step exited 0; every other service runs, healthy, never restarted."""
    topics = container_state(stack.stack.container("topics"))
    assert (topics.get("Status"), topics.get("ExitCode")) == ("exited", 0), topics
    wait_healthy(stack, running, timeout_s=60)
    for service in running:
        name = stack.stack.container(service)
        restarts = podman("inspect", "--format", "{{.RestartCount}}", name).strip()
        if restarts == "0":
            continue
        # Known, not yet fixed: on a broker just created, a stateful service's first transaction
        # is sometimes fenced and the service exits; compose restarts it and nothing is lost
        # (the exactly-once checks hold). One such restart passes; anything else fails.
        logs = container_logs(name)
        assert restarts == "1" and FENCED_AT_START in logs, (
            f"{service} restarted {restarts} times:\n{logs[-3000:]}"
        )


def delivered_frames() -> dict[str, float]:
    """Frames the running decoder delivered per camera (its /metrics); {} when it has none."""
    try:
        text = scrape(DECODER_PORT)
    except OSError:
        return {}
    return {c: metric(text, DECODER_FRAMES, camera=c, outcome="delivered") for c in CAMERAS}


def play_until(per_camera: int, timeout_s: float = 240.0) -> None:
    """Let the cameras play until the decoder delivered `per_camera` frames of each."""
    deadline = time.monotonic() + timeout_s
    counts: dict[str, float] = {}
    while time.monotonic() < deadline:
        counts = delivered_frames()
        if counts and min(counts.values()) >= per_camera:
            return
        time.sleep(2.0)
    pytest.fail(f"the cameras did not play {per_camera} frames each: {counts}")


def stop_decoder(stack: RunningStack) -> None:
    """`podman stop` (SIGTERM): the cameras stop; the decoder flushes and exits 0."""
    name = stack.stack.container("decoder")
    podman("stop", "-t", "60", name, timeout_s=90)
    state = container_state(name)
    assert state.get("ExitCode") == 0, podman("logs", "--tail", "30", name, check=False)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def http(opener: urllib.request.OpenerDirector, path: str, data: bytes | None = None) -> int:
    try:
        with opener.open(PAGE + path, data=data, timeout=10) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


@dataclass
class FirstRun:
    ledger: Ledger | None = None


FIRST = FirstRun()


def test_compose_stack_when_the_scene_plays_then_every_frame_and_alert_answered_once(
    running_stack: RunningStack,
) -> None:
    wait_healthy(running_stack, SERVICES)
    play_until(FIRST_RUN_FRAMES)
    stop_decoder(running_stack)
    ledger = wait_answered()
    check_exactly_once(ledger)
    check_scene_alerts([a for _, _, a in ledger.alerts])
    check_clip_files(ledger.clips, running_stack.volume_dir("clips"))
    check_containers(running_stack, [s for s in SERVICES if s != "decoder"])
    FIRST.ledger = ledger


def test_compose_page_when_asked_then_it_answers_only_after_the_login(
    running_stack: RunningStack,
) -> None:
    stranger = urllib.request.build_opener(NoRedirect())
    assert http(stranger, "/") in (302, 303, 307)  # to the login form
    assert http(stranger, "/ws") == 401
    assert FIRST.ledger is not None and FIRST.ledger.clips, "the first test made no clip"
    uri = FIRST.ledger.clips[0].uri or ""
    clip_path = "/clips/" + uri.removeprefix("file:///var/lib/framebus/clips/")
    assert http(stranger, clip_path) == 401
    wrong = urllib.parse.urlencode({"password": PASSWORD + "x"}).encode()
    assert http(stranger, "/login", wrong) == 401

    member = urllib.request.build_opener(
        NoRedirect(), urllib.request.HTTPCookieProcessor(CookieJar())
    )
    right = urllib.parse.urlencode({"password": PASSWORD}).encode()
    assert http(member, "/login", right) == 303
    assert http(member, "/") == 200
    assert http(member, clip_path) == 200


def test_compose_stack_when_down_then_up_then_it_resumes_with_nothing_lost_or_doubled(
    running_stack: RunningStack,
) -> None:
    assert FIRST.ledger is not None, "the first test did not finish"
    before = FIRST.ledger
    running_stack.stack.down()
    running_stack.stack.up(running_stack.ticker)
    wait_healthy(running_stack, SERVICES)
    play_until(SECOND_RUN_FRAMES)  # the decoder's counters start again at 0
    stop_decoder(running_stack)
    after = wait_answered()
    assert set(before.frames) < set(after.frames)
    check_exactly_once(after)
    check_clip_files(after.clips, running_stack.volume_dir("clips"))
    check_containers(running_stack, [s for s in SERVICES if s != "decoder"])
