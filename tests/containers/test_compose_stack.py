"""compose.yaml run for real: every service in its container, the scene's camera over RTSP.

Judged from the topics, the clips volume and the page, through the host ports compose publishes:
every frame the decoder published has exactly one detections and one tracks record, every rule
of the scene fires on every camera, every alert has exactly one clip record and its MP4 decodes,
the page answers only after a login, every container is healthy and none restarted, and `down`
then `up` resumes with nothing lost or doubled. The tests run in order on one stack.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import pytest

from framebus.kafka.settings import KafkaSettings
from testkit.podman_compose import container_logs, container_state, health_status, podman
from tests.containers.conftest import CAMERAS, PASSWORD, RunningStack
from tests.ledger import (
    FENCED_AT_START,
    Ledger,
    TopicReader,
    check_clip_files,
    check_exactly_once,
    check_scene_alerts,
    clip_path,
)
from tests.page import login_form, member, status, stranger
from tests.reliability.harness import metric, scrape

pytestmark = [pytest.mark.containers, pytest.mark.slow]

READER = TopicReader(KafkaSettings(bootstrap_servers="127.0.0.1:19092"))
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
FIRST_RUN_FRAMES = 150  # per camera: 30 s at 5 fps, more than one pass of the 24 s scene
SECOND_RUN_FRAMES = 60  # per camera, after `down` and `up`


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
    ledger = READER.wait_answered()
    check_exactly_once(ledger)
    check_scene_alerts([a for _, _, a in ledger.alerts], CAMERAS)
    check_clip_files(ledger.clips, running_stack.volume_dir("clips"))
    check_containers(running_stack, [s for s in SERVICES if s != "decoder"])
    FIRST.ledger = ledger


def test_compose_page_when_asked_then_it_answers_only_after_the_login(
    running_stack: RunningStack,
) -> None:
    outsider = stranger()
    assert status(outsider, PAGE + "/") in (302, 303, 307)  # to the login form
    assert status(outsider, PAGE + "/ws") == 401
    assert FIRST.ledger is not None and FIRST.ledger.clips, "the first test made no clip"
    clip_url = PAGE + "/clips/" + clip_path(FIRST.ledger.clips[0])
    assert status(outsider, clip_url) == 401
    assert status(outsider, PAGE + "/login", login_form(PASSWORD + "x")) == 401

    user = member()
    assert status(user, PAGE + "/login", login_form(PASSWORD)) == 303
    assert status(user, PAGE + "/") == 200
    assert status(user, clip_url) == 200


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
    after = READER.wait_answered()
    assert set(before.frames) < set(after.frames)
    check_exactly_once(after)
    check_clip_files(after.clips, running_stack.volume_dir("clips"))
    check_containers(running_stack, [s for s in SERVICES if s != "decoder"])
