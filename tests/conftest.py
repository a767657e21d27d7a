"""Shared fixtures: generated media and models (cached per session)."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def square_model(media_dir: Path) -> Path:
    return write_bright_square_model(media_dir / "bright-square.onnx")
