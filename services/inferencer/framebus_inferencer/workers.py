"""`--workers N`: N inferencer processes sharing one GPU, started and watched by this process.

One inferencer process's own CPU path (receive, decode, batch, postprocess, publish) bounds how
many frames it can hand a GPU; a GPU faster than that idles. Several processes in the same
consumer group each take a share of the partitions and overlap their host work with the others'
device work (Triton's `instance_group { count: N }` for the same reason).

The supervisor (this process, with `workers` > 1) touches neither Kafka nor the model. It

- starts worker i as `python -m framebus_inferencer <its own arguments> --workers 1
  --worker-index i ...` (`supervision.worker_args`: its transactional id, client id, memory
  share and a loopback port for its probes), each once the one before it has a warm engine;
- serves the pod's `/healthz` (its own loop), `/readyz` (ready while every worker is) and
  `/metrics` (every worker's metrics with a `worker` label, and its own) on `http_port`;
- starts a worker that exited (the watchdog's exit 70, a crash, a SIGKILL) again after the
  restart policy's delay, logged and counted (`framebus_inferencer_worker_restarts_total`);
  what the dead worker had not committed is read again by the new one (`exactly_once`: its
  `init_transactions` with the same transactional id aborts the dead one's transaction);
- forwards SIGTERM to every worker and waits (at most `stage_timeout_s`) for each to drain.

A worker whose supervisor is gone (SIGKILLed outside a container) stops on its own, draining.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from framebus.telemetry.health import Health
from framebus_inferencer.settings import InferencerSettings
from framebus_inferencer.supervision import Outcome, Pool, worker_args
from framebus_inferencer.telemetry import supervisor_telemetry

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often exits are looked for
PROBE_EVERY_S = 0.5  # how often each worker's /readyz is read while one is not ready
# Once every worker is ready: the kubelet reads the pod's /readyz every 5 s (values.yaml), and
# each probe costs the worker an HTTP request and, every 3 s, a question to the brokers.
PROBE_READY_EVERY_S = 2.0
# A worker's /readyz asks the brokers (at most every 3 s, for up to 2 s when they do not answer).
PROBE_TIMEOUT_S = 3.0
SCRAPE_TIMEOUT_S = 3.0
LOOP_ALLOWANCE_S = 30.0  # the supervisor's own loop; it beats before each probe too
ORPHAN_CHECK_S = 1.0
KILL_WAIT_S = 10.0
EXIT_KILLED = 1  # what the supervisor returns for a worker ended by a signal


def loopback_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1 (for a worker's probes and metrics)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str, timeout_s: float) -> tuple[int, bytes] | None:
    """(status, body) of a GET to a worker; None when it does not answer."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - our child
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:  # 503: answered, not ready
        return int(exc.code), bytes(exc.read())
    except (OSError, ValueError):
        return None


def probe(port: int) -> tuple[bool, bool, str | None] | None:
    """(engine warm, ready, why not) from a worker's /readyz; None when it does not answer."""
    answer = _get(port, "/readyz", PROBE_TIMEOUT_S)
    if answer is None:
        return None
    status, body = answer
    try:
        doc = json.loads(body)
    except ValueError:
        return False, False, "/readyz answered no JSON"
    reasons = doc.get("reasons") or {}
    why = "; ".join(f"{k}: {v}" for k, v in reasons.items()) or None
    return bool(doc.get("warmed_up")), status == 200, why


def scrape(port: int) -> str | None:
    """A worker's /metrics text; None when it does not answer."""
    answer = _get(port, "/metrics", SCRAPE_TIMEOUT_S)
    if answer is None or answer[0] != 200:
        return None
    return answer[1].decode()


class WorkerProcesses:
    """The worker processes: start, look for exits, signal."""

    def __init__(self, settings: InferencerSettings, argv: Sequence[str]) -> None:
        """`argv`: the supervisor's own arguments, which every worker gets first."""
        self.settings, self.argv = settings, list(argv)
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, index: int) -> tuple[int, int]:
        """Start worker `index`; (its pid, its probes' port)."""
        port = loopback_port()
        command = [
            sys.executable,
            "-m",
            "framebus_inferencer",
            *self.argv,
            *worker_args(self.settings, index, port),
        ]
        # Its output goes where the supervisor's goes (the pod's log); each JSON line says
        # which worker wrote it.
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL)  # noqa: S603 - our own module
        self._procs[index] = proc
        return proc.pid, port

    def exit_code(self, index: int) -> int | None:
        """Worker `index`'s exit code once it has ended (reaping it)."""
        proc = self._procs.get(index)
        return None if proc is None else proc.poll()

    def signal_all(self, sig: signal.Signals) -> None:
        """Send `sig` to every worker still running."""
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.send_signal(sig)

    def kill(self, index: int) -> int:
        """SIGKILL worker `index`; its exit code."""
        proc = self._procs[index]
        proc.kill()
        return proc.wait(KILL_WAIT_S)


