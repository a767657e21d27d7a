"""How often each camera's tile goes to the pages: tile_fps, lowered to fit the server's budget. Pure."""

from __future__ import annotations


def tile_interval_s(tile_fps: float, max_tiles_per_s: float, cameras_shown: int) -> float:
    """Seconds between two tiles of one camera when `cameras_shown` cameras are on some page.

    64 cameras at 5 fps would be 320 JPEGs a second; with a budget of 80 each gets 1.25 a second.
    """
    per_camera = min(tile_fps, max_tiles_per_s / max(1, cameras_shown))
    return 1.0 / per_camera


class TilePacer:
    """Per camera, when its next tile may go out."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def due(self, camera: str, now: float, interval_s: float) -> bool:
        """Whether a tile of `camera` may go out at `now`; if so, it counts as sent."""
        last = self._last.get(camera)
        if last is not None and now - last < interval_s:
            return False
        # Keep the cadence: a tile late by a tick does not push every later tile back.
        self._last[camera] = (
            now if last is None or now - last > 2 * interval_s else last + interval_s
        )
        return True

    def cameras(self) -> set[str]:
        """The cameras it paces."""
        return set(self._last)

    def forget(self, camera: str) -> None:
        """Drop a camera no page shows: its state is not kept, and its next tile is due at once."""
        self._last.pop(camera, None)
