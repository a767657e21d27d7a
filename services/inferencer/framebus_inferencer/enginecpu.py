"""CPU time spent inside the engine's run calls: the calling thread's and ONNX Runtime's own.

`framebus inferencer`'s own cost is its process's CPU less this (docs/benchmarks.md, marginal
method): on a GPU a run's CPU is the device's work (launches, waits), on the CPU provider the
model itself. The calling thread's share is `time.thread_time()` around each run. ONNX Runtime's
intra-op threads are made with the session (the threads that appear while it is created) and
work only inside runs (spinning, they keep a core a moment after each: the engine's CPU too), so
all their CPU counts; it is read from /proc (Linux; elsewhere only the calling thread counts).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

TASKS = Path("/proc/self/task")
TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def thread_ids() -> set[int]:
    """The kernel ids of this process's threads; empty where /proc is not there."""
    try:
        return {int(name) for name in os.listdir(TASKS)}
    except OSError:
        return set()


def thread_cpu_s(tid: int) -> float | None:
    """User + system CPU seconds of one of this process's threads; None once it is gone."""
    try:
        stat = (TASKS / str(tid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) * TICK_S


class EngineCpu:
    """Accumulates the engine's CPU seconds; safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls_s = 0.0  # calling threads, inside run calls
        self._pool: dict[int, float] = {}  # ONNX Runtime's threads: last CPU seconds read

    @contextlib.contextmanager
    def session_threads(self) -> Iterator[None]:
        """Around the session's creation: the threads it makes are the engine's."""
        before = thread_ids()
        yield
        made = thread_ids() - before
        with self._lock:
            self._pool = dict.fromkeys(made, 0.0)

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """Around one run call, on the thread that makes it."""
        started = time.thread_time()
        try:
            yield
        finally:
            spent = time.thread_time() - started
            with self._lock:
                self._calls_s += spent

    @property
    def pool_threads(self) -> int:
        """How many threads the session made."""
        with self._lock:
            return len(self._pool)

    def seconds(self) -> float:
        """CPU seconds so far (a counter: a pool thread that ended keeps what it had)."""
        with self._lock:
            for tid in self._pool:
                now = thread_cpu_s(tid)
                if now is not None:
                    self._pool[tid] = now
            return self._calls_s + sum(self._pool.values())
