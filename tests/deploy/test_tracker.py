"""The tracker in the chart: a CPU Deployment off the GPU pool, scaled by the lag of its group on
the detections topic up to the partition count, and its topics created before it starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framebus import settings as cfg
from framebus.topology import TopicSettings
from framebus_tracker.settings import TrackerSettings
from tests.deploy.conftest import TopicsStep
from tests.deploy.helmutil import (
    ALERTS_ON,
    KEDA_ON,
    Helm,
    Rendered,
    assert_off_the_gpu_pool,
    containers_of,
    cpu_service_containers,
    env_of,
    process_env,
    write_values,
)

pytestmark = pytest.mark.deploy


def _topics_container(result: Rendered) -> dict[str, Any]:
    """The topic Job's only container, `framebus topics create` (no init step)."""
    (job,) = result.of_kind("Job")
    (container,) = containers_of(job["spec"]["template"]["spec"])
    return container


def _topics_argv(container: dict[str, Any]) -> list[str]:
    return [*container["command"], *container["args"]]


def test_tracker_when_rendered_then_it_runs_the_tracker_module_from_the_decoder_image(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    container, _ = cpu_service_containers(rendered[values_name], "tracker")
    env = env_of(container)
    assert env["FRAMEBUS_DETECTIONS_TOPIC"]["value"] == "framebus.detections"
    assert env["FRAMEBUS_TRACKS_TOPIC"]["value"] == "framebus.tracks"
    assert env["FRAMEBUS_TRACKER_CHANGELOG_TOPIC"]["value"] == "framebus.tracker-changelog"
    assert env["FRAMEBUS_TRACKER_GROUP"]["value"] == "framebus-tracker"
    # The app derives a unique transactional.id per pod; a fixed one would fence the replicas.
    assert "FRAMEBUS_TRANSACTIONAL_ID" not in env


def test_tracker_when_knobs_set_then_the_app_loads_exactly_those_values(
    helm: Helm, tmp_path: Path
) -> None:
    values = {
        "tracker": {
            "consumerGroup": "trk",
            "minHits": 3,
            "maxLostS": 1.5,
            "matchBuffer": 0.25,
            "minMatchIou": 0.1,
        },
        "kafka": {"topics": {"tracks": "t.tracks", "trackerChangelog": "t.changelog"}},
    }
    result = helm.render([write_values(tmp_path, values)])
    loaded = cfg.load(TrackerSettings, process_env(result.container("tracker")))
    assert (loaded.tracker_group, loaded.min_hits, loaded.max_lost_s) == ("trk", 3, 1.5)
    assert (loaded.match_buffer, loaded.min_match_iou) == (0.25, 0.1)
    assert (loaded.topics.tracks_topic, loaded.topics.tracker_changelog_topic) == (
        "t.tracks",
        "t.changelog",
    )
    assert loaded.http_port == 8080


@pytest.mark.parametrize("values_name", ["default", "gpu-keda"])
def test_tracker_when_a_gpu_pool_is_configured_then_it_is_not_scheduled_there(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    assert_off_the_gpu_pool(rendered[values_name], "tracker")
    assert rendered[values_name].container("tracker")["resources"]["limits"]["cpu"] == "1"


def test_tracker_when_rendered_then_service_monitor_and_pdb_select_its_pods(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    labels = result.deployment("tracker")["spec"]["template"]["metadata"]["labels"]
    (service,) = result.of_component("Service", "tracker")
    (monitor,) = result.of_component("ServiceMonitor", "tracker")
    (pdb,) = result.of_component("PodDisruptionBudget", "tracker")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_tracker_keda_when_enabled_then_scales_on_its_group_lag_on_detections(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    deployment = result.deployment("tracker")
    env = env_of(result.container("tracker"))
    spec = result.scaled_object("tracker")["spec"]
    assert spec["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (trigger,) = spec["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "kafka"
    assert meta["consumerGroup"] == env["FRAMEBUS_TRACKER_GROUP"]["value"]
    assert meta["topic"] == env["FRAMEBUS_DETECTIONS_TOPIC"]["value"]
    assert meta["allowIdleConsumers"] == "false"
    assert spec["maxReplicaCount"] <= 12  # kafka.partitions.detections of gpu-keda
    assert "replicas" not in deployment["spec"]


def test_tracker_keda_when_switched_off_then_fixed_replicas_and_no_scaled_object(
    helm: Helm, tmp_path: Path
) -> None:
    values = {"keda": KEDA_ON, "tracker": {"replicas": 3, "keda": {"enabled": False}}}
    result = helm.render([write_values(tmp_path, values)])
    assert result.deployment("tracker")["spec"]["replicas"] == 3
    assert not result.of_component("ScaledObject", "tracker")
    assert result.of_component("ScaledObject", "inferencer")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {
                "keda": KEDA_ON,
                "tracker": {"keda": {"maxReplicaCount": 7}},
                "kafka": {"partitions": {"detections": 6}},
            },
            "tracker.keda.maxReplicaCount (7) is larger than kafka.partitions.detections (6)",
        ),
        (
            {"tracker": {"replicas": 5}, "kafka": {"partitions": {"detections": 4}}},
            "tracker.replicas (5) is larger than kafka.partitions.detections (4)",
        ),
        (
            {
                "keda": KEDA_ON,
                "tracker": {"keda": {"minReplicaCount": 4, "maxReplicaCount": 2}},
            },
            "tracker.keda.minReplicaCount (4) is larger than tracker.keda.maxReplicaCount (2)",
        ),
    ],
)
def test_tracker_replicas_when_more_than_detections_partitions_then_render_fails(
    helm: Helm, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    assert message in helm.render_fails([write_values(tmp_path, values)])


def test_tracker_when_disabled_then_none_of_its_objects_render_and_the_topics_stay(
    helm: Helm, tmp_path: Path
) -> None:
    values = {"keda": KEDA_ON, "tracker": {"enabled": False}}
    result = helm.render([write_values(tmp_path, values)])
    for kind in ("Deployment", "Service", "PodDisruptionBudget", "ScaledObject"):
        assert not result.of_component(kind, "tracker"), kind
    # The topic Job creates the whole pipeline's topics whichever services run.
    enabled = helm.render([write_values(tmp_path, {"keda": KEDA_ON}, "enabled.yaml")])
    assert _topics_container(result) == _topics_container(enabled)


def test_topics_job_when_run_then_it_creates_tracks_and_compacted_changelogs(
    rendered: dict[str, Rendered], run_topics_step: TopicsStep
) -> None:
    """Run the Job's command line through the CLI with the rendered env, Kafka's admin stubbed."""
    container = _topics_container(rendered["gpu-keda"])
    created = run_topics_step(_topics_argv(container), process_env(container))

    by_name = {s.name: s for s in created}
    changelogs = ("framebus.tracker-changelog", "framebus.alerts-changelog")
    assert {"framebus.tracks", "framebus.alerts", *changelogs} < set(by_name)
    detections = by_name["framebus.detections"]
    for name in changelogs:
        changelog = by_name[name]
        assert changelog.config["cleanup.policy"] == "compact", name
        # gpu-keda: 24 frames and 12 detections partitions; the changelogs follow detections.
        assert changelog.partitions == by_name["framebus.tracks"].partitions == 12, name
        assert changelog.partitions == detections.partitions, name
        assert changelog.replication_factor == detections.replication_factor, name
    assert "cleanup.policy" not in by_name["framebus.tracks"].config
    assert by_name["framebus.alerts"].partitions == 3  # kafka.partitions.alerts


def test_topics_job_when_topics_renamed_then_it_creates_the_names_every_service_reads(
    helm: Helm, tmp_path: Path, run_topics_step: TopicsStep
) -> None:
    topics = {
        "tracks": "t.tracks",
        "trackerChangelog": "t.changelog",
        "alerts": "t.alerts",
        "alertsChangelog": "t.alerts-changelog",
    }
    values = {"kafka": {"topics": topics}, "alerts": ALERTS_ON, "live": {"enabled": True}}
    result = helm.render([write_values(tmp_path, values)])
    container = _topics_container(result)
    job_names = cfg.load(TopicSettings, process_env(container))
    components = {"decoder", "inferencer", "tracker", "alerts", "live"}
    seen = set()
    for component, pod_spec in result.pod_specs():
        for c in pod_spec["containers"]:
            assert cfg.load(TopicSettings, process_env(c)) == job_names, component
        seen.add(component)
    assert components < seen
    created = {s.name for s in run_topics_step(_topics_argv(container), process_env(container))}
    assert set(topics.values()) < created
    assert set(job_names.env().values()) == created
