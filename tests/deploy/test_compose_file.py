"""compose.yaml follows the Compose specification and wires the stack the way docs/deploy.md says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from framebus import settings as cfg
from framebus.topology import TopicSettings
from framebus_alerts.settings import AlertsSettings
from tests.deploy.composeutil import (
    COMPOSE,
    bound_file,
    cpu_service,
    load_compose,
    service_argv,
    service_env,
)
from tests.deploy.conftest import TopicsStep
from tests.deploy.helmutil import REPO, Rendered, process_env

pytestmark = pytest.mark.deploy

OTEL_CONFIG = REPO / "deploy" / "otel-collector.yaml"


def _check_compose_schema(path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with its vendored (offline) copy of the Compose specification schema."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


def test_compose_when_checked_then_it_matches_the_compose_spec_schema() -> None:
    proc = _check_compose_schema(COMPOSE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_schema_check_when_a_condition_is_misspelt_then_it_fails(tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    broken.write_text(
        "services:\n  a:\n    image: busybox:1.36\n    depends_on:\n"
        "      b: {condition: service_ready}\n  b:\n    image: busybox:1.36\n",
        encoding="utf-8",
    )
    proc = _check_compose_schema(broken)
    assert proc.returncode != 0
    assert "services.a.depends_on" in proc.stdout


def test_compose_when_any_service_then_its_image_is_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and tag, f"{name}: {image} has no tag"
        assert tag != "latest", f"{name}: {image} is not pinned"


def test_kafka_when_started_then_kraft_with_raised_message_limits(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"] == "apache/kafka:4.1.1"
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_MESSAGE_MAX_BYTES"] == 10485760
    assert env["KAFKA_REPLICA_FETCH_MAX_BYTES"] == 10485760
    assert "healthcheck" in kafka


def test_services_when_they_need_kafka_then_they_wait_for_health_and_topics(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "--wait-s" in services["topics"]["command"]  # for tools that do not wait on health
    for name in ("decoder", "inferencer", "inferencer-cpu", "tracker", "alerts", "clips", "live"):
        deps = services[name]["depends_on"]
        assert deps["topics"]["condition"] == "service_completed_successfully", name
        assert deps["kafka"]["condition"] == "service_healthy", name
        assert "healthcheck" in services[name], name
    assert services["decoder"]["depends_on"]["rtsp-camera"]["condition"] == "service_healthy"
    # every service_healthy dependency has a health check to wait for
    for name, service in services.items():
        for dep, rule in (service.get("depends_on") or {}).items():
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits on {dep}'s missing check"


def test_inferencer_when_gpu_profile_then_it_reserves_a_gpu_and_cpu_variant_does_not(
    compose: dict[str, Any],
) -> None:
    gpu = compose["services"]["inferencer"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    cpu = compose["services"]["inferencer-cpu"]
    assert cpu["profiles"] == ["cpu"]
    assert "deploy" not in cpu
    assert cpu["environment"]["FRAMEBUS_PROVIDERS"] == "cpu"
    assert cpu["environment"]["FRAMEBUS_REQUIRE_GPU"] == "false"


def test_tracing_when_stack_runs_then_services_export_to_collector_and_collector_to_jaeger(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    # Off unless asked (OTEL_TRACES_EXPORTER=otlp with the `tracing` profile).
    assert services["otel-collector"]["profiles"] == services["jaeger"]["profiles"] == ["tracing"]
    assert services["otel-collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    for name in ("decoder", "inferencer", "inferencer-cpu", "tracker", "alerts"):
        env = services[name]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
        assert env["OTEL_TRACES_EXPORTER"] == "none"
        assert env["OTEL_SERVICE_NAME"].startswith("framebus-")
    mounts = services["otel-collector"]["volumes"]
    assert any(m.startswith("./deploy/otel-collector.yaml:") for m in mounts)


def test_otel_collector_config_when_loaded_then_pipelines_use_only_defined_components() -> None:
    config = yaml.safe_load(OTEL_CONFIG.read_text(encoding="utf-8"))
    pipeline = config["service"]["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        for component in pipeline[kind]:
            assert component in config[kind], f"{kind}: {component} is not defined"
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == "0.0.0.0:4318"
    assert config["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"


def test_decoder_when_started_then_its_camera_file_lists_the_sample_camera(
    compose: dict[str, Any],
) -> None:
    decoder = compose["services"]["decoder"]
    path = bound_file(decoder, decoder["environment"]["FRAMEBUS_CAMERAS_FILE"])
    cameras = yaml.safe_load(path.read_text(encoding="utf-8"))["cameras"]
    assert {c["url"] for c in cameras} == {"rtsp://rtsp-camera:8554/sample"}
    assert len({c["id"] for c in cameras}) == len(cameras)
    assert all(c["video"] is True for c in cameras)  # clips are cut from the kept video


def test_tracker_when_started_then_it_runs_on_the_cpu_after_its_topics_exist(
    compose: dict[str, Any],
) -> None:
    tracker = cpu_service(compose, "tracker")
    assert set(tracker["depends_on"]) == {"kafka", "topics"}
    env = tracker["environment"]
    assert env["FRAMEBUS_TRACKER_GROUP"] == "framebus-tracker"
    assert "FRAMEBUS_TRANSACTIONAL_ID" not in env  # <group>-<hostname>: unique per container
    assert tracker["ports"] == ["127.0.0.1:8083:8080"]


def _flag(argv: list[str], name: str) -> int:
    return int(argv[argv.index(name) + 1])


def test_topics_step_when_run_then_it_creates_every_topic_each_service_names(
    compose: dict[str, Any], run_topics_step: TopicsStep
) -> None:
    """Run compose's topics step through the CLI with its env, Kafka's admin stubbed."""
    services = compose["services"]
    argv = service_argv(services["topics"])
    by_name = {s.name: s for s in run_topics_step(argv, service_env(services["topics"]))}

    readers = [s for s in services.values() if s["image"].startswith("framebus/")]
    for service in readers:
        names = cfg.load(TopicSettings, service_env(service))
        assert set(names.env().values()) <= set(by_name), service_argv(service)
    topics = cfg.load(TopicSettings, service_env(services["tracker"]))
    detections = _flag(argv, "--detections-partitions")
    for changelog in (topics.tracker_changelog_topic, topics.alerts_changelog_topic):
        assert by_name[changelog].config["cleanup.policy"] == "compact"
        assert by_name[changelog].partitions == detections
    assert by_name[topics.tracks_topic].partitions == detections
    alerts = cfg.load(AlertsSettings, service_env(services["alerts"]))
    assert by_name[topics.alerts_topic].partitions == alerts.alerts_partitions


def test_topics_step_when_compose_and_chart_then_they_run_the_same_step(
    compose: dict[str, Any], rendered: dict[str, Rendered]
) -> None:
    """Both run `framebus topics create` with the same flags and the same topic names."""
    (job,) = rendered["default"].of_kind("Job")
    (chart_step,) = job["spec"]["template"]["spec"]["containers"]
    assert "initContainers" not in job["spec"]["template"]["spec"]
    compose_step = compose["services"]["topics"]
    chart_argv = [*chart_step["command"], *chart_step["args"]]
    compose_argv = service_argv(compose_step)
    assert chart_argv[:3] == compose_argv[:3] == ["framebus", "topics", "create"]
    flags = {"--frames-partitions", "--detections-partitions", "--alerts-partitions"}
    assert flags <= set(chart_argv) and flags <= set(compose_argv)
    assert cfg.load(TopicSettings, process_env(chart_step)) == cfg.load(
        TopicSettings, service_env(compose_step)
    )


def test_clips_when_stack_runs_then_it_writes_to_a_volume_live_serves_read_only(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    clips, live, alerts = services["clips"], services["live"], services["alerts"]
    assert clips["image"] == alerts["image"] and clips["build"] == alerts["build"]
    assert service_argv(clips) == ["python", "-m", "framebus_clips"]
    clips_dir = service_env(clips)["FRAMEBUS_CLIPS_DIR"]
    assert clips["volumes"] == [f"clips:{clips_dir}"]
    # The records' file:// URIs name clips_dir: live mounts the volume at the same path.
    assert f"clips:{clips_dir}:ro" in live["volumes"]
    assert service_env(live)["FRAMEBUS_CLIPS_DIR"] == clips_dir
    assert "clips" in compose["volumes"]
    assert clips["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert "healthcheck" in clips and clips["read_only"] is True


def test_live_when_stack_runs_then_it_asks_the_password_of_its_config(
    compose: dict[str, Any],
) -> None:
    live = compose["services"]["live"]
    env = service_env(live)
    assert env["FRAMEBUS_AUTH"] == "password"
    # The user's own file: no default password ships (secrets/ is git-ignored).
    path = bound_file(live, env["FRAMEBUS_PASSWORD_FILE"])
    assert path == REPO / "secrets" / "live-password"
    assert "configs" not in compose
