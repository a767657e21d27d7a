"""One page over /ws: what it has not been sent yet, and the loop that sends it.

Alerts and the camera list queue (few, small, each matters; bounded all the same), the figures
are latest-only, and tiles are latest-only per camera: while the socket is still sending, a newer
tile of a camera replaces the unsent one and the old one is counted as dropped. A slow page
costs the server one tile per camera it shows, never a queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Protocol

from framebus.errors import CodecError
from framebus_live.encoder import PendingTile
from framebus_live.slots import LatestSlots
from framebus_live.telemetry import LiveMetrics

log = logging.getLogger(__name__)

MAX_TEXTS = 256  # alerts and camera lists not yet sent to one page; the oldest go first


class Socket(Protocol):
    """What the sender needs of a WebSocket (aiohttp's WebSocketResponse fits)."""

    async def send_str(self, data: str) -> None: ...  # noqa: D102
    async def send_bytes(self, data: bytes) -> None: ...  # noqa: D102


class PageViewer:
    """A connected page: its cameras, its unsent messages, and its sender."""

    def __init__(self, socket: Socket, metrics: LiveMetrics) -> None:
        self._socket = socket
        self._metrics = metrics
        self.cameras: set[str] = set()
        self._tiles: LatestSlots[str, PendingTile] = LatestSlots()
        self._texts: deque[str] = deque(maxlen=MAX_TEXTS)
        self._stats: str | None = None
        self._wake = asyncio.Event()

    def show(self, cameras: list[str]) -> list[str]:
        """The page now shows `cameras`; tiles of others not yet sent are forgotten.

        Returns the cameras it did not show before: only those need their current picture.
        """
        added = [c for c in dict.fromkeys(cameras) if c not in self.cameras]
        self.cameras = set(cameras)
        self._tiles.discard(self.cameras)
        return added

    def offer_tile(self, tile: PendingTile) -> None:
        """A newer tile of one of the page's cameras."""
        if self._tiles.put(tile.camera, tile):
            self._metrics.tiles_dropped.inc()
        self._wake.set()

    def offer_text(self, text: str) -> None:
        """An alert or camera list."""
        if len(self._texts) == self._texts.maxlen:
            self._metrics.texts_dropped.inc()
        self._texts.append(text)
        self._wake.set()

    def offer_stats(self, text: str) -> None:
        """The newest figures; replaces figures not yet sent."""
        self._stats = text
        self._wake.set()

    async def send_loop(self) -> None:
        """Send what is pending, one message at a time, until the socket fails or is cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while await self._send_next():
                pass

    async def _send_next(self) -> bool:
        if self._texts:
            await self._socket.send_str(self._texts.popleft())
            return True
        if self._stats is not None:
            text, self._stats = self._stats, None
            await self._socket.send_str(text)
            return True
        taken = self._tiles.take()
        if taken is None:
            return False
        camera, tile = taken
        try:
            encoded = await tile.encoded()
        except (CodecError, ValueError) as exc:
            self._metrics.bad_records.labels("frames").inc()
            log.warning("frame not shown", extra={"camera_id": camera, "error": str(exc)})
            return True
        await self._socket.send_str(encoded.boxes_text)
        await self._socket.send_bytes(encoded.binary)
        self._metrics.tiles_sent.inc()
        return True
