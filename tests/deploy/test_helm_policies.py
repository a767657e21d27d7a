"""What the rendered chart promises an operator: GPUs where they belong, probes, no leaked
secrets, hardened pods, autoscaling bounded by partitions, topics created before the services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helmutil import (
    CI_VALUES,
    KEDA_ON,
    Helm,
    Rendered,
    containers_of,
    env_of,
    process_env,
    write_values,
)

pytestmark = pytest.mark.deploy

GPU = "nvidia.com/gpu"
FAKE_PASSWORD = "fake-sasl-pw-3f9c1e"  # noqa: S105 - a marker string, not a credential


def _only_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec["containers"]
    return container


def _uses_gpu(pod_spec: dict[str, Any]) -> bool:
    return any(
        GPU in (c.get("resources", {}).get(part) or {})
        for c in containers_of(pod_spec)
        for part in ("limits", "requests")
    )


def _gpu_tolerations(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in pod_spec.get("tolerations", []) if t.get("key") == GPU]


# --- GPU placement -------------------------------------------------------------------------


@pytest.mark.parametrize("values_name", ["default", "gpu-keda"])
def test_gpu_when_enabled_then_only_the_inferencer_requests_and_tolerates_it(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    result = rendered[values_name]
    seen = set()
    for component, pod_spec in result.pod_specs():
        seen.add(component)
        if component == "inferencer":
            limits = _only_container(pod_spec)["resources"]["limits"]
            assert limits[GPU] == 1
            assert _gpu_tolerations(pod_spec)
        else:
            assert not _uses_gpu(pod_spec), component
            assert not _gpu_tolerations(pod_spec), component
            assert "runtimeClassName" not in pod_spec, component
            assert not any("nvidia" in k for k in pod_spec.get("nodeSelector", {})), component
    assert {"inferencer", "decoder", "topics", "tracker"} <= seen


def test_gpu_pool_values_when_rendered_then_inferencer_gets_runtime_class_and_node_selector(
    rendered: dict[str, Rendered],
) -> None:
    pod = rendered["gpu-keda"].deployment("inferencer")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    env = env_of(_only_container(pod))
    assert env["FRAMEBUS_PROVIDERS"]["value"] == "tensorrt,cuda,cpu"
    assert env["FRAMEBUS_REQUIRE_GPU"]["value"] == "true"
    assert env["FRAMEBUS_MAX_BATCH"]["value"] == "16"
    assert env["FRAMEBUS_GPU_MEM_LIMIT_BYTES"]["value"] == "8589934592"


def test_cpu_values_when_rendered_then_nothing_asks_for_a_gpu(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["cpu"]
    assert GPU not in result.text
    pod = result.deployment("inferencer")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in pod
    assert not pod.get("tolerations")
    env = env_of(_only_container(pod))
    assert env["FRAMEBUS_PROVIDERS"]["value"] == "cpu"
    assert env["FRAMEBUS_REQUIRE_GPU"]["value"] == "false"


# --- probes, ports, telemetry --------------------------------------------------------------


def test_probes_when_any_values_then_every_service_probes_healthz_and_readyz_on_the_http_port(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    result = rendered[values_name]
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in result.docs}
    assert {"decoder", "inferencer", "tracker"} <= components
    for component in sorted(components - {"live"}):  # live: test_live.py (its Service's port)
        for deployment in result.deployments(component):
            container = _only_container(deployment["spec"]["template"]["spec"])
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            http_port = int(env_of(container)["FRAMEBUS_HTTP_PORT"]["value"])
            assert ports["http"] == http_port == 8080
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            assert annotations["prometheus.io/scrape"] == "true"
            assert annotations["prometheus.io/port"] == str(http_port)
            assert annotations["prometheus.io/path"] == "/metrics"


def test_inferencer_when_engine_build_is_slow_then_a_startup_probe_holds_off_liveness(
    rendered: dict[str, Rendered],
) -> None:
    container = rendered["default"].container("inferencer")
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/healthz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600


def test_otel_when_enabled_then_standard_sdk_variables_are_set(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    for component, service in (
        ("decoder", "framebus-decoder"),
        ("inferencer", "framebus-inferencer"),
        ("tracker", "framebus-tracker"),
        ("alerts", "framebus-alerts"),
    ):
        assert result.deployments(component), component
        for deployment in result.deployments(component):
            env = env_of(_only_container(deployment["spec"]["template"]["spec"]))
            assert env["OTEL_SERVICE_NAME"]["value"] == service
            assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == (
                "http://otel-collector.observability:4318"
            )
            assert env["OTEL_TRACES_SAMPLER"]["value"] == "parentbased_traceidratio"
            assert env["OTEL_TRACES_SAMPLER_ARG"]["value"] == "0.01"
            assert "OTEL_SDK_DISABLED" not in env


def test_otel_when_disabled_then_the_sdk_is_switched_off(rendered: dict[str, Rendered]) -> None:
    env = env_of(rendered["default"].container("inferencer"))
    assert env["OTEL_SDK_DISABLED"]["value"] == "true"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env


# --- security ------------------------------------------------------------------------------


def test_pods_when_any_values_then_non_root_read_only_and_bounded(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    for component, pod_spec in rendered[values_name].pod_specs():
        assert pod_spec["securityContext"]["runAsNonRoot"] is True, component
        assert pod_spec["securityContext"]["runAsUser"] == 10001, component
        assert pod_spec["automountServiceAccountToken"] is False, component
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        for container in containers_of(pod_spec):
            where = f"{component}/{container['name']}"
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp, f"{where}: /tmp is not mounted"
            assert "emptyDir" in volumes[tmp[0]["name"]], where
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), where
            assert {"cpu", "memory"} <= set(resources["limits"]), where


def test_pdb_when_enabled_then_each_component_has_one_selecting_its_pods(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    result = rendered[values_name]
    pdbs = {
        p["metadata"]["labels"]["app.kubernetes.io/component"]: p
        for p in result.of_kind("PodDisruptionBudget")
    }
    # One per component but the live page (one pod serving a page, nothing to keep running).
    deployed = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in result.docs}
    assert set(pdbs) == deployed & {"decoder", "inferencer", "tracker", "alerts"}
    assert {"decoder", "inferencer", "tracker"} <= set(pdbs)
    for component, pdb in pdbs.items():
        selector = pdb["spec"]["selector"]["matchLabels"]
        for deployment in result.deployments(component):
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items()


# --- secrets -------------------------------------------------------------------------------


def test_sasl_when_enabled_then_credentials_come_only_from_secret_key_refs(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    for component, pod_spec in result.pod_specs():
        for container in containers_of(pod_spec):
            env = env_of(container)
            if container["name"] == "fetch-model":
                continue
            for name in ("FRAMEBUS_SASL_USERNAME", "FRAMEBUS_SASL_PASSWORD"):
                assert "value" not in env[name], f"{component}: {name} in clear"
                ref = env[name]["valueFrom"]["secretKeyRef"]
                assert ref["name"] == "framebus-kafka-credentials"
            assert env["FRAMEBUS_SSL_CA_LOCATION"]["value"].startswith("/etc/framebus/kafka-tls/")
    for config_map in result.of_kind("ConfigMap"):
        text = yaml.safe_dump(config_map["data"]).lower()
        assert "password" not in text and "secret" not in text
    assert not result.of_kind("Secret"), "the chart must not create Secrets from values"


@pytest.mark.parametrize(
    "leak",
    [
        f"kafka.sasl.password={FAKE_PASSWORD}",
        f"kafka.password={FAKE_PASSWORD}",
        f"password={FAKE_PASSWORD}",
        "inferencer.extraEnv[0].name=FRAMEBUS_SASL_PASSWORD,"
        f"inferencer.extraEnv[0].value={FAKE_PASSWORD}",
        f"decoder.extraEnv[0].name=KAFKA_SECRET,decoder.extraEnv[0].value={FAKE_PASSWORD}",
        "decoder.cameras[0].id=cam-1,"
        f"decoder.cameras[0].url=rtsp://admin:{FAKE_PASSWORD}@cam-1.example/stream",
    ],
)
def test_secret_when_put_in_values_then_it_is_refused_and_never_rendered(
    helm: Helm, leak: str
) -> None:
    proc = helm.template_cmd(values=[CI_VALUES["gpu-keda"]], sets=[leak])
    assert FAKE_PASSWORD not in proc.stdout
    assert proc.returncode != 0, "a clear-text secret in values was accepted"
    assert FAKE_PASSWORD not in proc.stderr, "the error message repeats the secret"


def test_camera_with_password_when_shard_reads_a_secret_then_no_config_map_is_rendered(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    (gate,) = [
        d
        for d in result.deployments("decoder")
        if d["metadata"]["labels"]["framebus.io/shard"] == "gate"
    ]
    volumes = {v["name"]: v for v in gate["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cameras"]["secret"]["secretName"] == "framebus-cameras-gate"
    names = {c["metadata"]["name"] for c in result.of_kind("ConfigMap")}
    assert not any(name.endswith("-gate") for name in names)


# --- KEDA and partitions -------------------------------------------------------------------


def test_keda_when_enabled_then_scaled_object_targets_the_inferencer_group_and_topic(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    deployment = result.deployment("inferencer")
    env = env_of(_only_container(deployment["spec"]["template"]["spec"]))
    scaled = result.scaled_object("inferencer")
    spec = scaled["spec"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 24)
    # The Kafka trigger on message lag, and the Prometheus one on time (test_keda_time.py).
    assert [t["type"] for t in spec["triggers"]] == ["kafka", "prometheus"]
    trigger = spec["triggers"][0]
    meta = trigger["metadata"]
    assert meta["bootstrapServers"] == env["FRAMEBUS_BOOTSTRAP_SERVERS"]["value"]
    assert meta["consumerGroup"] == env["FRAMEBUS_CONSUMER_GROUP"]["value"]
    assert meta["topic"] == env["FRAMEBUS_FRAMES_TOPIC"]["value"]
    assert meta["lagThreshold"] == "200"
    assert meta["allowIdleConsumers"] == "false"
    assert meta["sasl"] == "scram_sha512"
    assert meta["tls"] == "enable"
    assert all(isinstance(v, str) for v in meta.values())
    # KEDA owns the replica count; a rendered `replicas` would fight it on every upgrade.
    assert "replicas" not in deployment["spec"]


def test_keda_when_sasl_then_trigger_authentication_references_the_same_secrets(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    scaled_objects = result.of_kind("ScaledObject")
    assert len(scaled_objects) == 3  # the inferencer's, the tracker's and alerts' share one
    (auth,) = result.of_kind("TriggerAuthentication")
    for scaled in scaled_objects:
        trigger = scaled["spec"]["triggers"][0]
        assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {
        "username": ("framebus-kafka-credentials", "username"),
        "password": ("framebus-kafka-credentials", "password"),
        "ca": ("framebus-kafka-ca", "ca.crt"),
    }


def test_keda_when_max_replicas_within_partitions_then_rendered(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    result = rendered[values_name]
    # Each component's topic: frames for the inferencer, detections for the tracker, tracks
    # (created with the detections count) for alerts.
    flag = {
        "inferencer": "--frames-partitions",
        "tracker": "--detections-partitions",
        "alerts": "--detections-partitions",
    }
    for scaled in result.of_kind("ScaledObject"):
        component = scaled["metadata"]["labels"]["app.kubernetes.io/component"]
        (job,) = result.of_kind("Job")
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        partitions = int(args[args.index(flag[component]) + 1])
        assert scaled["spec"]["maxReplicaCount"] <= partitions, component


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {
                "keda": {"enabled": True, "maxReplicaCount": 13},
                "kafka": {"partitions": {"frames": 12}},
            },
            "keda.maxReplicaCount (13) is larger than kafka.partitions.frames (12)",
        ),
        (
            {
                "keda": {"enabled": False},
                "inferencer": {"replicas": 7},
                "kafka": {"partitions": {"frames": 6}},
            },
            "inferencer.replicas (7) is larger than kafka.partitions.frames (6)",
        ),
        (
            {"keda": {"enabled": True, "minReplicaCount": 5, "maxReplicaCount": 3}},
            "keda.minReplicaCount (5) is larger than keda.maxReplicaCount (3)",
        ),
        (
            {
                "inferencer": {"replicas": 4, "workersPerGPU": 2},
                "kafka": {"partitions": {"frames": 6}},
            },
            "inferencer.replicas (4) x inferencer.workersPerGPU (2) = 8 members of the consumer "
            "group, more than kafka.partitions.frames (6)",
        ),
        (
            {
                "keda": {**KEDA_ON, "maxReplicaCount": 4},
                "inferencer": {"workersPerGPU": 4},
                "kafka": {"partitions": {"frames": 12}},
            },
            "keda.maxReplicaCount (4) x inferencer.workersPerGPU (4) = 16 members",
        ),
        ({"inferencer": {"workersPerGPU": 0}}, "/inferencer/workersPerGPU': minimum"),
        ({"inferencer": {"workersPerGPU": 17}}, "/inferencer/workersPerGPU': maximum"),
    ],
)
def test_replicas_when_more_than_frames_partitions_then_render_fails(
    helm: Helm, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    assert message in helm.render_fails([write_values(tmp_path, values)])


def test_keda_when_max_replicas_equals_partitions_then_render_succeeds(
    helm: Helm, tmp_path: Path
) -> None:
    values = {
        "keda": {**KEDA_ON, "maxReplicaCount": 6},
        "kafka": {"partitions": {"frames": 6}},
    }
    result = helm.render([write_values(tmp_path, values)])
    assert result.scaled_object("inferencer")["spec"]["maxReplicaCount"] == 6
    assert not result.of_kind("TriggerAuthentication")  # plaintext: nothing to authenticate


@pytest.mark.parametrize("workers", [1, 3])
def test_inferencer_workers_when_set_then_the_container_runs_that_many(
    helm: Helm, tmp_path: Path, workers: int
) -> None:
    values = {"inferencer": {"workersPerGPU": workers}, "kafka": {"partitions": {"frames": 3}}}
    container = helm.render([write_values(tmp_path, values)]).container("inferencer")
    assert process_env(container)["FRAMEBUS_WORKERS"] == str(workers)
    assert container["command"] == ["python", "-m", "framebus_inferencer"]  # it supervises them


def test_inferencer_workers_when_members_equal_frames_partitions_then_rendered(
    helm: Helm, tmp_path: Path
) -> None:
    values = {
        "keda": {**KEDA_ON, "maxReplicaCount": 3},
        "inferencer": {"workersPerGPU": 4},
        "kafka": {"partitions": {"frames": 12}},
    }
    result = helm.render([write_values(tmp_path, values)])
    assert process_env(result.container("inferencer"))["FRAMEBUS_WORKERS"] == "4"


# --- ServiceMonitor ------------------------------------------------------------------------


def test_service_monitor_when_enabled_then_it_selects_each_service_by_its_http_port(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    services = {
        s["metadata"]["labels"]["app.kubernetes.io/component"]: s for s in result.of_kind("Service")
    }
    monitors = result.of_kind("ServiceMonitor")
    scraped = {m["metadata"]["labels"]["app.kubernetes.io/component"] for m in monitors}
    assert len(monitors) == len(scraped)
    # live, alerts and clips are enabled in gpu-keda
    assert scraped == {"decoder", "inferencer", "tracker", "alerts", "clips", "live"}
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        component = monitor["metadata"]["labels"]["app.kubernetes.io/component"]
        service = services[component]
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["vision"]}
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["path"] == "/metrics"
        assert endpoint["interval"] == "30s"


def test_service_monitor_when_disabled_then_not_rendered(rendered: dict[str, Rendered]) -> None:
    assert not rendered["default"].of_kind("ServiceMonitor")


# --- decoders, topics, volumes -------------------------------------------------------------


def test_decoder_shards_when_listed_then_one_single_pod_deployment_per_shard(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    decoders = {
        d["metadata"]["labels"]["framebus.io/shard"]: d for d in result.deployments("decoder")
    }
    assert set(decoders) == {"dock", "yard", "gate"}
    for name, deployment in decoders.items():
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"]["type"] == "Recreate"
        assert deployment["spec"]["selector"]["matchLabels"]["framebus.io/shard"] == name
    cameras = {
        c["metadata"]["labels"]["framebus.io/shard"]: yaml.safe_load(c["data"]["cameras.yaml"])
        for c in result.of_component("ConfigMap", "decoder")
    }
    assert [c["id"] for c in cameras["dock"]["cameras"]] == ["dock-1", "dock-2"]
    assert cameras["yard"]["cameras"] == [
        {"id": "yard-1", "url": "rtsp://yard-1.cameras.example/stream1", "target_fps": 2}
    ]
    dock_pod = decoders["dock"]["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in _only_container(dock_pod)["volumeMounts"]}
    cameras_file = env_of(_only_container(dock_pod))["FRAMEBUS_CAMERAS_FILE"]["value"]
    assert cameras_file == mounts["cameras"] + "/cameras.yaml"


def test_decoder_shards_when_a_camera_is_in_two_shards_then_render_fails(
    helm: Helm, tmp_path: Path
) -> None:
    cam = {"id": "cam-1", "url": "rtsp://cam-1.example/s"}
    values = {
        "decoder": {"shards": [{"name": "a", "cameras": [cam]}, {"name": "b", "cameras": [cam]}]}
    }
    proc = helm.template_cmd(values=[write_values(tmp_path, values)])
    assert proc.returncode != 0
    assert 'camera id "cam-1" appears in two places' in proc.stderr


def test_topics_job_when_installing_or_upgrading_then_runs_first_as_a_hook(
    rendered: dict[str, Rendered],
) -> None:
    (job,) = rendered["gpu-keda"].of_kind("Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    container = _only_container(job["spec"]["template"]["spec"])
    assert container["command"] == ["framebus"]
    assert container["args"][:2] == ["topics", "create"]
    args = container["args"]
    assert args[args.index("--frames-partitions") + 1] == "24"
    assert args[args.index("--detections-partitions") + 1] == "12"
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]  # not created yet


def test_engine_cache_when_pvc_then_claim_is_kept_and_mounted_where_the_app_looks(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    (claim,) = result.of_component("PersistentVolumeClaim", "inferencer")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = result.deployment("inferencer")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert (
        volumes["engine-cache"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    )
    container = _only_container(pod)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env_of(container)["FRAMEBUS_TRT_CACHE_DIR"]["value"] == mounts["engine-cache"]


def test_engine_cache_when_default_then_empty_dir(rendered: dict[str, Rendered]) -> None:
    pod = rendered["default"].deployment("inferencer")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["engine-cache"]
    assert not rendered["default"].of_kind("PersistentVolumeClaim")


def test_model_when_url_source_then_init_container_downloads_and_checks_it(
    rendered: dict[str, Rendered],
) -> None:
    pod = rendered["cpu"].deployment("inferencer")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    env = env_of(init)
    assert env["MODEL_URL"]["value"] == "https://models.example.com/yolo/yolo-640.onnx"
    assert len(env["MODEL_SHA256"]["value"]) == 64
    assert "sha256sum -c" in init["command"][-1]
    main_env = env_of(_only_container(pod))
    assert main_env["FRAMEBUS_MODEL_PATH"]["value"] == "/models/yolo.onnx"


def test_decoder_when_cameras_change_then_pods_restart_only_if_asked(
    helm: Helm, tmp_path: Path
) -> None:
    def checksum(restart: bool, fps: int) -> str | None:
        camera = {"id": "cam-1", "url": "rtsp://cam-1.example/s", "target_fps": fps}
        values = {"decoder": {"restartOnCameraChange": restart, "cameras": [camera]}}
        (deployment,) = helm.render([write_values(tmp_path, values)]).deployments("decoder")
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        value: str | None = annotations.get("checksum/cameras")
        return value

    # By default the decoder hot-reloads its mounted camera file: no restart.
    assert checksum(restart=False, fps=5) is None
    before, after = checksum(restart=True, fps=5), checksum(restart=True, fps=1)
    assert before and after and before != after
