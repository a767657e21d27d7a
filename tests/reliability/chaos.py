"""The chaos soak's moving parts: a seeded fault schedule, supervised services, the injector.

Every service runs as its own process under a `Supervisor` that, like Kubernetes, starts again
whatever exits (after a deliberate fault, once the fault's hold is over). Faults are drawn once,
from a seed, before the run (`make_schedule`), so a failing run can be replayed exactly. What the
run left in Kafka is judged by `tests.reliability.chaos_checks`.
"""

from __future__ import annotations

import enum
import json
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framebus.kafka.settings import KafkaSettings
from framebus_tools.localcluster import LocalCluster
from tests.integration.rtsp import RtspCamera
from tests.reliability.harness import Service, cluster_metadata, metric, rss_kb, scrape


class FaultKind(enum.Enum):
    """What a fault does."""

    SIGKILL = "sigkill"  # a service killed, started again after RESTART_DELAY_S
    SIGTERM = "sigterm"  # a service stopped cleanly, started again after RESTART_DELAY_S
    STALL = "stall"  # SIGSTOP for STALL_S (past the 10 s session timeouts), then SIGCONT
    BROKER = "broker"  # SIGKILL of the broker leading most partitions, relaunched after BROKER_S
    CAMERA_CUT = "camera-cut"  # an RTSP camera's server killed, started again after CUT_S
    COORDINATOR = "coordinator"  # the inferencer's group + transaction coordinator: not restarted


RESTART_DELAY_S = 3.0
STALL_S = 15.0
BROKER_S = 15.0
CUT_S = 10.0
# A /readyz answers within this (its Kafka check waits up to 2 s for a broker); a stopped
# process does not answer at all, and counts as unready.
PROBE_TIMEOUT_S = 4.0
# A producer's queue fills while brokers are away or slow (up to its queue.buffering.max.kbytes)
# and empties when they catch up: RSS sampled over this many queued records is not judged.
BACKLOG_RECORDS = 15
HOLD_S = {
    FaultKind.SIGKILL: RESTART_DELAY_S,
    FaultKind.SIGTERM: RESTART_DELAY_S,
    FaultKind.STALL: STALL_S,
    FaultKind.BROKER: BROKER_S,
    FaultKind.CAMERA_CUT: CUT_S,
    FaultKind.COORDINATOR: 0.0,
}
# Faults that can stop frames from being captured or published (the decoder's, a camera's, a
# broker's): only inside their windows may a camera's frames have a gap.
SERVICE_FAULTS = (FaultKind.SIGKILL, FaultKind.SIGTERM, FaultKind.STALL)


@dataclass(frozen=True)
class Fault:
    """One fault: when (seconds into the run), what, and on what (service, camera or broker)."""

    at_s: float
    kind: FaultKind
    target: str

    @property
    def hold_s(self) -> float:
        """How long the fault lasts before it is undone (0: until the end, or at once)."""
        return HOLD_S[self.kind]

    def stops_frames_of(self, camera: str) -> bool:
        """True when this fault may leave a gap in `camera`'s frames."""
        if self.kind in SERVICE_FAULTS:
            return self.target == "decoder"
        if self.kind is FaultKind.CAMERA_CUT:
            return self.target == camera
        return True  # a broker's death stalls the decoder's producer: the camera runs on

    def line(self) -> str:
        """`  75.0 s  sigkill     tracker`."""
        return f"{self.at_s:7.1f} s  {self.kind.value:<11} {self.target}"


