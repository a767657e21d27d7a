"""The live page in the chart (off by default) and in compose: `python -m framebus_live` from the
decoder image, its page, probes and metrics on http.port like every service (its Service on
live.service.port), reading the topics the others write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framebus import settings as cfg
from framebus.topology import TopicSettings
from framebus_live.settings import LiveSettings, LiveSource
from tests.deploy.composeutil import cpu_service, load_compose, service_env
from tests.deploy.helmutil import (
    Helm,
    Rendered,
    assert_off_the_gpu_pool,
    cpu_service_containers,
    env_of,
    process_env,
    write_values,
)

pytestmark = pytest.mark.deploy

TOPIC_VARIABLES = (
    "FRAMEBUS_FRAMES_TOPIC",
    "FRAMEBUS_DETECTIONS_TOPIC",
    "FRAMEBUS_TRACKS_TOPIC",
    "FRAMEBUS_ALERTS_TOPIC",
    "FRAMEBUS_LIVE_GROUP",
    "FRAMEBUS_LIVE_SOURCE",
)


@pytest.fixture(scope="module")
def compose_live() -> dict[str, Any]:
    return cpu_service(load_compose(), "live")


@pytest.mark.parametrize("values_name", ["default", "cpu"])
def test_live_when_not_enabled_then_nothing_of_it_renders(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    for kind in ("Deployment", "Service", "ServiceMonitor"):
        assert not rendered[values_name].of_component(kind, "live"), kind


def test_live_when_enabled_then_it_runs_the_live_module_from_the_decoder_image(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    container, decoder_container = cpu_service_containers(result, "live")
    env = process_env(container)
    assert {k: env[k] for k in TOPIC_VARIABLES} == {
        "FRAMEBUS_FRAMES_TOPIC": "framebus.frames",
        "FRAMEBUS_DETECTIONS_TOPIC": "framebus.detections",
        "FRAMEBUS_TRACKS_TOPIC": "framebus.tracks",
        "FRAMEBUS_ALERTS_TOPIC": "framebus.alerts",
        "FRAMEBUS_LIVE_GROUP": "framebus-live",
        "FRAMEBUS_LIVE_SOURCE": "auto",
    }
    # The same Kafka connection and credentials as the other services.
    assert (
        env["FRAMEBUS_BOOTSTRAP_SERVERS"]
        == env_of(decoder_container)["FRAMEBUS_BOOTSTRAP_SERVERS"]["value"]
    )
    assert env["FRAMEBUS_SECURITY_PROTOCOL"] == "sasl_ssl"
    assert "FRAMEBUS_SASL_PASSWORD" in env


def test_live_when_enabled_then_page_probes_and_metrics_share_its_http_port(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    deployment = result.deployment("live")
    container = result.container("live")
    # The pod listens on http.port, like every service; only its Service offers 8090.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080}
    assert ports == {p["name"]: p["containerPort"] for p in result.container("tracker")["ports"]}
    assert env_of(container)["FRAMEBUS_HTTP_PORT"]["value"] == "8080"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "8080"
    assert annotations["prometheus.io/path"] == "/metrics"

    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (service,) = result.of_component("Service", "live")
    (monitor,) = result.of_component("ServiceMonitor", "live")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8090, "targetPort": "http", "protocol": "TCP"}
    ]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
    assert deployment["spec"]["replicas"] == 1


def test_live_when_enabled_then_it_stays_off_the_gpu_pool(rendered: dict[str, Rendered]) -> None:
    assert_off_the_gpu_pool(rendered["gpu-keda"], "live")


def test_live_when_knobs_set_then_its_env_and_service_follow(helm: Helm, tmp_path: Path) -> None:
    values = {
        "http": {"port": 9000},
        "live": {
            "enabled": True,
            "consumerGroup": "viewers",
            "source": "detections",
            "service": {"type": "NodePort", "port": 80},
        },
        "kafka": {"topics": {"alerts": "site.alerts", "tracks": "site.tracks"}},
    }
    result = helm.render([write_values(tmp_path, values)])
    env = process_env(result.container("live"))
    assert (env["FRAMEBUS_HTTP_PORT"], env["FRAMEBUS_LIVE_GROUP"]) == ("9000", "viewers")
    assert (env["FRAMEBUS_LIVE_SOURCE"], env["FRAMEBUS_ALERTS_TOPIC"]) == (
        "detections",
        "site.alerts",
    )
    assert env["FRAMEBUS_TRACKS_TOPIC"] == "site.tracks"
    (service,) = result.of_component("Service", "live")
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    assert result.container("live")["ports"][0]["containerPort"] == 9000


def test_live_when_chart_and_compose_then_it_reads_the_same_topics_and_group(
    helm: Helm, compose_live: dict[str, Any]
) -> None:
    result = helm.render(sets=["live.enabled=true"])
    chart_env = process_env(result.container("live"))
    compose_env = service_env(compose_live)
    # Compose leaves the frames and detections topics at the settings' defaults.
    compose_env.setdefault("FRAMEBUS_FRAMES_TOPIC", TopicSettings().frames_topic)
    compose_env.setdefault("FRAMEBUS_DETECTIONS_TOPIC", TopicSettings().detections_topic)
    assert {k: chart_env[k] for k in TOPIC_VARIABLES} == {
        k: compose_env[k] for k in TOPIC_VARIABLES
    }
    # The page is on 8090 in both: the chart's Service port, compose's container port.
    (service,) = result.of_component("Service", "live")
    assert service["spec"]["ports"][0]["port"] == int(compose_env["FRAMEBUS_HTTP_PORT"]) == 8090


def test_live_when_compose_runs_then_page_on_localhost_8090_after_its_topics(
    compose_live: dict[str, Any],
) -> None:
    assert compose_live["ports"] == ["127.0.0.1:8090:8090"]
    assert "127.0.0.1:8090/readyz" in " ".join(compose_live["healthcheck"]["test"])


def test_live_when_knobs_set_then_they_load_into_the_live_settings(
    helm: Helm, tmp_path: Path
) -> None:
    values = {
        "http": {"port": 9000},
        "live": {"enabled": True, "consumerGroup": "viewers", "source": "tracks"},
        "kafka": {"topics": {"alerts": "site.alerts", "tracks": "site.tracks"}},
    }
    env = process_env(helm.render([write_values(tmp_path, values)]).container("live"))
    loaded = cfg.load(LiveSettings, env)
    assert loaded.http_port == 9000
    assert (loaded.topics.tracks_topic, loaded.topics.alerts_topic) == (
        "site.tracks",
        "site.alerts",
    )
    assert loaded.live_group == "viewers"
    assert loaded.live_source is LiveSource.TRACKS
