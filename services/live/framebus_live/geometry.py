"""Tile geometry: the letterbox window scaled to a tile, and boxes mapped onto it. Pure."""

from __future__ import annotations

from framebus.messages import Box


def tile_size(window_width: int, window_height: int, height: int) -> tuple[int, int]:
    """(width, height) of a tile at most `height` tall showing the whole window, never upscaled.

    The letterbox window already is the model's view of the frame: enlarging it adds bytes, not
    detail. The page scales the tile to its layout and the boxes with it.
    """
    if window_width <= 0 or window_height <= 0 or height <= 0:
        raise ValueError("tile sizes must be positive")
    out_h = min(height, window_height)
    out_w = max(1, round(window_width * out_h / window_height))
    return out_w, out_h


def box_on_tile(
    box: Box, orig_width: int, orig_height: int, tile_width: int, tile_height: int
) -> tuple[int, int, int, int]:
    """A box's original-pixel corners as tile pixels (x1, y1, x2, y2), inclusive, clipped.

    The window covers the whole original frame, so the map is a scale on each axis. Record edges
    are exclusive (x2 is one past the last pixel); drawing wants the last pixel.
    """
    sx = tile_width / orig_width
    sy = tile_height / orig_height

    def clip(v: float, hi: int) -> int:
        return min(max(round(v), 0), hi - 1)

    return (
        clip(box.x1 * sx, tile_width),
        clip(box.y1 * sy, tile_height),
        clip(box.x2 * sx - 1, tile_width),
        clip(box.y2 * sy - 1, tile_height),
    )