def make_schedule(
    seed: int,
    duration_s: float,
    services: Sequence[str],
    rtsp_cameras: Sequence[str],
    every_s: float = 45.0,
    first_s: float = 30.0,
) -> list[Fault]:
    """One fault every `every_s` from `first_s` on, drawn from `seed`; one slot is the coordinator's.

    The coordinator's broker stays down to the end, so no broker fault is drawn after it (a second
    broker down would leave the three-node quorum, and every min.insync.replicas=2 write, stuck).
    The last fault comes at least `every_s` before the end, so that the run sees it recover.
    """
    if duration_s < first_s + every_s:
        raise ValueError(
            f"FRAMEBUS_CHAOS_S={duration_s:g} leaves no room for a fault: give it at least "
            f"{first_s + every_s:g} s"
        )
    if not services:
        raise ValueError("a chaos schedule needs at least one service to fault")
    rng = random.Random(seed)  # noqa: S311 - a replayable draw, not a secret
    slots = int((duration_s - first_s) // every_s)
    coordinator_slot = rng.randrange(slots) if slots > 1 else 0
    kinds = [FaultKind.SIGKILL, FaultKind.SIGTERM, FaultKind.STALL, FaultKind.BROKER]
    if rtsp_cameras:
        kinds.append(FaultKind.CAMERA_CUT)
    out = []
    for slot in range(slots):
        at = first_s + slot * every_s
        if slot == coordinator_slot:
            out.append(Fault(at, FaultKind.COORDINATOR, "inferencer's coordinator"))
            continue
        allowed = [k for k in kinds if k is not FaultKind.BROKER or slot < coordinator_slot]
        kind = rng.choice(allowed)
        if kind in SERVICE_FAULTS:
            target = rng.choice(list(services))
        elif kind is FaultKind.CAMERA_CUT:
            target = rng.choice(list(rtsp_cameras))
        else:
            target = "busiest leader"
        out.append(Fault(at, kind, target))
    return out


# --- Services under a supervisor -----------------------------------------------------------------


@dataclass
class Incarnation:
    """One process of a service: its pid, when it started, its RSS samples, how it ended."""

    pid: int
    started: float
    rss: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, KiB)
    exit_code: int | None = None
    backlogged: list[float] = field(default_factory=list)  # RSS sample times with a backlog


@dataclass
class Supervised:
    """A service the supervisor keeps running: how to start it and every process it had."""

    name: str
    command: str
    env: Mapping[str, str]
    log: Path
    service: Service | None = None
    held_until: float = 0.0  # not started again before this (monotonic)
    incarnations: list[Incarnation] = field(default_factory=list)
    # Records it holds for a broker (None: unknown, it did not answer); None: not asked.
    backlog: Callable[[Supervised], int | None] | None = None

    def start(self) -> None:
        """Start a new process (its output appended to the same log)."""
        self.service = Service(self.command, self.env, self.log)
        self.incarnations.append(Incarnation(self.service.pid, time.monotonic()))

    @property
    def proc(self) -> Service:
        """The current process (started)."""
        if self.service is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.service

    @property
    def url(self) -> str:
        """Base URL of its /readyz and /metrics."""
        return f"http://127.0.0.1:{self.env['FRAMEBUS_HTTP_PORT']}"


def decoder_backlog(s: Supervised) -> int | None:
    """Frames the decoder handed to its producer and the broker has not acknowledged yet."""
    try:
        text = scrape(int(s.env["FRAMEBUS_HTTP_PORT"]), timeout_s=PROBE_TIMEOUT_S / 2)
    except OSError:
        return None

    def frames(outcome: str) -> float:
        return metric(text, "framebus_decoder_frames_total", outcome=outcome)

    return int(frames("published") - frames("delivered") - frames("delivery_failed"))


