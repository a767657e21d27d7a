"""The HTTP server: the page, its WebSocket, /mjpeg streams, the clips, health and metrics.

aiohttp serves all of them from one event loop: plain HTTP, WebSockets and long streaming
responses alike, without a thread per client.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import logging
import time
from typing import Any

from aiohttp import WSMsgType, web

from framebus.telemetry.health import PATHS, Health, answer
from framebus_live import protocol
from framebus_live.auth import Sessions
from framebus_live.clipfiles import ROUTE, served_file
from framebus_live.encoder import TileEncoder
from framebus_live.hub import LiveHub
from framebus_live.login import LoginRoutes, require_login
from framebus_live.telemetry import LiveMetrics
from framebus_live.viewer import PageViewer

log = logging.getLogger(__name__)

STATIC = {
    "/": ("index.html", "text/html"),
    "/live.js": ("live.js", "text/javascript"),
    "/live.css": ("live.css", "text/css"),
}
BOUNDARY = "framebus-frame"
WS_HEARTBEAT_S = 20.0  # a page that stops answering pings is closed, and its state freed
MAX_MJPEG_FPS = 30.0
IDLE_CHECK_S = 1.0
CLIP_TYPES = {".mp4": "video/mp4", ".jpg": "image/jpeg"}


def static_file(name: str) -> bytes:
    """A file of the page, from the package."""
    return importlib.resources.files("framebus_live").joinpath("static", name).read_bytes()


def build_app(
    hub: LiveHub,
    encoder: TileEncoder,
    health: Health,
    metrics: LiveMetrics,
    sessions: Sessions | None = None,
) -> web.Application:
    """The aiohttp application with every route; with `sessions`, all but probes need a login."""
    routes = LiveRoutes(hub, encoder, health, metrics)
    app = web.Application(middlewares=[require_login(sessions)] if sessions else [])
    if sessions is not None:
        login = LoginRoutes(sessions, metrics)
        app.router.add_get("/login", login.form)
        app.router.add_post("/login", login.submit)
        app.router.add_post("/logout", login.logout)
    for path, (name, content_type) in STATIC.items():
        app.router.add_get(path, routes.static(name, content_type))
    app.router.add_get("/ws", routes.websocket)
    app.router.add_get("/mjpeg/{camera}", routes.mjpeg)
    app.router.add_get(ROUTE + "{path:.+}", routes.clip_file)
    for path in PATHS:
        app.router.add_get(path, routes.probe)
    return app


class LiveRoutes:
    """The request handlers."""

    def __init__(
        self, hub: LiveHub, encoder: TileEncoder, health: Health, metrics: LiveMetrics
    ) -> None:
        self.hub = hub
        self.encoder = encoder
        self.health = health
        self.metrics = metrics

    def static(self, name: str, content_type: str) -> Any:
        """A handler serving one file of the page."""
        body = static_file(name)

        async def handler(_request: web.Request) -> web.Response:
            return web.Response(body=body, content_type=content_type, charset="utf-8")

        return handler

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One page: hello, then its cameras' tiles, the figures and the alerts."""
        ws = web.WebSocketResponse(heartbeat=WS_HEARTBEAT_S)
        await ws.prepare(request)
        viewer = PageViewer(ws, self.metrics)
        await ws.send_str(self.hub.hello())
        self.hub.add_viewer(viewer)
        sender = asyncio.ensure_future(viewer.send_loop())
        try:
            async for msg in ws:
                if msg.type is not WSMsgType.TEXT:
                    continue
                cameras = protocol.parse_subscribe(msg.data, self.hub.settings.page_size)
                if cameras is not None:
                    self.hub.subscribed(viewer, viewer.show(cameras))
        finally:
            self.hub.remove_viewer(viewer)
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        return ws

    async def mjpeg(self, request: web.Request) -> web.StreamResponse:
        """`/mjpeg/<camera>?fps=&height=&boxes=1`: multipart/x-mixed-replace JPEGs, latest only."""
        camera = request.match_info["camera"]
        try:
            fps = min(MAX_MJPEG_FPS, float(request.query.get("fps", self.hub.settings.tile_fps)))
            height = int(request.query.get("height", self.encoder.height))
        except ValueError:
            raise web.HTTPBadRequest(text="fps and height must be numbers") from None
        if fps <= 0 or not 16 <= height <= 2160:
            raise web.HTTPBadRequest(text="fps must be > 0 and height between 16 and 2160")
        boxes = request.query.get("boxes", "1") not in ("0", "false", "no")
        if camera not in self.hub.views:
            raise web.HTTPNotFound(text=f"no frames of camera {camera!r} seen yet")
        response = web.StreamResponse(
            headers={
                "Content-Type": f"multipart/x-mixed-replace; boundary={BOUNDARY}",
                "Cache-Control": "no-store",
            }
        )
        await response.prepare(request)
        self.metrics.mjpeg_clients.inc()
        try:
            await self._stream(request, response, camera, fps, height, boxes)
        except (ConnectionResetError, asyncio.CancelledError):
            log.debug("mjpeg client left", extra={"camera_id": camera})
        finally:
            self.metrics.mjpeg_clients.dec()
        return response

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        camera: str,
        fps: float,
        height: int,
        boxes: bool,
    ) -> None:
        sent_version = -1
        while True:
            started = time.monotonic()
            view = self.hub.views.get(camera)
            display = None if view is None else view.display
            if display is None or display.version == sent_version:
                if request.transport is None or request.transport.is_closing():
                    return  # the client left while the camera had nothing new
                # Bounded, so a client that left while the camera was quiet is noticed. Nothing
                # awaits between the version check and here, so no change can slip in between.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.hub.changed(camera).wait(), IDLE_CHECK_S)
                continue
            jpeg = await self.encoder.mjpeg_frame(display, height, boxes)
            head = (
                f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
                f"Content-Length: {len(jpeg)}\r\nX-Framebus-Seq: {display.frame.seq}\r\n\r\n"
            )
            # A slow client holds this write; frames that came meanwhile are skipped, not queued.
            await response.write(head.encode() + jpeg + b"\r\n")
            sent_version = display.version
            self.metrics.mjpeg_frames_sent.inc()
            await asyncio.sleep(max(0.0, 1 / fps - (time.monotonic() - started)))

    async def clip_file(self, request: web.Request) -> web.FileResponse:
        """`/clips/<camera>/<name>.mp4|.jpg` from the clips folder; Range requests answered."""
        path = served_file(self.hub.settings.clips_dir, request.match_info["path"])
        if path is None:
            raise web.HTTPNotFound(text="no such clip or snapshot")
        return web.FileResponse(path, headers={"Content-Type": CLIP_TYPES[path.suffix.lower()]})

    async def probe(self, request: web.Request) -> web.Response:
        """/healthz and /livez, /readyz, /metrics: as every other service answers them."""
        answered = answer(request.path, self.health, self.metrics.registry)
        if answered is None:
            raise web.HTTPNotFound
        status, body, content_type = answered
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})
