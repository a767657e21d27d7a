"""Run the decoder, the inferencer (and the tracker, alerts, ...) as processes; watch their topics.

Shared by `framebus demo` and `framebus loadtest`: both start the real services on the real
broker, exactly as an operator would, and read what comes out.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from framebus.codec import DetectionsCodec
from framebus.errors import KafkaError
from framebus.kafka.protocol import MessageProto
from framebus.kafka.reader import Reader
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Detections
from framebus.topology import TopicSettings
from framebus_tools.process import ServiceProcess, free_port
from framebus_tools.runstats import DecoderView


@dataclass(frozen=True)
class CameraSpec:
    """One simulated camera for a pipeline run."""

    id: str
    url: str
    target_fps: float
    options: Mapping[str, Any] = field(default_factory=dict)


def model_input_size(model_path: Path) -> tuple[int, int]:
    """(width, height) of an ONNX detector's image input (NCHW or NHWC), for the decoder."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    if len(dims) != 4:
        raise ValueError(f"{model_path}: image input has {len(dims)} dimensions, expected 4")
    h, w = (dims[2], dims[3]) if dims[1] in (1, 3) else (dims[1], dims[2])
    if not h or not w:
        raise ValueError(f"{model_path}: image input size is not fixed ({dims})")
    return w, h


