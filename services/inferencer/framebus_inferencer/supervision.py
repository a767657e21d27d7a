"""The decisions of `--workers N`: when each worker starts, what its exit means, readiness, limits.

Pure: no processes, sockets or clocks of its own (times are passed in), so unit tests drive it
with a fake clock; `workers.py` starts, probes and signals the processes and asks this module.
One `Pool` owns the workers' state; the supervisor loop writes it, the HTTP threads read it
(`/readyz`, `/metrics`) through its methods, under its lock.
"""

from __future__ import annotations

import enum
import signal
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from framebus.entrypoint import EXIT_ERROR
from framebus.kafka.settings import instance_transactional_id
from framebus.settings import flag_name
from framebus.telemetry.watchdog import EXIT_STALLED
from framebus_inferencer.settings import InferencerSettings


@dataclass(frozen=True)
class RestartPolicy:
    """Delay before a worker that exited is started again: doubling, reset by a long enough run.

    A worker that ran `healthy_after_s` or longer failed for a new reason: it is restarted after
    `initial_s` again, not after the delay its last crash loop had reached.
    """

    initial_s: float = 1.0
    max_s: float = 30.0
    healthy_after_s: float = 60.0

    def delay_s(self, failures_in_a_row: int) -> float:
        """The delay after the `failures_in_a_row`-th quick failure (0 for the first)."""
        return min(self.max_s, self.initial_s * 2.0 ** min(failures_in_a_row, 30))


class Phase(enum.Enum):
    """Where one worker is."""

    WAITING = "waiting"  # not started: the worker before it is still warming its engine
    RUNNING = "running"
    DOWN = "down"  # exited; started again at `restart_at`
    DONE = "done"  # exited on purpose (stop_after_idle_s, a drain): not started again


class Outcome(enum.Enum):
    """What the supervisor does about a worker's exit."""

    RESTART = "restart"  # after the policy's delay
    DONE = "done"  # it stopped on purpose; the supervisor ends once every worker has
    FATAL = "fatal"  # a start-up error (bad setting, model): stop the others and exit with it


@dataclass(frozen=True)
class Exit:
    """A worker's exit as the supervisor sees it."""

    outcome: Outcome
    reason: str  # exit_reason(code)
    delay_s: float = 0.0  # RESTART: seconds until it starts again


def exit_reason(code: int) -> str:
    """A metric label and log word for an exit code: `stalled` (the watchdog), `SIGKILL`, ..."""
    if code == EXIT_STALLED:
        return "stalled"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal_{-code}"
    return f"exit_{code}"


@dataclass
class Slot:
    """One worker's state (the Pool's, under its lock)."""

    index: int
    phase: Phase = Phase.WAITING
    port: int = 0
    pid: int = 0
    started_at: float = 0.0
    restart_at: float = 0.0
    quick_failures: int = 0  # exits in a row, each after less than healthy_after_s
    warm: bool = False  # its engine is warm (its /readyz says warmed_up)
    ready: bool = False
    ever_ready: bool = False
    reason: str = "not started"  # why it is not ready
    restarts: Counter[str] = field(default_factory=Counter)  # by exit reason