class Supervisor:
    """The loop: start what is due, notice exits, read readiness; drain on stop."""

    def __init__(
        self,
        pool: Pool,
        processes: WorkerProcesses,
        health: Health,
        drain_timeout_s: float,
        probe: Callable[[int], tuple[bool, bool, str | None] | None] = probe,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`probe(port)`: (engine warm, ready, why not) of a worker, None when it does not answer."""
        self.pool, self.processes, self.health = pool, processes, health
        self.drain_timeout_s, self.probe, self.clock = drain_timeout_s, probe, clock

    def run(self, stop: threading.Event) -> int:
        """Supervise until `stop` (then drain) or until every worker stopped on purpose."""
        next_probe = 0.0
        while not stop.is_set():
            self.health.heartbeat("supervise", LOOP_ALLOWANCE_S)
            self._start_due()
            fatal = self._reap()
            if fatal is not None:
                index, code = fatal
                log.error(
                    "worker %d failed at start-up (exit %d): stopping the others",
                    index,
                    code,
                    extra={"worker": index, "exit_code": code},
                )
                self._drain()
                return code
            if self.pool.finished():
                log.info("every worker stopped")
                return 0
            if self.clock() >= next_probe:
                self._probe(stop)
                every = PROBE_EVERY_S if self.pool.not_ready() else PROBE_READY_EVERY_S
                next_probe = self.clock() + every
            stop.wait(POLL_S)
        return self._drain()

    def _start_due(self) -> None:
        for index in self.pool.due(self.clock()):
            pid, port = self.processes.start(index)
            self.pool.started(index, self.clock(), port, pid)
            log.info("worker %d started", index, extra={"worker": index, "pid": pid, "port": port})

    def _reap(self) -> tuple[int, int] | None:
        """Handle the exits since the last look; (worker, exit code) of a start-up failure."""
        for index in self.pool.running():
            code = self.processes.exit_code(index)
            if code is None:
                continue
            exit_ = self.pool.exited(index, code, self.clock())
            extra = {"worker": index, "exit_code": code, "exit_reason": exit_.reason}
            if exit_.outcome is Outcome.RESTART:
                log.warning(
                    "worker %d exited (%s): starting it again in %.1f s",
                    index,
                    exit_.reason,
                    exit_.delay_s,
                    extra={**extra, "restart_in_s": exit_.delay_s},
                )
            elif exit_.outcome is Outcome.FATAL:
                return index, code
            else:
                log.info("worker %d stopped (%s)", index, exit_.reason, extra=extra)
        return None

    def _probe(self, stop: threading.Event) -> None:
        for index in self.pool.running():
            if stop.is_set():
                return  # drain first
            self.health.heartbeat("supervise", LOOP_ALLOWANCE_S)
            answer = self.probe(self.pool.port(index))
            if answer is None:
                self.pool.observed(index, False, False, "not answering /readyz yet")
            else:
                self.pool.observed(index, *answer)

    def _drain(self) -> int:
        """SIGTERM every worker, wait for each to finish its batches and commit; worst exit."""
        self.pool.stop()
        self.processes.signal_all(signal.SIGTERM)
        deadline = self.clock() + self.drain_timeout_s
        codes: dict[int, int] = {}
        while (running := [i for i in self.pool.running() if i not in codes]) and (
            self.clock() < deadline
        ):
            self.health.heartbeat("supervise", LOOP_ALLOWANCE_S)
            for index in running:
                code = self.processes.exit_code(index)
                if code is not None:
                    codes[index] = code
                    self.pool.exited(index, code, self.clock())
            time.sleep(POLL_S)
        for index in [i for i in self.pool.running() if i not in codes]:
            log.error(
                "worker %d did not drain within %.0f s: killing it",
                index,
                self.drain_timeout_s,
                extra={"worker": index},
            )
            codes[index] = self.processes.kill(index)
            self.pool.exited(index, codes[index], self.clock())
        worst = [c for c in codes.values() if c != 0]
        return 0 if not worst else (worst[0] if worst[0] > 0 else EXIT_KILLED)


def supervise(settings: InferencerSettings, stop: threading.Event, argv: Sequence[str]) -> int:
    """Run `settings.workers` inferencer workers until `stop`; return the exit code."""
    pool = Pool(settings.workers)
    processes = WorkerProcesses(settings, argv)
    telemetry = supervisor_telemetry(settings.http_port or None, pool, scrape)
    log.info("supervising %d inferencer workers", settings.workers)
    with telemetry.running():
        return Supervisor(pool, processes, telemetry.health, settings.stage_timeout_s).run(stop)


class _WorkerTag(logging.Filter):
    """Adds `worker` to every log record of this process."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.index
        return True


def become_worker(index: int, stop: threading.Event) -> None:
    """Make this process worker `index`: its log lines say so; it stops with its supervisor."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(_WorkerTag(index))
    supervisor = os.getppid()

    def watch() -> None:
        while not stop.wait(ORPHAN_CHECK_S):
            if os.getppid() != supervisor:
                log.warning("the supervisor (pid %d) is gone: stopping", supervisor)
                stop.set()

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()