def write_cameras_file(path: Path, cameras: list[CameraSpec]) -> Path:
    """The decoder's cameras file for these cameras."""
    doc = {
        "cameras": [
            {"id": c.id, "url": c.url, "target_fps": c.target_fps, **c.options} for c in cameras
        ]
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def topics_reader(kafka: KafkaSettings, topics: Sequence[str], start_ms: int) -> Reader:
    """A reader of every partition of `topics`, each at its first record from `start_ms` on.

    It reads committed records only: the tracker's and the alerts' outputs are transactional.
    """
    reader = Reader(kafka)
    reader.start(topics, start_ms)
    return reader


def group_caught_up(kafka: KafkaSettings, group: str, seen: Mapping[tuple[str, int], int]) -> bool:
    """Whether `group` has committed past each (topic, partition)'s offset in `seen`.

    The demo asks this of the alerts consumer: once it has committed the last tracks record the
    demo saw, every alert of those records is on the alerts topic (same transaction).
    """
    if not seen:
        return True
    try:
        with Reader(kafka) as reader:
            committed = reader.committed(group, list(seen))
    except KafkaError:
        return False  # asked again at the next tick
    return all(committed.get(key, -1) > offset for key, offset in seen.items())


class AlertsCaughtUp:
    """Whether the alerts consumer committed every tracks record read so far (asked 2x a second).

    `seen` is the caller's live map of the last offset read per (topic, partition).
    """

    def __init__(self, kafka: KafkaSettings, group: str, seen: dict[tuple[str, int], int]) -> None:
        self._kafka, self._group, self._seen = kafka, group, seen
        self._next = 0.0

    def __call__(self) -> bool:
        """`group_caught_up` on a copy of `seen`; False without asking within 0.5 s of the last ask."""
        if time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + 0.5
        return group_caught_up(self._kafka, self._group, dict(self._seen))


@dataclass(frozen=True)
class ServiceSpec:
    """A further `framebus <command>` child (e.g. `track`, `alerts`) downstream of the inferencer."""

    name: str  # its log is <name>.log; its exit code is reported under this name
    command: str  # the `framebus` subcommand
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the Kafka and topic settings


class PipelineProcesses:
    """`framebus decoder`, `framebus inferencer` and any `downstream` ones as child processes.

    Logs go to files in `log_dir`.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topics: TopicSettings,
        log_dir: Path,
        decoder_env: Mapping[str, str],
        inferencer_env: Mapping[str, str],
        downstream: Sequence[ServiceSpec] = (),
    ) -> None:
        base = {"FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, **topics.env()}
        self.log_dir = log_dir
        self._commands = {"inferencer": "inferencer", "decoder": "decoder"}
        self._envs = {"inferencer": {**base, **inferencer_env}, "decoder": {**base, **decoder_env}}
        for service in downstream:
            self._commands[service.name] = service.command
            self._envs[service.name] = {**base, **service.env}
        self._consumers = ["inferencer", *(s.name for s in downstream)]
        self.procs: dict[str, ServiceProcess] = {}
        self.decoder_metrics_url = ""
        self.ready_s: dict[str, float | None] = {}  # spawn -> /readyz 200 (None: never)
        self.decoder_started_us = 0  # wall clock when the decoder was spawned

    @property
    def inferencer_ready_s(self) -> float | None:
        """Seconds from spawning the inferencer to its /readyz answering 200 (None: never)."""
        return self.ready_s.get("inferencer")

    def start(self, ready_timeout_s: float = 90.0) -> PipelineProcesses:
        """Start the inferencer and the downstream services, wait until ready, start the decoder.

        Ready means warmed up and partitions assigned, so no frame waits for a cold service.
        """
        for name in [*self._consumers, "decoder"]:
            self._envs[name].setdefault("FRAMEBUS_HTTP_PORT", str(free_port()))
        self.decoder_metrics_url = (
            f"http://127.0.0.1:{self._envs['decoder']['FRAMEBUS_HTTP_PORT']}/metrics"
        )
        spawned = time.monotonic()
        for name in self._consumers:
            self._spawn(name)
        deadline = spawned + ready_timeout_s
        waiting = list(self._consumers)
        while waiting and time.monotonic() <= deadline:
            for name in list(waiting):
                if self.procs[name].ready():
                    self.ready_s[name] = time.monotonic() - spawned
                    waiting.remove(name)
                elif not self.procs[name].alive():
                    waiting.remove(name)  # the caller sees the exit code and the missing records
            time.sleep(0.05)
        self.decoder_started_us = time.time_ns() // 1000
        self._spawn("decoder")
        return self

    def _spawn(self, name: str) -> None:
        log = self.log_dir / f"{name}.log"
        log.unlink(missing_ok=True)
        self.procs[name] = ServiceProcess(self._commands[name], self._envs[name], log)

    def exited(self) -> dict[str, int]:
        """Exit codes of the processes that have ended."""
        return {n: code for n, p in self.procs.items() if (code := p.exit_code()) is not None}

    def stop(self, timeout_s: float = 30.0) -> dict[str, int]:
        """SIGTERM each (upstream first), wait, SIGKILL stragglers; return exit codes."""
        return {
            name: self.procs[name].stop(timeout_s)
            for name in ("decoder", *self._consumers)
            if name in self.procs
        }

    def __enter__(self) -> PipelineProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class DecoderScraper:
    """Reads the decoder's /metrics: frames published per second and drops, per camera."""

    def __init__(self, url: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self._clock = clock
        self._last: tuple[float, dict[str, int]] | None = None
        self.views: dict[str, DecoderView] = {}

    def scrape(self) -> dict[str, DecoderView]:
        """Update and return the per-camera views (unchanged when the decoder does not answer)."""
        try:
            with urllib.request.urlopen(self.url, timeout=2) as resp:  # noqa: S310 - loopback child
                text = resp.read().decode()
        except (OSError, urllib.error.URLError):
            return self.views
        published, dropped = parse_decoder_metrics(text)
        now = self._clock()
        if self._last is not None:
            then, before = self._last
            dt = max(now - then, 1e-6)
            self.views = {
                cid: DecoderView((n - before.get(cid, 0)) / dt, n, dropped.get(cid, {}))
                for cid, n in published.items()
            }
        self._last = (now, published)
        return self.views


def parse_decoder_metrics(text: str) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """(published per camera, dropped per camera and reason) from the decoder's metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    published: dict[str, int] = {}
    dropped: dict[str, dict[str, int]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            cam = sample.labels.get("camera", "")
            if (
                sample.name == "framebus_decoder_frames_total"
                and sample.labels.get("outcome") == "published"
            ):
                published[cam] = int(sample.value)
            elif sample.name == "framebus_decoder_frames_dropped_total":
                dropped.setdefault(cam, {})[sample.labels.get("reason", "?")] = int(sample.value)
    return published, dropped


def watch_detections(
    consumer: Reader,
    on_record: Callable[[Detections], None],
    until: Callable[[], bool],
    tick: Callable[[], None] = lambda: None,
    tick_every_s: float = 1.0,
) -> None:
    """Feed every detections record to `on_record` until `until()` is true; `tick` once a second."""
    codec = DetectionsCodec()
    watch_messages(
        consumer, lambda msg: on_record(codec.decode(msg.value() or b"")), until, tick, tick_every_s
    )


def watch_messages(
    consumer: Reader,
    on_message: Callable[[MessageProto], None],
    until: Callable[[], bool],
    tick: Callable[[], None] = lambda: None,
    tick_every_s: float = 1.0,
) -> None:
    """Feed every message to `on_message` until `until()` is true; `tick` once a second."""
    next_tick = time.monotonic() + tick_every_s
    while not until():
        for msg in consumer.poll(256, 0.2):
            on_message(msg)
        if time.monotonic() >= next_tick:
            tick()
            next_tick = time.monotonic() + tick_every_s


def drain(
    consumer: Reader,
    on_message: Callable[[MessageProto], None],
    quiet_s: float = 0.5,
    max_s: float = 3.0,
) -> None:
    """Read what is left until nothing arrives for `quiet_s`, for at most `max_s`.

    The bound matters after a timeout, when the decoder may still be publishing.
    """
    end = time.monotonic() + max_s
    while time.monotonic() < end and (messages := consumer.poll(256, quiet_s)):
        for msg in messages:
            on_message(msg)
