"""KEDA on time: the inferencer's ScaledObject also scales on the inferencers' largest lag in
seconds, read from Prometheus as a Value, beside the Kafka trigger that wakes it from zero."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helmutil import KEDA_ON, Helm, Rendered, write_values
from tests.deploy.promql import metric_names

pytestmark = pytest.mark.deploy


def _triggers(result: Rendered, component: str = "inferencer") -> dict[str, dict[str, Any]]:
    triggers = result.scaled_object(component)["spec"]["triggers"]
    by_type = {t["type"]: t for t in triggers}
    assert len(by_type) == len(triggers)
    return by_type


def test_keda_when_enabled_then_inferencer_scales_on_max_lag_seconds_as_a_value(
    rendered: dict[str, Rendered], exported_metrics: dict[str, set[str]]
) -> None:
    triggers = _triggers(rendered["gpu-keda"])
    assert set(triggers) == {"kafka", "prometheus"}
    prometheus = triggers["prometheus"]
    # Value: the maximum age is compared with the threshold as it is; AverageValue would divide
    # it by the replica count, as if the seconds of each replica added up.
    assert prometheus["metricType"] == "Value"
    meta = prometheus["metadata"]
    assert meta["serverAddress"] == "http://prometheus-operated.monitoring.svc:9090"
    assert meta["query"] == (
        'max(framebus_inferencer_consumer_lag_seconds{namespace="vision",topic="framebus.frames"})'
    )
    assert (meta["threshold"], meta["activationThreshold"]) == ("0.5", "0.1")
    assert all(isinstance(v, str) for v in meta.values())
    # The query reads what the inferencer's /metrics exports.
    names = metric_names(meta["query"])
    assert names == {"framebus_inferencer_consumer_lag_seconds"}
    assert names <= exported_metrics["inferencer"]


def test_keda_when_scaled_to_zero_then_the_kafka_trigger_wakes_it_and_no_series_reads_as_zero(
    helm: Helm, tmp_path: Path
) -> None:
    values = {"keda": {**KEDA_ON, "minReplicaCount": 0}}
    triggers = _triggers(helm.render([write_values(tmp_path, values)]))
    kafka = triggers["kafka"]["metadata"]
    assert kafka["activationLagThreshold"] == "0"  # one waiting frame activates it
    assert kafka["topic"] == "framebus.frames"
    # With no inferencer there is no lag series: 0, not a scaler error that blocks scaling.
    assert triggers["prometheus"]["metadata"]["ignoreNullValues"] == "true"


def test_keda_when_prometheus_trigger_off_then_message_lag_only_and_no_server_needed(
    helm: Helm, tmp_path: Path
) -> None:
    values = {"keda": {"enabled": True, "prometheus": {"enabled": False}}}
    assert set(_triggers(helm.render([write_values(tmp_path, values)]))) == {"kafka"}


def test_keda_when_query_and_threshold_set_then_rendered_as_given(
    helm: Helm, tmp_path: Path
) -> None:
    query = 'max(framebus_inferencer_consumer_lag_seconds{job="vision/fb"})'
    prometheus = {
        **KEDA_ON["prometheus"],
        "query": query,
        "threshold": 2,
        "activationThreshold": 1.5,
    }
    values = {"keda": {**KEDA_ON, "prometheus": prometheus}}
    meta = _triggers(helm.render([write_values(tmp_path, values)]))["prometheus"]["metadata"]
    assert (meta["query"], meta["threshold"], meta["activationThreshold"]) == (query, "2", "1.5")


def test_keda_when_rendered_then_the_tracker_keeps_its_kafka_trigger_only(
    rendered: dict[str, Rendered],
) -> None:
    assert set(_triggers(rendered["gpu-keda"], "tracker")) == {"kafka"}


def test_keda_when_prometheus_trigger_has_no_server_then_render_fails(helm: Helm) -> None:
    proc = helm.template_cmd(sets=["keda.enabled=true"])
    assert proc.returncode != 0
    assert "keda.prometheus.serverAddress is empty" in proc.stderr
    assert "keda.prometheus.enabled=false" in proc.stderr
