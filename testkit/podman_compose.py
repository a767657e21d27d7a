"""compose.yaml run by podman-compose on podman 4.3 without systemd, as the tests run it.

Two things of Debian's podman 4.3 make `podman-compose up` alone fall short, so this brings the
stack up in waves instead, each wave once its dependencies' conditions hold:

- podman runs a container's health checks from systemd timers; on a host without systemd none
  runs, every container stays "starting" and podman-compose ignores `service_healthy` (it needs
  podman 4.6). `HealthTicker` runs the checks itself (`podman healthcheck run`).
- podman-compose passes `depends_on` as `--requires`, and podman 4.3 cannot start a container
  whose dependency has a dependency of its own that is running ("not found in input list").
  Each wave is started with `--no-deps`, after this module checked the conditions.

    python -m testkit.podman_compose up [-f FILE ...] [--profile P ...]

brings the stack up that way (and keeps ticking health checks until interrupted).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
PROJECT = "framebus"
HEALTH_EVERY_S = 5.0


class ComposeError(RuntimeError):
    """The stack did not come up (or down) as compose.yaml says."""


def podman(*args: str, timeout_s: float = 120.0, check: bool = True) -> str:
    """`podman ARGS`' stdout; ComposeError with its stderr when it fails and `check`."""
    done = subprocess.run(  # noqa: S603 - podman with our own arguments
        ["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and done.returncode != 0:
        raise ComposeError(f"podman {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def container_logs(container: str) -> str:
    """Everything `container` wrote, stdout and stderr (the services log to stderr)."""
    done = subprocess.run(  # noqa: S603 - podman with our own arguments
        ["podman", "logs", container], capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout + done.stderr


@dataclass
class Stack:
    """One compose project: its files, profiles and the variables compose reads."""

    files: Sequence[Path]
    profiles: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    project: str = PROJECT

    def compose(self, *args: str, timeout_s: float = 300.0) -> str:
        """`podman-compose -f ... --profile ... ARGS`' stdout; ComposeError when it fails."""
        command = [str(Path(sys.executable).parent / "podman-compose"), "-p", self.project]
        for path in self.files:
            command += ["-f", str(path)]
        for profile in self.profiles:
            command += ["--profile", profile]
        done = subprocess.run(  # noqa: S603 - podman-compose with our own arguments
            [*command, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            cwd=Path(self.files[0]).parent,
            env={**os.environ, **self.env},
        )
        if done.returncode != 0:
            raise ComposeError(
                f"podman-compose {' '.join(args)}: exit {done.returncode}:\n"
                f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return done.stdout

    def config(self) -> dict[str, Any]:
        """The merged, interpolated compose document."""
        doc: dict[str, Any] = yaml.safe_load(self.compose("config"))
        return doc

    def services(self) -> dict[str, dict[str, Any]]:
        """The services the stack's profiles turn on."""
        active = set(self.profiles)
        return {
            name: service
            for name, service in self.config()["services"].items()
            if not service.get("profiles") or active & set(service["profiles"])
        }

    def container(self, service: str) -> str:
        """The container podman-compose names for `service` (one replica)."""
        return f"{self.project}_{service}_1"

    def up(self, ticker: HealthTicker, timeout_s: float = 300.0) -> dict[str, float]:
        """Start every service in dependency waves; the seconds each wave waited for its turn."""
        services = self.services()
        waited: dict[str, float] = {}
        started = time.monotonic()
        for wave in dependency_waves(services):
            for name in wave:
                for dep, rule in (services[name].get("depends_on") or {}).items():
                    self.wait_for(dep, rule["condition"], ticker, started + timeout_s)
            self.compose("up", "-d", "--no-deps", *wave)
            waited[",".join(wave)] = time.monotonic() - started
        return waited

    def wait_for(self, service: str, condition: str, ticker: HealthTicker, deadline: float) -> None:
        """Block until `service` meets a compose `condition`; ComposeError at the deadline."""
        container = self.container(service)
        while True:
            state = container_state(container)
            if condition == "service_started" and state.get("Running"):
                return
            if condition == "service_healthy":
                ticker.tick()
                if health_status(container) == "healthy":
                    return
            if condition == "service_completed_successfully" and state.get("Status") == "exited":
                if state.get("ExitCode") == 0:
                    return
                logs = podman("logs", "--tail", "30", container, check=False)
                raise ComposeError(f"{service} exited {state.get('ExitCode')}:\n{logs}")
            if time.monotonic() > deadline:
                logs = podman("logs", "--tail", "30", container, check=False)
                raise ComposeError(f"{service} is not {condition} ({state}):\n{logs}")
            time.sleep(1.0)

    def down(self, timeout_s: float = 300.0) -> None:
        """`down`: containers and network removed, volumes kept."""
        self.compose("down", timeout_s=timeout_s)

    def containers(self) -> list[str]:
        """Names of the project's containers, running or not."""
        out = podman(
            "ps", "-a", "--filter", f"label=io.podman.compose.project={self.project}",
            "--format", "{{.Names}}",
        )  # fmt: skip
        return out.split()


def dependency_waves(services: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Services grouped so that each group depends only on earlier groups (sorted within)."""
    left = {name: set(s.get("depends_on") or {}) & set(services) for name, s in services.items()}
    waves: list[list[str]] = []
    done: set[str] = set()
    while left:
        wave = sorted(name for name, deps in left.items() if deps <= done)
        if not wave:
            raise ComposeError(f"depends_on has a cycle among {sorted(left)}")
        waves.append(wave)
        done.update(wave)
        for name in wave:
            del left[name]
    return waves


def container_state(container: str) -> dict[str, Any]:
    """`podman inspect`'s State of `container` ({} when it does not exist)."""
    out = podman("inspect", "--format", "json", container, check=False)
    if not out.strip():
        return {}
    state: dict[str, Any] = json.loads(out)[0]["State"]
    return state


def health_status(container: str) -> str:
    """healthy, unhealthy, starting, or "" for a container without a check."""
    state = container_state(container)
    health = state.get("Health") or state.get("Healthcheck") or {}
    return str(health.get("Status", ""))


class HealthTicker:
    """Runs the health checks of a project's running containers every `every_s` seconds."""

    def __init__(self, stack: Stack, every_s: float = HEALTH_EVERY_S) -> None:
        self._stack = stack
        self._every_s = every_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="health-ticker", daemon=True)

    def __enter__(self) -> HealthTicker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def tick(self) -> None:
        """One round: `podman healthcheck run` for every running container that has a check."""
        with self._lock:
            running = podman(
                "ps", "--filter", f"label=io.podman.compose.project={self._stack.project}",
                "--format", "{{.Names}}",
            ).split()  # fmt: skip
            for name in running:
                # Exit 1 is an unhealthy answer, recorded in the container's state; an error
                # (no check, a container gone meanwhile) is told by health_status, not here.
                podman("healthcheck", "run", name, check=False, timeout_s=60)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self.tick()


def main(argv: Sequence[str] | None = None) -> int:
    """`up`: bring the stack up in waves, then keep ticking health checks until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m testkit.podman_compose")
    parser.add_argument("action", choices=["up"])
    parser.add_argument("-f", "--file", action="append", type=Path, default=[])
    parser.add_argument("--profile", action="append", default=[])
    args = parser.parse_args(argv)
    files = args.file or [REPO / "compose.yaml", REPO / "compose.local.yaml"]
    stack = Stack([f.resolve() for f in files], args.profile)
    with HealthTicker(stack) as ticker:
        for wave, seconds in stack.up(ticker).items():
            print(f"{seconds:6.1f} s  started {wave}", flush=True)
        print("every service started; ticking health checks until Ctrl-C", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