class Supervisor:
    """Restarts what exits, like Kubernetes; samples every process's RSS; probes /readyz."""

    def __init__(self, services: Sequence[Supervised], rss_every_s: float = 10.0) -> None:
        self.services = {s.name: s for s in services}
        self.rss_every_s = rss_every_s
        self.restarts: list[tuple[float, str, int]] = []  # (when, service, exit code seen)
        self._next_rss = 0.0
        self.readiness = ReadinessLog(self.services)

    def start_all(self) -> None:
        """Start every service and the readiness probe."""
        for s in self.services.values():
            s.start()
        self.readiness.start()

    def tick(self, now: float) -> None:
        """Start again each service that exited and is not held down; sample RSS when due."""
        for s in self.services.values():
            code = s.proc.exit_code()
            if code is None:
                continue
            if s.incarnations[-1].exit_code is None:
                s.incarnations[-1].exit_code = code
                self.restarts.append((now, s.name, code))
            if now >= s.held_until:
                s.start()
        if now >= self._next_rss:
            self._next_rss = now + self.rss_every_s
            for s in self.services.values():
                if s.proc.alive():
                    self._sample_rss(s, now)

    def _sample_rss(self, s: Supervised, now: float) -> None:
        try:
            s.incarnations[-1].rss.append((now, rss_kb(s.proc.pid)))
        except FileNotFoundError:
            return  # exited between the check and the read: next tick restarts it
        held = None if s.backlog is None else s.backlog(s)
        if s.backlog is not None and (held is None or held > BACKLOG_RECORDS):
            s.incarnations[-1].backlogged.append(now)

    def stop_all(self, timeout_s: float = 60.0) -> dict[str, int]:
        """SIGTERM to every service at once; each one's exit code (SIGKILL past `timeout_s`)."""
        self.readiness.stop()
        for s in self.services.values():
            if s.proc.alive():
                s.proc.signal(signal.SIGCONT)
                s.proc.signal(signal.SIGTERM)
        codes = {}
        for name, s in self.services.items():
            try:
                codes[name] = s.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                codes[name] = s.proc.kill()
            s.incarnations[-1].exit_code = codes[name]
        return codes


