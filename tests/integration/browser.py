"""Debian's chromium driven by Playwright (which cannot download a browser of its own here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from testkit.browser import CHROMIUM_ARGS, INSTALL_HINT
from testkit.browser import chromium_path as find_chromium


def chromium_path() -> str:
    """Debian's chromium, or fail (never skip) saying how to install it."""
    path = find_chromium()
    if path is None:
        pytest.fail(INSTALL_HINT)
    return path


def launch(playwright: Any, profile: Path) -> Any:
    """A persistent headless Chromium context at 1400x900, one CSS pixel per screen pixel."""
    return playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=chromium_path(),
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 900},
        device_scale_factor=1,
    )


def edge_hits(image: np.ndarray, box: dict[str, Any], colour: tuple[int, int, int]) -> float:
    """Share of points along a drawn box's four edges where the screenshot has its colour.

    Each point may be off by 2 px (anti-aliasing, rounding); a point counts when a pixel that
    close is within a small distance of the colour.
    """
    left, top, right, bottom = (round(box[k]) for k in ("left", "top", "right", "bottom"))
    points = []
    for t in np.linspace(0.15, 0.85, 12):
        x = round(left + t * (right - left))
        y = round(top + t * (bottom - top))
        points += [(x, top), (x, bottom), (left, y), (right, y)]
    hits = 0
    target = np.array(colour)
    for x, y in points:
        patch = image[max(0, y - 2) : y + 3, max(0, x - 2) : x + 3, :3].astype(int)
        if patch.size and (np.abs(patch - target).sum(axis=2) <= 90).any():
            hits += 1
    return hits / len(points)


def hex_rgb(colour: str) -> tuple[int, int, int]:
    """'#00ffff' -> (0, 255, 255)."""
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)