class Pool:
    """The workers' state and every decision about them."""

    def __init__(self, workers: int, policy: RestartPolicy | None = None) -> None:
        self.policy = policy or RestartPolicy()
        self._slots = [Slot(i) for i in range(workers)]
        self._stopping = False
        self._lock = threading.Lock()

    def due(self, now: float) -> list[int]:
        """Workers to start now.

        Staggered: a worker starts once the one before it has a warm engine (or is not running),
        so a TensorRT engine is built once, by worker 0, and the others load it from the cache;
        and a worker that exited starts again once its delay has passed.
        """
        with self._lock:
            if self._stopping:
                return []
            return [
                s.index
                for s in self._slots
                if _due(s, self._slots[s.index - 1] if s.index else None, now)
            ]

    def started(self, index: int, now: float, port: int, pid: int = 0) -> None:
        """Worker `index` was started as process `pid`, serving its probes on `port`."""
        with self._lock:
            slot = self._slots[index]
            slot.phase, slot.started_at, slot.port, slot.pid = Phase.RUNNING, now, port, pid
            slot.warm = slot.ready = False
            slot.reason = "starting"

    def observed(self, index: int, warm: bool, ready: bool, reason: str | None) -> None:
        """What worker `index`'s /readyz said (`reason`: why not ready)."""
        with self._lock:
            slot = self._slots[index]
            if slot.phase is not Phase.RUNNING:
                return  # an answer that raced with its exit
            slot.warm = slot.warm or warm
            slot.ready = ready
            slot.ever_ready = slot.ever_ready or ready
            slot.reason = "" if ready else (reason or "not ready")

    def exited(self, index: int, code: int, now: float) -> Exit:
        """Worker `index` exited with `code`: whether it is restarted, and when."""
        with self._lock:
            slot = self._slots[index]
            reason = exit_reason(code)
            slot.ready = slot.warm = False
            if self._stopping or code == 0:
                slot.phase, slot.reason = Phase.DONE, "stopped"
                return Exit(Outcome.DONE, reason)
            if code == EXIT_ERROR and not slot.ever_ready:
                slot.phase, slot.reason = Phase.DONE, "failed to start (exit 2)"
                return Exit(Outcome.FATAL, reason)
            if now - slot.started_at >= self.policy.healthy_after_s:
                slot.quick_failures = 0
            delay = self.policy.delay_s(slot.quick_failures)
            slot.quick_failures += 1
            slot.restarts[reason] += 1
            slot.phase, slot.restart_at = Phase.DOWN, now + delay
            slot.reason = f"exited ({reason}), restarting"
            return Exit(Outcome.RESTART, reason, delay)

    def stop(self) -> None:
        """From now on nothing starts and every exit is on purpose (the supervisor drains)."""
        with self._lock:
            self._stopping = True
            for slot in self._slots:
                if slot.phase is not Phase.RUNNING:
                    slot.phase, slot.reason = Phase.DONE, "stopped"

    def running(self) -> list[int]:
        """Workers whose process runs."""
        with self._lock:
            return [s.index for s in self._slots if s.phase is Phase.RUNNING]

    def port(self, index: int) -> int:
        """The port of worker `index`'s probes and metrics."""
        with self._lock:
            return self._slots[index].port

    def finished(self) -> bool:
        """True once every worker stopped on purpose."""
        with self._lock:
            return all(s.phase is Phase.DONE for s in self._slots)

    def not_ready(self) -> str | None:
        """A readiness check: None while every worker is ready, else who is not and why."""
        with self._lock:
            waiting = [f"worker {s.index}: {s.reason}" for s in self._slots if not s.ready]
        return "; ".join(waiting) or None

    def describe(self) -> list[dict[str, Any]]:
        """Each worker's phase, readiness, port, process id and restarts (a /readyz detail)."""
        with self._lock:
            return [
                {
                    "worker": s.index,
                    "phase": s.phase.value,
                    "ready": s.ready,
                    "port": s.port,
                    "pid": s.pid,
                    "restarts": sum(s.restarts.values()),
                }
                for s in self._slots
            ]

    def readiness_by_worker(self) -> dict[str, float]:
        """1 for each ready worker, 0 for the others (a metric)."""
        with self._lock:
            return {str(s.index): float(s.ready) for s in self._slots}

    def restarts(self) -> dict[tuple[str, str], float]:
        """Restarts by (worker, exit reason) (a metric)."""
        with self._lock:
            return {
                (str(s.index), reason): float(n)
                for s in self._slots
                for reason, n in s.restarts.items()
            }


def _due(slot: Slot, before: Slot | None, now: float) -> bool:
    """Whether `slot` starts now: its restart delay is over, or the one before it is warm."""
    if slot.phase is Phase.DOWN:
        return now >= slot.restart_at
    if slot.phase is not Phase.WAITING:
        return False
    return (
        before is None
        or before.phase in (Phase.DOWN, Phase.DONE)
        or (before.phase is Phase.RUNNING and before.warm)
    )


def split_limit(total_bytes: int, workers: int) -> int:
    """Each worker's share of a memory limit the pod has as a whole (0, no limit, stays 0)."""
    return 0 if total_bytes == 0 else max(1, total_bytes // workers)


def worker_transactional_id(settings: InferencerSettings, index: int) -> str:
    """Worker `index`'s transactional id: the instance's id and the index.

    The same across the worker's restarts, so a restarted worker fences its dead predecessor
    and aborts its open transaction; distinct per worker, so workers never fence each other.
    """
    base = instance_transactional_id(settings.transactional_id, settings.consumer_group)
    return f"{base}-w{index}"


def worker_args(settings: InferencerSettings, index: int, http_port: int) -> list[str]:
    """Flags appended to the supervisor's own arguments for worker `index` (the last flag wins)."""
    values = {
        "workers": 1,
        "worker_index": index,
        "http_port": http_port,
        "transactional_id": worker_transactional_id(settings, index),
        # librdkafka's own log lines and the brokers' logs name the client, not the worker.
        "client_id": f"{settings.kafka.client_id}-w{index}",
        "gpu_mem_limit_bytes": split_limit(settings.gpu_mem_limit_bytes, settings.workers),
        "cpu_arena_limit_bytes": split_limit(settings.cpu_arena_limit_bytes, settings.workers),
    }
    return [arg for name, value in values.items() for arg in (flag_name(name), str(value))]