class ReadinessLog:
    """A thread that probes each service's /readyz every `every_s`; records each change."""

    def __init__(self, services: Mapping[str, Supervised], every_s: float = 0.5) -> None:
        self.services = services
        self.every_s = every_s
        self.changes: list[tuple[float, str, bool]] = []  # (monotonic, service, ready now)
        self.state: dict[str, bool] = {}
        self.reasons: list[tuple[str, str]] = []  # (service, why) at each turn to unready
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="readiness", daemon=True)

    def start(self) -> None:
        """Begin probing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop probing (at most one round later)."""
        self._stop.set()
        self._thread.join(30)

    def all_ready(self) -> bool:
        """True when the last probe of every service answered 200."""
        return len(self.state) == len(self.services) and all(self.state.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, s in self.services.items():
                status, body = get_json(f"{s.url}/readyz", PROBE_TIMEOUT_S)
                ok = status == 200
                if self.state.get(name) != ok:
                    self.state[name] = ok
                    self.changes.append((time.monotonic(), name, ok))
                    if not ok:
                        self.reasons.append((name, str(body.get("reasons", body))[:200]))
            self._stop.wait(self.every_s)


# --- The injector ---------------------------------------------------------------------------------


@dataclass
class Injected:
    """A fault as it happened: when (monotonic and wall clock) and on what exactly."""

    fault: Fault
    at: float
    wall_s: float
    detail: str


class Injector:
    """Applies faults to the supervised services, the cluster and the RTSP cameras; undoes them."""

    def __init__(
        self,
        supervisor: Supervisor,
        cluster: LocalCluster,
        kafka: KafkaSettings,
        cameras: Mapping[str, RtspCamera],
        coordinator_broker: int,
    ) -> None:
        self.supervisor = supervisor
        self.cluster = cluster
        self.kafka = kafka
        self.cameras = cameras
        self.coordinator_broker = coordinator_broker
        self.done: list[Injected] = []
        self._undo: list[tuple[float, Callable[[], None]]] = []
        self._relaunched: list[subprocess.Popen[bytes]] = []

    def inject(self, fault: Fault, now: float) -> None:
        """Apply `fault` now and schedule its undoing."""
        kind = fault.kind
        if kind in SERVICE_FAULTS:
            detail = self._service_fault(fault, now)
        elif kind is FaultKind.CAMERA_CUT:
            cam = self.cameras[fault.target]
            cam.kill()
            self._later(now + fault.hold_s, cam.start)
            detail = f"{cam.url} down"
        elif kind is FaultKind.BROKER:
            gone = any(d.fault.kind is FaultKind.COORDINATOR for d in self.done)
            broker = busiest_leader(self.kafka, exclude=self.coordinator_broker if gone else -1)
            self.cluster.node(broker).kill()
            self._later(now + fault.hold_s, lambda: self._relaunch(broker))
            detail = f"broker {broker} killed"
        else:
            self.cluster.node(self.coordinator_broker).kill()
            detail = f"broker {self.coordinator_broker} killed, not restarted until the end"
        self.done.append(Injected(fault, now, time.time(), detail))

    def _service_fault(self, fault: Fault, now: float) -> str:
        s = self.supervisor.services[fault.target]
        proc = s.proc
        if fault.kind is FaultKind.STALL:
            proc.signal(signal.SIGSTOP)
            self._later(now + fault.hold_s, lambda: _cont(proc))
            return f"pid {proc.pid} stopped"
        s.held_until = now + fault.hold_s
        if fault.kind is FaultKind.SIGKILL:
            proc.kill()
        else:
            proc.signal(signal.SIGTERM)
        return f"pid {proc.pid}"

    def _relaunch(self, broker: int) -> None:
        self._relaunched.append(self.cluster.node(broker).launch())

    def _later(self, when: float, action: Callable[[], None]) -> None:
        self._undo.append((when, action))

    def tick(self, now: float) -> None:
        """Undo each fault whose hold is over."""
        due = [a for when, a in self._undo if when <= now]
        self._undo = [(when, a) for when, a in self._undo if when > now]
        for action in due:
            action()

    def undo_all(self) -> None:
        """Undo what is still in force (the coordinator's broker included), for the drain."""
        for _, action in self._undo:
            action()
        self._undo = []
        self.cluster.start()


def get_json(url: str, timeout_s: float) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of a probe; (0, {"error": ...}) when nothing answers in time."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return int(err.code), json.loads(err.read())
    except (OSError, ValueError) as exc:  # refused, timed out, or a half-written answer
        return 0, {"error": f"{type(exc).__name__}: {exc}"}


def _cont(proc: Service) -> None:
    if proc.alive():
        proc.signal(signal.SIGCONT)


def busiest_leader(kafka: KafkaSettings, exclude: int) -> int:
    """The broker that leads the most partitions (not `exclude`, one already down)."""
    leaders: dict[int, int] = {}
    for topic in cluster_metadata(kafka).topics.values():
        for p in topic.partitions.values():
            if p.leader >= 0 and p.leader != exclude:
                leaders[p.leader] = leaders.get(p.leader, 0) + 1
    if not leaders:
        raise AssertionError("no partition has a live leader: the cluster is down")
    return max(sorted(leaders), key=lambda b: leaders[b])


# --- The run ----------------------------------------------------------------------------------------


def drive(
    supervisor: Supervisor, injector: Injector, schedule: Sequence[Fault], duration_s: float
) -> float:
    """Run for `duration_s`, injecting `schedule` on time and supervising; the start (monotonic)."""
    start = time.monotonic()
    pending = list(schedule)
    while (now := time.monotonic()) - start < duration_s:
        while pending and now - start >= pending[0].at_s:
            fault = pending.pop(0)
            injector.inject(fault, now)
            print(f"chaos: {now - start:7.1f} s  {fault.kind.value} {injector.done[-1].detail}")
        injector.tick(now)
        supervisor.tick(now)
        time.sleep(0.5)
    return start


def supervise_until(
    supervisor: Supervisor, predicate: Callable[[], bool], timeout_s: float, what: str
) -> bool:
    """Supervise until `predicate()` holds (True) or `timeout_s` passes (False, and says so)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        supervisor.tick(time.monotonic())
        if predicate():
            return True
        time.sleep(1.0)
    print(f"chaos: {what}: not within {timeout_s:g} s")
    return False
