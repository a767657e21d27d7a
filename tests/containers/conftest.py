"""The compose stack on the images `make images` built, run by podman-compose (testkit.podman_compose).

One stack a module: its own project name and volumes, the generated scene as its camera's video,
the scene's colour detector as its model, the scene's rules, and a password for its page. The
stack's host ports are compose.yaml's own (19092, 8081-8085, 8090, 8554), so none may be taken.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from framebus_tools.scene import scene_rules_document, write_scene_video
from framebus_tools.scene_model import write_color_blob_model
from framebus_tools.scenes import demo_scene
from testkit.podman_compose import REPO, HealthTicker, Stack, container_logs, podman

PROJECT = "framebustest"
IMAGES = ("framebus/kafka:4.1.1", "framebus/decoder:dev", "framebus/rtsp-camera:dev")
HOST_PORTS = (19092, 8081, 8082, 8083, 8084, 8085, 8090, 8554)
CAMERAS = ("scene-1", "scene-2")
MODEL_INPUT = 320  # the colour detector's size: a quarter of its 640 cost, boxes within pixels
PASSWORD = "container-test-password-7"  # noqa: S105 - the test stack's own page password


@dataclass
class RunningStack:
    """The stack, its health ticker, and what it was given."""

    stack: Stack
    ticker: HealthTicker
    work: Path

    def volume_dir(self, volume: str) -> Path:
        """Where podman keeps the named volume `volume` of this project on the host."""
        path = podman("volume", "inspect", f"{PROJECT}_{volume}", "--format", "{{.Mountpoint}}")
        return Path(path.strip())


def _refuse_taken_ports() -> None:
    for port in HOST_PORTS:
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                pytest.fail(f"port {port} is taken: stop what listens there (a compose stack?)")


def _require_images() -> None:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: make images (scripts/build-images.sh) installs it")
    for image in IMAGES:
        if not podman("images", "-q", image).strip():
            pytest.fail(f"image {image} is missing: run `make images` first")


def _scene_inputs(work: Path) -> dict[str, str]:
    """The compose variables that point the stack at the scene's files under `work`."""
    scene = demo_scene()
    (work / "media").mkdir()
    (work / "models").mkdir()
    write_scene_video(work / "media" / "sample.mp4", scene)
    write_color_blob_model(work / "models" / "model.onnx", scene, MODEL_INPUT)
    rules = work / "rules.yaml"
    rules.write_text(yaml.safe_dump(scene_rules_document(scene, dwell_s=2.0)), encoding="utf-8")
    url = "rtsp://rtsp-camera:8554/sample"
    cameras = [{"id": c, "url": url, "target_fps": 5, "video": True} for c in CAMERAS]
    (work / "cameras.yaml").write_text(yaml.safe_dump({"cameras": cameras}), encoding="utf-8")
    password = work / "live-password"
    password.write_text(PASSWORD, encoding="utf-8")
    password.chmod(0o644)  # bound as it is: the page's uid 10001 reads it
    for folder in (work, work / "media", work / "models"):
        folder.chmod(0o755)
    return {
        "FRAMEBUS_COMPOSE_MEDIA": str(work / "media"),
        "FRAMEBUS_COMPOSE_MODELS": str(work / "models"),
        "FRAMEBUS_COMPOSE_RULES": str(rules),
        "FRAMEBUS_COMPOSE_CAMERAS": str(work / "cameras.yaml"),
        "FRAMEBUS_COMPOSE_LIVE_PASSWORD_FILE": str(password),
        "FRAMEBUS_COMPOSE_INPUT_SIZE": str(MODEL_INPUT),
    }


def _remove_project(stack: Stack) -> None:
    """Containers, then volumes, of the project: nothing of an earlier run is reused."""
    for name in stack.containers():
        podman("rm", "-f", "-t", "5", name, check=False)
    volumes = podman("volume", "ls", "-q", "--filter", f"label=io.podman.compose.project={PROJECT}")
    for volume in volumes.split():
        podman("volume", "rm", "-f", volume, check=False)


@pytest.fixture(scope="module")
def running_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """The CPU profile of compose.yaml on this machine's images, up, on the generated scene."""
    _require_images()
    _refuse_taken_ports()
    work = tmp_path_factory.mktemp("compose")
    files = [REPO / "compose.yaml", REPO / "compose.local.yaml"]
    stack = Stack(files, ["cpu"], _scene_inputs(work), PROJECT)
    _remove_project(stack)
    with HealthTicker(stack) as ticker:
        try:
            stack.up(ticker)
            yield RunningStack(stack, ticker, work)
        finally:
            for name in stack.containers():
                (work / f"{name}.log").write_text(container_logs(name), encoding="utf-8")
            _remove_project(stack)
