"""Tiles encoded on a thread pool, once each however many pages get them."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field

from framebus_live import protocol
from framebus_live.telemetry import LiveMetrics
from framebus_live.tiles import encode_jpeg, tile_image
from framebus_live.views import Display


@dataclass(frozen=True)
class EncodedTile:
    """A tile's two messages: its boxes (text), then its picture (binary)."""

    boxes_text: str
    binary: bytes


class TileEncoder:
    """Cuts, scales and JPEG-encodes displays off the event loop."""

    def __init__(self, pool: Executor, height: int, quality: int, metrics: LiveMetrics) -> None:
        self._pool = pool
        self.height = height
        self.quality = quality
        self._metrics = metrics

    def _jpeg(self, display: Display, height: int, boxes: bool) -> tuple[bytes, int, int]:
        started = time.perf_counter()
        image = tile_image(display.frame, height)
        data = encode_jpeg(image, self.quality, display.boxes if boxes else None)
        self._metrics.jpeg_encode_seconds.observe(time.perf_counter() - started)
        return data, image.shape[1], image.shape[0]

    async def page_tile(self, camera: str, display: Display) -> EncodedTile:
        """The messages of one page tile (boxes drawn by the page, not in the pixels)."""
        loop = asyncio.get_running_loop()
        jpeg, w, h = await loop.run_in_executor(self._pool, self._jpeg, display, self.height, False)
        seq = display.frame.seq
        return EncodedTile(
            protocol.boxes_message(display.boxes, camera, seq),
            protocol.tile_message(camera, seq, w, h, jpeg),
        )

    async def mjpeg_frame(self, display: Display, height: int, boxes: bool) -> bytes:
        """One /mjpeg frame, boxes drawn on the server when asked."""
        loop = asyncio.get_running_loop()
        jpeg, _, _ = await loop.run_in_executor(self._pool, self._jpeg, display, height, boxes)
        return jpeg


@dataclass
class PendingTile:
    """A display on its way to pages; the first page to send it starts the encoding."""

    camera: str
    display: Display
    encoder: TileEncoder
    _task: asyncio.Task[EncodedTile] | None = field(default=None, repr=False)

    async def encoded(self) -> EncodedTile:
        """The tile's messages (encoded at most once)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self.encoder.page_tile(self.camera, self.display))
        return await asyncio.shield(self._task)
