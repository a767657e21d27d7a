"""Every consuming service's /readyz on a real process: the reasons an operator reads.

Each service answers 503 naming why until it holds its partitions (and, for the tracker and
alerts, has restored their states), then 200. Then the broker goes away: every process says the
brokers do not answer, and is ready again once they do. (A stall, the other reason, ends the
process: `tests/unit/framebus/test_watchdog.py`, `tests/unit/framebus_inferencer/test_stalls.py`,
and the coordinator-loss test through real processes.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.topology import Sizing, TopicSettings, pipeline_specs
from framebus_tools.localkafka import LocalKafka
from framebus_tools.process import ServiceProcess, free_port
from tests.reliability.conftest import own_broker_fixture
from tests.reliability.harness import get_json, service_env, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PORT = 22292  # below the ephemeral range; the controller takes PORT + 1
RULES = {
    "rules": [{"name": "anywhere", "type": "dwell", "zone": [[0, 0], [9, 0], [9, 9]], "seconds": 1}]
}
# Each service's readiness reason before it holds its partitions.
UNASSIGNED = {
    "inferencer": ("inferencer", "no Kafka partitions assigned yet"),
    "track": ("assigned", "no detections partition assigned and restored yet"),
    "alerts": ("assigned", "partition assigned and restored yet"),
    "live": ("", "consumer"),  # its frames, boxes and alerts consumers
}


@pytest.fixture
def own_broker() -> Iterator[LocalKafka]:
    yield from own_broker_fixture(PORT)


def readyz(service: ServiceProcess) -> tuple[int, dict[str, Any]]:
    return get_json(f"http://127.0.0.1:{service.http_port}/readyz")


def test_services_readyz_when_unassigned_then_when_broker_lost_then_reasons_and_ready_again(
    own_broker: LocalKafka, box_model: Path, tmp_path: Path
) -> None:
    kafka = KafkaSettings(bootstrap_servers=own_broker.bootstrap)
    names = TopicSettings.with_prefix("rd")
    sizing = Sizing(1, 1, alerts_partitions=1, replication_factor=1)
    ensure_topics(kafka, pipeline_specs(names, sizing))
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(RULES), encoding="utf-8")
    env = {
        "inferencer": {"model_path": box_model},
        "track": {"transactional_id": "tx-track"},
        "alerts": {"rules": rules, "alerts_source": "tracks", "transactional_id": "tx-alerts"},
        "live": {"http_host": "127.0.0.1", "auth": "off"},
    }
    services = {
        command: ServiceProcess(
            command,
            service_env(kafka, names, http_port=free_port(), **settings),
            tmp_path / f"{command}.log",
        )
        for command, settings in env.items()
    }
    try:
        first_answers = _until_ready(services)
        for command, answers in first_answers.items():
            key, reason = UNASSIGNED[command]
            unready = [body.get("reasons", {}) for code, body in answers if code == 503]
            assert unready, f"{command} was never seen unready before it was ready"
            assert any(
                reason in (r.get(key, "") if key else " ".join(r.values())) for r in unready
            ), (command, unready[:3])

        own_broker.stop()

        def all_name_the_broker() -> bool:
            for s in services.values():
                code, body = readyz(s)
                kafka_reason = body.get("reasons", {}).get("kafka", "")
                if code != 503 or f"Kafka brokers {kafka.bootstrap_servers}" not in kafka_reason:
                    return False
            return True

        wait_for(all_name_the_broker, 60, "every service naming the lost brokers")
        own_broker.start()
        wait_for(
            lambda: all(readyz(s)[0] == 200 for s in services.values()),
            120,
            "every service ready again once the broker is back",
        )
        assert all(s.alive() for s in services.values())
    finally:
        for s in services.values():
            s.stop()


def _until_ready(
    services: dict[str, ServiceProcess], timeout_s: float = 120
) -> dict[str, list[tuple[int, Any]]]:
    """Each process's /readyz answers from its start until its first 200 (all polled in turn)."""
    answers: dict[str, list[tuple[int, Any]]] = {command: [] for command in services}
    waiting = set(services)
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        for command in sorted(waiting):
            service = services[command]
            assert service.alive(), f"{command} exited:\n{service.text()[-3000:]}"
            code, body = readyz(service)
            if code:
                answers[command].append((code, body))
            if code == 200:
                waiting.discard(command)
        time.sleep(0.02)
    assert not waiting, f"not ready in {timeout_s} s: {sorted(waiting)}"
    return answers
