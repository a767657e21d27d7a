"""The inferencer's /readyz and /healthz: Kafka named when the brokers do not answer, stuck loops."""

import json
import urllib.error
import urllib.request

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.health import Health, HealthServer
from framebus_inferencer.state import RunState
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import inferencer_telemetry


def get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback server
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_inferencer_readyz_when_brokers_do_not_answer_then_not_ready_naming_kafka() -> None:
    state = RunState()
    state.warmed_up.set()
    state.assigned.set()
    dead = KafkaSettings(bootstrap_servers="127.0.0.1:1")  # nothing listens on port 1
    telemetry = inferencer_telemetry(0, InferencerStats(), state, dead)
    with telemetry.running(watchdog=False):
        code, body = get(f"http://127.0.0.1:{telemetry.port}/readyz")
    assert code == 503
    assert body["reasons"] == {"kafka": "Kafka brokers 127.0.0.1:1 do not answer"}


def test_inferencer_readyz_when_warm_but_not_assigned_then_not_ready_naming_the_assignment() -> (
    None
):
    state = RunState()
    state.warmed_up.set()
    telemetry = inferencer_telemetry(0, InferencerStats(), state)
    with telemetry.running(watchdog=False):
        code, body = get(f"http://127.0.0.1:{telemetry.port}/readyz")
    assert code == 503
    assert body["reasons"] == {"inferencer": "no Kafka partitions assigned yet"}


def test_inferencer_healthz_when_a_stage_stops_beating_then_unhealthy_naming_it() -> None:
    now = [0.0]
    health = Health(clock=lambda: now[0])
    for loop in ("receive", "infer", "publish"):
        health.heartbeat(loop, 60.0)
    now[0] = 30.0
    health.heartbeat("receive", 60.0)
    health.heartbeat("publish", 60.0)
    now[0] = 61.0
    telemetry = inferencer_telemetry(None, InferencerStats(), RunState())
    with HealthServer(0, health, telemetry.registry) as server:
        code, body = get(f"http://127.0.0.1:{server.port}/healthz")
    assert code == 503
    assert body["stuck_loops_s"] == {"infer": 61.0}
