"""The supervisor of `--workers N`: its loop over stub processes, /metrics merging, a real start."""

from __future__ import annotations

import io
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from framebus.logs import JsonFormatter
from framebus.telemetry.health import Health
from framebus_inferencer import workers
from framebus_inferencer.state import RunState
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.supervision import Pool, RestartPolicy
from framebus_inferencer.telemetry import SupervisorCollector, inferencer_telemetry
from framebus_inferencer.workers import EXIT_KILLED, Supervisor, become_worker

REPO = Path(__file__).resolve().parents[3]


class StubProcesses:
    """Worker processes that run until told how they end; SIGTERM ends them with 0 unless stubborn."""

    def __init__(self, stubborn: bool = False) -> None:
        self.stubborn = stubborn
        self.codes: dict[int, int | None] = {}
        self.starts: list[int] = []
        self.signals: list[signal.Signals] = []
        self.killed: list[int] = []

    def start(self, index: int) -> tuple[int, int]:
        self.starts.append(index)
        self.codes[index] = None
        return 1000 + index, 9000 + index

    def exit_code(self, index: int) -> int | None:
        return self.codes.get(index)

    def signal_all(self, sig: signal.Signals) -> None:
        self.signals.append(sig)
        if not self.stubborn:
            for i, code in self.codes.items():
                if code is None:
                    self.codes[i] = 0

    def kill(self, index: int) -> int:
        self.killed.append(index)
        self.codes[index] = -signal.SIGKILL
        return -signal.SIGKILL


def ready_probe(_port: int) -> tuple[bool, bool, str | None]:
    return True, True, None


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


