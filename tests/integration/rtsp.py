"""Live RTSP test cameras: one `scripts/rtsp_server.py` process per camera, killable one by one."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rtsp_server.py"
SYSTEM_PYTHON = "/usr/bin/python3"


def rtsp_available() -> bool:
    """True when the system Python has GStreamer's RTSP server bindings."""
    if not Path(SYSTEM_PYTHON).exists() or shutil.which("gst-inspect-1.0") is None:
        return False
    probe = subprocess.run(
        [
            SYSTEM_PYTHON,
            "-c",
            "import gi; gi.require_version('GstRtspServer', '1.0'); "
            "from gi.repository import GstRtspServer",
        ],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


# The fixture (tests/integration/conftest.py) fails, never skips, when the server cannot run.
needs_rtsp = pytest.mark.usefixtures("rtsp_server_available")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RtspCamera:
    """One live RTSP camera at rtsp://127.0.0.1:<port>/<name>: a test pattern, or `file` looped.

    `address` is where it listens (0.0.0.0 for clients on other hosts, such as pods).
    """

    def __init__(
        self,
        name: str,
        port: int | None = None,
        fps: int = 25,
        file: Path | None = None,
        address: str = "127.0.0.1",
    ) -> None:
        self.name = name
        self.port = port or free_port()
        self.fps = fps
        self.file = file
        self.address = address
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"rtsp://127.0.0.1:{self.port}/{self.name}"

    def start(self, timeout_s: float = 15.0) -> RtspCamera:
        self.proc = subprocess.Popen(
            [
                SYSTEM_PYTHON,
                str(SCRIPT),
                "--port",
                str(self.port),
                "--name",
                self.name,
                "--fps",
                str(self.fps),
                "--address",
                self.address,
                *(["--file", str(self.file)] if self.file else []),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("READY"):
                return self
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError(f"RTSP server {self.url} did not start")

    def kill(self) -> None:
        """Kill the server abruptly, as a camera losing power."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None
