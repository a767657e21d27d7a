"""The alerts consumer in the chart (off by default) and in compose: `python -m framebus_alerts`
from the decoder image, its rules from a ConfigMap (compose: a config) mounted where FRAMEBUS_RULES
points, scaled by the lag of its group on the topic its rules read, up to the partition count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from framebus import settings as cfg
from framebus.topology import Topic, TopicSettings
from framebus_alerts.rules import load_rules
from framebus_alerts.service import source_of
from framebus_alerts.settings import AlertsSettings, AlertsSource
from tests.deploy.composeutil import bound_file, cpu_service, load_compose, service_env
from tests.deploy.crd_schemas import SCALED_OBJECT
from tests.deploy.helmutil import (
    ALERTS_ON,
    DOOR_COUNTER,
    KEDA_ON,
    Helm,
    Rendered,
    assert_off_the_gpu_pool,
    cpu_service_containers,
    env_of,
    process_env,
    write_values,
)

pytestmark = pytest.mark.deploy

FRAME_RULE = {"name": "person-in-zone", "classes": ["person"], "zone": [[0, 0], [9, 0], [9, 9]]}
# The Kafka connection of gpu-keda (SASL over TLS), the same in every pod.
KAFKA_VARIABLES = (
    "FRAMEBUS_BOOTSTRAP_SERVERS",
    "FRAMEBUS_SASL_USERNAME",
    "FRAMEBUS_SASL_PASSWORD",
    "FRAMEBUS_SSL_CA_LOCATION",
)
# The rules of the ci/ values files.
CI_RULES = {"gpu-keda": ["truck-enters-dock", "yard-gate-counter"], "cpu": ["lobby-crowd"]}


def _pod(result: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = result.deployment("alerts")["spec"]["template"]["spec"]
    return spec


def _mounted_rules(result: Rendered, root: Path) -> Path:
    """The rules file as the alerts pod sees it: its ConfigMap written out under `root`.

    Checks that FRAMEBUS_RULES names the one file of the ConfigMap volume, at its mount path.
    """
    pod = _pod(result)
    (mount,) = [m for m in result.container("alerts")["volumeMounts"] if m["name"] == "rules"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    config_map = result.one("ConfigMap", volume["configMap"]["name"])
    (key,) = config_map["data"]
    rules = Path(process_env(result.container("alerts"))["FRAMEBUS_RULES"])
    assert rules == Path(mount["mountPath"]) / key
    assert mount["readOnly"] is True
    local = root / rules.relative_to("/")
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(config_map["data"][key], encoding="utf-8")
    return local


# --- chart ---------------------------------------------------------------------------------


@pytest.mark.parametrize("values_name", ["default"])
def test_alerts_when_not_enabled_then_nothing_of_it_renders(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    for kind in ("Deployment", "ConfigMap", "Service", "PodDisruptionBudget", "ScaledObject"):
        assert not rendered[values_name].of_component(kind, "alerts"), kind


def test_alerts_when_enabled_then_it_runs_the_alerts_module_from_the_decoder_image(
    rendered: dict[str, Rendered],
) -> None:
    container, decoder_container = cpu_service_containers(rendered["gpu-keda"], "alerts")
    env = env_of(container)
    assert env["FRAMEBUS_ALERTS_GROUP"]["value"] == "framebus-alerts"
    assert env["FRAMEBUS_ALERTS_SOURCE"]["value"] == "tracks"
    # The app derives a unique transactional.id per pod; a fixed one would fence the replicas.
    assert "FRAMEBUS_TRANSACTIONAL_ID" not in env
    # The same Kafka connection and credentials as the other services.
    decoder_env = env_of(decoder_container)
    for name in KAFKA_VARIABLES:
        assert env[name] == decoder_env[name], name


@pytest.mark.parametrize("values_name", ["gpu-keda", "cpu"])
def test_alerts_when_rules_given_as_list_or_file_then_the_service_loads_the_mounted_file(
    rendered: dict[str, Rendered], values_name: str, tmp_path: Path
) -> None:
    """gpu-keda lists the rules, cpu gives a whole file as a string (`--set-file`)."""
    result = rendered[values_name]
    rules = load_rules(_mounted_rules(result, tmp_path))
    assert [r.name for r in rules] == CI_RULES[values_name]
    settings = cfg.load(AlertsSettings, process_env(result.container("alerts")))
    # The source the chart gives is one the rules can run on (object rules need tracks).
    assert source_of(settings, rules) is AlertsSource.TRACKS


def test_alerts_when_rules_change_then_the_pods_roll(helm: Helm, tmp_path: Path) -> None:
    def checksum(rules: list[dict[str, Any]]) -> str:
        values = {"alerts": {"enabled": True, "rules": rules}}
        result = helm.render([write_values(tmp_path, values)])
        annotations = result.deployment("alerts")["spec"]["template"]["metadata"]["annotations"]
        value: str = annotations["checksum/rules"]
        return value

    moved = {**DOOR_COUNTER, "line": [[600, 710], [1300, 710]]}
    assert checksum([DOOR_COUNTER]) == checksum([DOOR_COUNTER])
    assert checksum([DOOR_COUNTER]) != checksum([moved])


def test_alerts_when_knobs_set_then_the_app_loads_exactly_those_values(
    helm: Helm, tmp_path: Path
) -> None:
    values = {
        "http": {"port": 9000},
        "alerts": {
            "enabled": True,
            "rules": [FRAME_RULE],
            "source": "detections",
            "consumerGroup": "site-alerts",
        },
        "kafka": {
            "topics": {"detections": "s.detections", "alerts": "s.alerts"},
            "partitions": {"alerts": 5},
        },
    }
    result = helm.render([write_values(tmp_path, values)])
    loaded = cfg.load(AlertsSettings, process_env(result.container("alerts")))
    assert (loaded.alerts_group, loaded.alerts_source) == ("site-alerts", AlertsSource.DETECTIONS)
    assert (loaded.http_port, loaded.alerts_partitions) == (9000, 5)
    assert (loaded.topics.detections_topic, loaded.topics.alerts_topic) == (
        "s.detections",
        "s.alerts",
    )
    # Frame rules alone may read the detections topic.
    rules = load_rules(_mounted_rules(result, tmp_path))
    assert source_of(loaded, rules) is AlertsSource.DETECTIONS
    assert loaded.transactional_id is None


@pytest.mark.parametrize("values_name", ["gpu-keda", "cpu"])
def test_alerts_when_a_gpu_pool_is_configured_then_it_is_not_scheduled_there(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    assert_off_the_gpu_pool(rendered[values_name], "alerts")


def test_alerts_when_rendered_then_service_monitor_and_pdb_select_its_pods(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    deployment = result.deployment("alerts")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (service,) = result.of_component("Service", "alerts")
    (monitor,) = result.of_component("ServiceMonitor", "alerts")
    (pdb,) = result.of_component("PodDisruptionBudget", "alerts")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    container = result.container("alerts")
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == (
        "8080"
    )


@pytest.mark.parametrize(("source", "topic"), [("tracks", "s.tracks"), ("detections", "s.dets")])
def test_alerts_keda_when_enabled_then_scales_on_its_group_lag_on_the_topic_it_reads(
    helm: Helm, tmp_path: Path, source: str, topic: str
) -> None:
    values = {
        "keda": KEDA_ON,
        "alerts": {**ALERTS_ON, "rules": [FRAME_RULE], "source": source},
        "kafka": {"topics": {"tracks": "s.tracks", "detections": "s.dets"}},
    }
    result = helm.render([write_values(tmp_path, values)])
    deployment = result.deployment("alerts")
    scaled = result.scaled_object("alerts")
    jsonschema.validate(scaled, SCALED_OBJECT)
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (trigger,) = spec["triggers"]
    meta = trigger["metadata"]
    loaded = cfg.load(AlertsSettings, process_env(result.container("alerts")))
    assert trigger["type"] == "kafka"
    assert meta["consumerGroup"] == loaded.alerts_group
    assert meta["topic"] == topic == loaded.topics.name(Topic(source))
    assert meta["offsetResetPolicy"] == "earliest"  # an empty group reads from the start
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 2)
    assert "replicas" not in deployment["spec"]


def test_alerts_keda_when_ci_values_then_it_shares_the_trigger_authentication(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    (auth,) = result.of_kind("TriggerAuthentication")
    (trigger,) = result.scaled_object("alerts")["spec"]["triggers"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert (trigger["metadata"]["sasl"], trigger["metadata"]["tls"]) == ("scram_sha512", "enable")
    assert result.scaled_object("alerts")["spec"]["maxReplicaCount"] == 4


def test_alerts_keda_when_switched_off_then_fixed_replicas_and_no_scaled_object(
    helm: Helm, tmp_path: Path
) -> None:
    values = {"keda": KEDA_ON, "alerts": {**ALERTS_ON, "replicas": 3, "keda": {"enabled": False}}}
    result = helm.render([write_values(tmp_path, values)])
    assert result.deployment("alerts")["spec"]["replicas"] == 3
    assert not result.of_component("ScaledObject", "alerts")
    assert result.of_component("ScaledObject", "tracker")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"alerts": {"enabled": True}},
            "alerts.enabled is true but alerts.rules is empty",
        ),
        (
            {"alerts": {"enabled": True, "rules": "rules: []\n"}},
            "alerts.rules is a string but not a rules file",
        ),
        (
            {"alerts": {"enabled": True, "rules": "- name: a\n"}},
            "alerts.rules is a string but not a rules file",
        ),
        (
            {"alerts": ALERTS_ON, "tracker": {"enabled": False}},
            "alerts.source is tracks but tracker.enabled is false",
        ),
        (
            {"alerts": {**ALERTS_ON, "replicas": 5}, "kafka": {"partitions": {"detections": 4}}},
            "alerts.replicas (5) is larger than kafka.partitions.detections (4)",
        ),
        (
            {
                "keda": KEDA_ON,
                "alerts": {**ALERTS_ON, "keda": {"maxReplicaCount": 7}},
                "kafka": {"partitions": {"detections": 6}},
            },
            "alerts.keda.maxReplicaCount (7) is larger than kafka.partitions.detections (6)",
        ),
        (
            {"keda": KEDA_ON, "alerts": {**ALERTS_ON, "keda": {"minReplicaCount": 3}}},
            "alerts.keda.minReplicaCount (3) is larger than alerts.keda.maxReplicaCount (2)",
        ),
    ],
)
def test_alerts_when_values_cannot_work_then_render_fails_saying_what_to_change(
    helm: Helm, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    assert message in helm.render_fails([write_values(tmp_path, values)])


def test_alerts_when_frame_rules_read_detections_then_it_runs_without_the_tracker(
    helm: Helm, tmp_path: Path
) -> None:
    values = {
        "alerts": {**ALERTS_ON, "rules": [FRAME_RULE], "source": "detections"},
        "tracker": {"enabled": False},
    }
    result = helm.render([write_values(tmp_path, values)])
    assert not result.deployments("tracker")
    assert process_env(result.container("alerts"))["FRAMEBUS_ALERTS_SOURCE"] == "detections"


# --- compose -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


def test_alerts_when_compose_runs_then_on_the_cpu_after_topics_on_8084(
    compose: dict[str, Any],
) -> None:
    alerts = cpu_service(compose, "alerts")
    assert set(alerts["depends_on"]) == {"kafka", "topics"}  # it reads the tracks from Kafka
    assert alerts["ports"] == ["127.0.0.1:8084:8080"]
    env = service_env(alerts)
    assert env["FRAMEBUS_HTTP_PORT"] == "8080"
    assert "127.0.0.1:8080/readyz" in " ".join(alerts["healthcheck"]["test"])
    assert "FRAMEBUS_TRANSACTIONAL_ID" not in env  # <group>-<hostname>: unique per container


def test_alerts_when_compose_runs_then_its_rules_load_and_name_the_stack_cameras(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    alerts = compose["services"]["alerts"]
    settings = cfg.load(AlertsSettings, service_env(alerts))
    rules = load_rules(bound_file(alerts, str(settings.rules)))
    decoder = compose["services"]["decoder"]
    cameras_file = bound_file(decoder, decoder["environment"]["FRAMEBUS_CAMERAS_FILE"])
    cameras = yaml.safe_load(cameras_file.read_text(encoding="utf-8"))["cameras"]
    assert {r.camera for r in rules} <= {"*"} | {c["id"] for c in cameras}
    assert source_of(settings, rules) is AlertsSource.TRACKS


def test_alerts_when_chart_and_compose_then_they_read_the_same_topics_and_group(
    helm: Helm, tmp_path: Path, compose: dict[str, Any]
) -> None:
    result = helm.render([write_values(tmp_path, {"alerts": ALERTS_ON})])
    chart = cfg.load(AlertsSettings, process_env(result.container("alerts")))
    local = cfg.load(AlertsSettings, service_env(compose["services"]["alerts"]))
    assert chart.topics == local.topics == TopicSettings()
    assert (chart.alerts_group, chart.alerts_source) == (local.alerts_group, local.alerts_source)
    assert chart.alerts_partitions == local.alerts_partitions