class Running:
    """A Supervisor on a thread, with its exit code once it returns."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.stop = threading.Event()
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, args=(supervisor,), daemon=True)
        self.thread.start()

    def _run(self, supervisor: Supervisor) -> None:
        self.code = supervisor.run(self.stop)

    def finish(self, timeout_s: float = 10.0) -> int | None:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive()
        return self.code


def test_supervisor_when_a_worker_dies_then_unready_until_restarted_and_sigterm_drains_all() -> (
    None
):
    pool = Pool(2, RestartPolicy(initial_s=0.3))
    procs = StubProcesses()
    running = Running(Supervisor(pool, procs, Health(), 5.0, ready_probe))  # type: ignore[arg-type]
    wait_until(lambda: pool.not_ready() is None)
    assert procs.starts == [0, 1]
    procs.codes[1] = -signal.SIGKILL
    wait_until(lambda: pool.not_ready() is not None)
    assert pool.not_ready() == "worker 1: exited (SIGKILL), restarting"
    wait_until(lambda: pool.not_ready() is None)
    assert procs.starts == [0, 1, 1]
    assert pool.restarts() == {("1", "SIGKILL"): 1.0}
    running.stop.set()
    assert running.finish() == 0
    assert procs.signals == [signal.SIGTERM]
    assert procs.killed == []


def test_supervisor_when_a_worker_fails_at_start_up_then_stops_the_others_and_exits_with_2() -> (
    None
):
    pool = Pool(2)
    procs = StubProcesses()
    running = Running(Supervisor(pool, procs, Health(), 5.0, ready_probe))  # type: ignore[arg-type]
    wait_until(lambda: procs.starts == [0, 1])
    procs.codes[1] = 2  # e.g. its model cannot be loaded
    assert running.finish() == 2
    assert procs.signals == [signal.SIGTERM]


def test_supervisor_when_a_worker_does_not_drain_in_time_then_killed_and_exit_code_says_so() -> (
    None
):
    pool = Pool(1)
    procs = StubProcesses(stubborn=True)
    running = Running(Supervisor(pool, procs, Health(), 0.5, ready_probe))  # type: ignore[arg-type]
    wait_until(lambda: pool.not_ready() is None)
    running.stop.set()
    assert running.finish() == EXIT_KILLED
    assert procs.killed == [0]


def test_supervisor_when_every_worker_stops_on_its_own_then_it_ends_with_0() -> None:
    pool = Pool(2)
    procs = StubProcesses()
    running = Running(Supervisor(pool, procs, Health(), 5.0, ready_probe))  # type: ignore[arg-type]
    wait_until(lambda: pool.not_ready() is None)
    procs.codes.update({0: 0, 1: 0})  # stop_after_idle_s
    assert running.finish() == 0
    assert procs.signals == []


def test_supervisor_probes_when_every_worker_is_ready_then_less_often() -> None:
    times: list[float] = []
    ready = threading.Event()

    def probe(_port: int) -> tuple[bool, bool, str | None]:
        times.append(time.monotonic())
        return True, ready.is_set(), None if ready.is_set() else "warming up"

    pool = Pool(1)
    running = Running(Supervisor(pool, StubProcesses(), Health(), 5.0, probe))  # type: ignore[arg-type]
    wait_until(lambda: len(times) >= 3)
    starting = [b - a for a, b in zip(times, times[1:], strict=False)]
    ready.set()
    wait_until(lambda: pool.not_ready() is None)
    seen = len(times)
    wait_until(lambda: len(times) >= seen + 2, timeout_s=3 * workers.PROBE_READY_EVERY_S)
    steady = times[-1] - times[-2]
    running.stop.set()
    running.finish()
    assert max(starting) < workers.PROBE_READY_EVERY_S / 2
    assert steady >= workers.PROBE_READY_EVERY_S * 0.9


def test_supervisor_metrics_when_two_workers_serve_then_one_family_each_with_worker_label() -> None:
    servers = []
    for i in range(2):
        stats = InferencerStats()
        stats.frames_received = 10 * (i + 1)
        stats.batch_size.observe(4)
        servers.append(inferencer_telemetry(0, stats, RunState(), worker=True))
    pool = Pool(2)
    registry = CollectorRegistry()
    registry.register(SupervisorCollector(pool, workers.scrape))  # type: ignore[arg-type]
    with servers[0].running(watchdog=False), servers[1].running(watchdog=False):
        for i, server in enumerate(servers):
            pool.started(i, 0.0, server.port or 0)
            pool.observed(i, True, i == 0, None)
        text = generate_latest(registry).decode()
    type_lines = [line for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(type_lines) == len(set(type_lines))  # every family once
    families = {f.name: f for f in text_string_to_metric_families(text)}
    received = families["framebus_inferencer_frames_received"].samples
    assert {(s.labels["worker"], s.value) for s in received} == {("0", 10.0), ("1", 20.0)}
    buckets = [s for s in families["framebus_inferencer_batch_size"].samples if "le" in s.labels]
    assert {s.labels["worker"] for s in buckets} == {"0", "1"}
    ready = families["framebus_inferencer_worker_ready"].samples
    assert {(s.labels["worker"], s.value) for s in ready} == {("0", 1.0), ("1", 0.0)}


def test_worker_probe_when_worker_warm_but_unassigned_then_warm_not_ready_with_reason() -> None:
    state = RunState()
    state.warmed_up.set()
    telemetry = inferencer_telemetry(0, InferencerStats(), state, worker=True)
    with telemetry.running(watchdog=False):
        answer = workers.probe(telemetry.port or 0)
    assert answer == (True, False, "inferencer: no Kafka partitions assigned yet")
    assert workers.probe(workers.loopback_port()) is None  # nothing listens


def test_become_worker_when_logging_then_lines_carry_worker_and_stops_when_orphaned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [handler])
    monkeypatch.setattr(workers, "ORPHAN_CHECK_S", 0.05)
    parent = [4242]
    monkeypatch.setattr(workers.os, "getppid", lambda: parent[0])
    stop = threading.Event()
    become_worker(3, stop)
    logging.getLogger("framebus_inferencer.test").warning("hello")
    assert '"worker": 3' in out.getvalue()
    assert not stop.wait(0.2)
    parent[0] = 1  # the supervisor died: the worker was re-parented
    assert stop.wait(5)


def test_inferencer_process_when_workers_and_no_model_then_exit_2_with_the_workers_error() -> None:
    env = {"PATH": "/usr/bin:/bin", "FRAMEBUS_LOG_LEVEL": "warning"}
    proc = subprocess.run(  # noqa: S603 - our own module
        [sys.executable, "-m", "framebus_inferencer", "--workers", "2"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "no model: set FRAMEBUS_MODEL_PATH" in proc.stderr
    assert "failed at start-up (exit 2): stopping the others" in proc.stderr
