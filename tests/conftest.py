"""Shared fixtures: generated media and models (cached per session)."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from framebus_tools.synthetic import MovingSquare, write_bright_square_model, write_square_video


@pytest.fixture(scope="session")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="session")
def square_scene() -> MovingSquare:
    """A 1920x1080, 25 fps scene of 120 frames with a bright square moving on a dark background."""
    return MovingSquare(width=1920, height=1080, frames=120, fps=25)


@pytest.fixture(scope="session")
def square_video(media_dir: Path, square_scene: MovingSquare) -> Path:
    return write_square_video(media_dir / "square-1080p.mp4", square_scene)


@dataclass(frozen=True)
class GopVideo:
    """A small H.264 file with a keyframe every `gop` frames."""

    path: Path
    fps: int
    gop: int
    frames: int


@pytest.fixture(scope="session")
def gop_video(media_dir: Path) -> GopVideo:
    """320x240, 25 fps, four GOPs of 10 frames: demuxing and remuxing without re-encoding."""
    scene = MovingSquare(width=320, height=240, side=40, frames=40, fps=25)
    path = write_square_video(media_dir / "gop-240p.mp4", scene, gop=10)
    return GopVideo(path, scene.fps, 10, scene.frames)


@pytest.fixture(scope="session")
def square_model(media_dir: Path) -> Path:
    return write_bright_square_model(media_dir / "bright-square.onnx")


_not_run_gpu: list[str] = []  # `gpu` tests a `-m "not gpu"` run deselected


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Remember the `gpu` tests left out, to list them at the end."""
    _not_run_gpu.extend(item.nodeid for item in items if item.get_closest_marker("gpu"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """List the `gpu` tests not run here: deselected, not passed."""
    if not _not_run_gpu:
        return
    terminalreporter.write_sep(
        "=", f"{len(_not_run_gpu)} gpu tests NOT RUN here (need an NVIDIA GPU: make test-gpu)"
    )
    for nodeid in _not_run_gpu:
        terminalreporter.write_line(nodeid)


# A service thread that never ends keeps the interpreter from exiting after the last test (it
# joins every non-daemon thread), and CI then waits out its whole time limit with no report. Past
# librdkafka's longest wait (message.timeout.ms, 5 min) such a thread is stuck for good: its stack
# is printed and the run fails.
LINGER_S = 330.0


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Arm a watchdog that ends the process if threads outlive the session by LINGER_S."""
    timer = threading.Timer(LINGER_S, _exit_over_lingering_threads, args=(int(exitstatus),))
    timer.daemon = True
    timer.start()


def _exit_over_lingering_threads(exitstatus: int) -> None:
    lingering = [
        t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()
    ]
    if not lingering:
        return
    names = ", ".join(t.name for t in lingering)
    sys.stderr.write(f"\nthreads still running {LINGER_S:.0f} s after the session: {names}\n")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(exitstatus or 1)
