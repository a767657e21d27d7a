from __future__ import annotations

import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer

from framebus.telemetry.health import Health
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
