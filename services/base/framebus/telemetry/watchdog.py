"""The watchdog: a service whose stage stopped making progress says where, and exits.

A thread stuck inside a library call cannot be interrupted from Python (librdkafka's transactional
calls have been seen to block past their own timeout when the coordinator broker vanishes), so
the only way out is a new process. The watchdog looks at the service's `Health` every second;
when a loop has not beaten within its allowance or a watched call has run past its budget, it

1. marks the service stalled, so `/livez` and `/readyz` answer 503 with the reason,
2. logs the reason and writes every thread's Python stack to stderr (faulthandler),
3. exits the process with `EXIT_STALLED` after a short grace, so the orchestrator restarts it.

State that must survive is already in Kafka: the restarted instance's `init_transactions` fences
the stuck instance's transactional id and aborts its open transaction.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from framebus.telemetry.health import Health, Stall

log = logging.getLogger(__name__)

EXIT_STALLED = 70  # BSD's EX_SOFTWARE: the process gave up on itself; restart it
CHECK_EVERY_S = 1.0
EXIT_GRACE_S = 2.0  # between the report and the exit: probes see the reason, logs are written


def dump_stacks(out: TextIO) -> None:
    """Every thread's Python stack, innermost call last, as faulthandler writes it."""
    out.flush()
    faulthandler.dump_traceback(file=out, all_threads=True)
    out.flush()


class Watchdog:
    """Watches a `Health` on a daemon thread and ends the process on the first stall."""

    def __init__(
        self,
        health: Health,
        check_every_s: float = CHECK_EVERY_S,
        grace_s: float = EXIT_GRACE_S,
        exit_process: Callable[[int], None] = os._exit,
        stack_out: TextIO | None = None,
    ) -> None:
        self.health, self.check_every_s, self.grace_s = health, check_every_s, grace_s
        self._exit, self._out = exit_process, stack_out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

    def start(self) -> Watchdog:
        """Start watching; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the service is shutting down on purpose)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.check_every_s + 1.0)

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check(self) -> bool:
        """One look: on a stall, report it and exit; True when a stall was found."""
        stalls = self.health.stalls()
        if not stalls:
            return False
        try:
            self._report(stalls)
        finally:  # nothing in the report (a closed log stream, say) may keep the process alive
            time.sleep(self.grace_s)
            self._exit(EXIT_STALLED)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.check_every_s):
            if self.check():
                return

    def _report(self, stalls: list[Stall]) -> None:
        reason = "; ".join(s.describe() for s in stalls)
        self.health.fail(reason)
        log.error(
            "stalled: %s; every thread's stack follows; exiting with %d so that the service is "
            "restarted",
            reason,
            EXIT_STALLED,
            extra={"stalled": reason, "exit_code": EXIT_STALLED},
        )
        for handler in logging.getLogger().handlers:
            try:
                handler.flush()
            except (OSError, ValueError) as exc:  # its stream is gone: the stacks go on below
                print(f"watchdog: cannot flush log handler {handler}: {exc}", file=sys.stderr)
        dump_stacks(self._out or sys.stderr)
