"""One way to run a framebus service as a child process: the demo, the benchmarks and the tests.

`ServiceProcess` starts `python -m framebus_tools.cli <command>` (which hands its arguments to the
service's own entry point) with the given `FRAMEBUS_*` variables on top of a clean environment
(no `FRAMEBUS_*` or `OTEL_*` of the caller's leaks in), sends its output to a log file, and knows how to
signal, stop, read the log and wait for `/readyz`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers_200(url: str) -> bool:
    """True when `url` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - our own child, loopback
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def clean_env(env: Mapping[str, str]) -> dict[str, str]:
    """The current environment without its `FRAMEBUS_*` and `OTEL_*` variables, plus `env`.

    So a child runs on the settings it is given only.
    """
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FRAMEBUS_", "OTEL_"))},
        **env,
    }


class ServiceProcess:
    """`framebus <command>` (a service or a tool) running as a child, its output in `log`."""

    def __init__(
        self,
        command: str,
        env: Mapping[str, str],
        log: Path,
        args: Sequence[str] = (),
        wrapper: Sequence[str] = (),
    ) -> None:
        """Start it; `wrapper` goes before the command (e.g. a profiler's `py-spy record --`)."""
        self.command = command
        self.log = log
        self.env = clean_env(env)
        with log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [*wrapper, sys.executable, "-m", "framebus_tools.cli", command, *args],
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    @property
    def http_port(self) -> int | None:
        """The port of its /healthz, /readyz and /metrics (None: not served)."""
        port = int(self.env.get("FRAMEBUS_HTTP_PORT", "0"))
        return port or None

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc.poll() is None

    def exit_code(self) -> int | None:
        """The exit code once it has ended."""
        return self.proc.poll()

    def signal(self, sig: signal.Signals) -> None:
        """Send a signal."""
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        """Exit code, waiting at most `timeout_s` (subprocess.TimeoutExpired past it)."""
        return self.proc.wait(timeout_s)

    def kill(self) -> int:
        """SIGKILL; the exit code."""
        self.proc.kill()
        return self.proc.wait(10)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, then SIGKILL when it does not exit in time; the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(10)

    def ready(self) -> bool:
        """True when its /readyz answers 200 (False when it serves none)."""
        port = self.http_port
        return port is not None and answers_200(f"http://127.0.0.1:{port}/readyz")

    def wait_ready(self, timeout_s: float) -> float | None:
        """Seconds until /readyz answered 200; None when it exited or the time ran out first."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.ready():
                return time.monotonic() - started
            if not self.alive():
                return None
            time.sleep(0.05)
        return None

    def text(self) -> str:
        """Everything the process wrote so far."""
        return self.log.read_text(errors="replace")

    def json_lines(self) -> list[dict[str, Any]]:
        """Its JSON log records (librdkafka's own lines are skipped)."""
        out = []
        for line in self.text().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out
