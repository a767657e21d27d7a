from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from framebus.settings import Secret
from framebus.telemetry.health import Health
from framebus_live.auth import COOKIE, Sessions
from framebus_live.hub import LiveHub
from framebus_live.server import build_app
from framebus_live.settings import LiveSettings
from framebus_live.telemetry import LiveMetrics


def test_server_when_probed_then_answers_livez_like_every_service() -> None:
    async def probe() -> dict[str, tuple[int, str]]:
        metrics = LiveMetrics()
        health = Health()
        health.add_check("kafka", lambda: "down")
        hub = LiveHub(LiveSettings(), metrics, lambda camera, display: None)
        app = build_app(hub, None, health, metrics)  # type: ignore[arg-type]  # no tiles here
        async with TestClient(TestServer(app)) as client:
            answers = {}
            for path in ("/healthz", "/livez", "/readyz", "/metrics"):
                resp = await client.get(path)
                answers[path] = (resp.status, await resp.text())
            return answers

    answers = asyncio.run(probe())
    assert answers["/livez"] == answers["/healthz"]
    assert answers["/livez"][0] == 200
    assert json.loads(answers["/readyz"][1])["reasons"] == {"kafka": "down"}
    assert answers["/readyz"][0] == 503
    assert "framebus_live_viewers" in answers["/metrics"][1]


def _clips_dir(tmp_path: Path) -> Path:
    (tmp_path / "clips" / "cam").mkdir(parents=True)
    (tmp_path / "clips" / "cam" / "a.mp4").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "clips" / "cam" / "a.jpg").write_bytes(b"\xff\xd8jpeg")
    return tmp_path / "clips"


def test_server_when_login_required_then_every_route_but_probes_refused_without_cookie(
    tmp_path: Path,
) -> None:
    async def ask() -> dict[str, Any]:
        metrics = LiveMetrics()
        settings = LiveSettings(clips_dir=_clips_dir(tmp_path))
        hub = LiveHub(settings, metrics, lambda camera, display: None)
        sessions = Sessions(Secret("right"), 3600)
        app = build_app(hub, None, Health(), metrics, sessions)  # type: ignore[arg-type]
        got: dict[str, Any] = {}
        async with TestClient(TestServer(app)) as client:
            for path in ("/", "/live.js", "/ws", "/mjpeg/cam", "/clips/cam/a.mp4", "/metrics"):
                resp = await client.get(path, allow_redirects=False)
                got[path] = (resp.status, resp.headers.get("Location"))
            wrong = await client.post("/login", data={"password": "wrong"}, allow_redirects=False)
            got["wrong"] = (wrong.status, wrong.headers.get("Set-Cookie"))
            right = await client.post("/login", data={"password": "right"}, allow_redirects=False)
            got["right"] = (right.status, right.headers.get("Set-Cookie", ""))
            cookie = {"Cookie": f"{COOKIE}={right.cookies[COOKIE].value}"}
            client.session.cookie_jar.clear()
            page = await client.get("/", headers=cookie)
            got["page"] = (page.status, await page.text())
            ranged = await client.get("/clips/cam/a.mp4", headers={**cookie, "Range": "bytes=0-9"})
            got["range"] = (ranged.status, ranged.headers["Content-Type"], await ranged.read())
            forged = await client.get("/clips/cam/a.jpg", headers={"Cookie": f"{COOKIE}=x.1.y"})
            got["forged"] = forged.status
        return got

    got = asyncio.run(ask())
    assert got["/"] == (303, "/login")
    for path in ("/live.js", "/ws", "/mjpeg/cam", "/clips/cam/a.mp4"):
        assert got[path][0] == 401, path
    assert got["/metrics"][0] == 200  # Prometheus does not log in
    assert got["wrong"] == (401, None)
    status, set_cookie = got["right"]
    assert status == 303
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    assert got["page"][0] == 200 and "framebus live" in got["page"][1]
    assert got["range"] == (206, "video/mp4", bytes(range(10)))
    assert got["forged"] == 401


def test_server_when_no_login_then_clips_served_and_paths_out_refused(tmp_path: Path) -> None:
    async def ask() -> dict[str, Any]:
        metrics = LiveMetrics()
        settings = LiveSettings(clips_dir=_clips_dir(tmp_path))
        (tmp_path / "secret.jpg").write_bytes(b"secret")
        hub = LiveHub(settings, metrics, lambda camera, display: None)
        app = build_app(hub, None, Health(), metrics)  # type: ignore[arg-type]
        got: dict[str, Any] = {}
        async with TestClient(TestServer(app)) as client:
            jpg = await client.get("/clips/cam/a.jpg")
            got["jpg"] = (jpg.status, jpg.headers["Content-Type"], await jpg.read())
            for path in ("/clips/%2e%2e/secret.jpg", "/clips/cam/%2e%2e/%2e%2e/secret.jpg"):
                resp = await client.get(path)
                got[path] = (resp.status, await resp.read())
        return got

    got = asyncio.run(ask())
    assert got.pop("jpg") == (200, "image/jpeg", b"\xff\xd8jpeg")
    for path, (status, body) in got.items():
        assert status == 404 and b"secret" not in body, path
