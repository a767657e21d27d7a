"""The chart installed by the real helm on scripts/local-k8s.sh's one-node cluster.

The cluster runs beside the tests (`make test-k8s` starts it and loads the images), and so do
what the chart expects from the site: a Kafka broker on the host, reachable from the pods at the
node's address, and the generated scene served over RTSP by GStreamer, looped, as two cameras.
The scene's colour detector is the model, on a PersistentVolume the test makes (the chart's
model.source=pvc); the clips claim binds to a hostPath volume the test reads the MP4s from.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from framebus.kafka.settings import KafkaSettings
from framebus_tools.localkafka import LocalKafka
from framebus_tools.scene import scene_rules_document, write_scene_video
from framebus_tools.scene_model import write_color_blob_model
from framebus_tools.scenes import demo_scene
from tests.integration.rtsp import RtspCamera, rtsp_available
from tests.k8s.kube import (
    CONTAINERD_SOCK,
    KUBECONFIG,
    KUBECTL,
    NAMESPACE,
    RELEASE,
    REPO,
    helm,
    kubectl,
    node_ip,
    run,
)

KAFKA_PORT = 29292  # the host's listener; controller on +1, the pods' listener on +2
RTSP_PORT = 28554
CAMERAS = ("scene-1", "scene-2")
MODEL_INPUT = 320
PASSWORD = "k8s-test-password-3"  # noqa: S105 - the test release's own page password
VALUES = REPO / "helm" / "framebus" / "ci" / "local-k8s-values.yaml"
SERVICE_UID = 10001  # the images' user: hostPath volumes get no fsGroup, so the test chowns


@dataclass
class Release:
    """The installed release and what it was given."""

    kafka: KafkaSettings
    work: Path
    clips_dir: Path
    values: list[str]  # helm's --values/--set arguments, for upgrades

    def upgrade(self, *sets: str) -> None:
        deploy_chart("upgrade", *self.values, *sets)


def deploy_chart(verb: str, *values: str) -> None:
    """`helm install` or `helm upgrade` of the chart as the release, waiting for it."""
    chart = str(REPO / "helm" / "framebus")
    helm(verb, RELEASE, chart, "-n", NAMESPACE, *values, "--wait", "--timeout", "5m")


def _require_cluster() -> None:
    if not KUBECTL.exists() or not KUBECONFIG.exists() or not CONTAINERD_SOCK.exists():
        pytest.fail("no local cluster: run `make test-k8s` (scripts/local-k8s.sh start && images)")
    ready = kubectl("get", "--raw", "/readyz", check=False, timeout_s=20)
    if ready.strip() != "ok":
        pytest.fail("the local cluster's API server does not answer: scripts/local-k8s.sh start")


@pytest.fixture(scope="module")
def host_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSettings]:
    """A broker of the test's own; pods reach it at the node's address (its EXTERNAL listener)."""
    external = f"{node_ip()}:{KAFKA_PORT + 2}"
    broker = LocalKafka(
        port=KAFKA_PORT,
        state_dir=tmp_path_factory.mktemp("kafka"),  # the jars: FRAMEBUS_HOME's, fetched once
        listeners=(f"EXTERNAL://{external}",),
        listener_protocols=("EXTERNAL:PLAINTEXT",),
    )
    broker.start()
    try:
        yield KafkaSettings(bootstrap_servers=broker.bootstrap)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def scene_camera(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RtspCamera]:
    """The generated scene, looped over RTSP at rtsp://<node>:RTSP_PORT/scene."""
    if not rtsp_available():
        pytest.fail("needs GStreamer's RTSP server: run scripts/install-test-deps.sh as root")
    video = tmp_path_factory.mktemp("scene") / "scene.mp4"
    write_scene_video(video, demo_scene())
    # 0.0.0.0: the pods reach it at the node's address.
    camera = RtspCamera("scene", RTSP_PORT, file=video, address="0.0.0.0")  # noqa: S104
    camera.start()
    try:
        yield camera
    finally:
        camera.kill()


def _host_volume(name: str, path: Path, size: str, claim: str) -> str:
    """A hostPath PersistentVolume bound ahead to the claim `claim` of the test namespace."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(path), "type": "Directory"},
                "claimRef": {"namespace": NAMESPACE, "name": claim},
            },
        }
    )


def _site_objects(work: Path, clips_dir: Path) -> None:
    """The namespace, the page's Secret, the model's claim and volume, the clips volume."""
    models = work / "models"
    models.mkdir()
    write_color_blob_model(models / "model.onnx", demo_scene(), MODEL_INPUT)
    for folder in (work, models):
        folder.chmod(0o755)
    clips_dir.mkdir()
    run(["chown", f"{SERVICE_UID}:{SERVICE_UID}", str(clips_dir)])
    kubectl("create", "namespace", NAMESPACE)
    kubectl(
        "create",
        "secret",
        "generic",
        "framebus-live-auth",
        "-n",
        NAMESPACE,
        f"--from-literal=password={PASSWORD}",
    )
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=_host_volume("framebus-test-models", models, "1Gi", "framebus-models"),
    )
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=_host_volume("framebus-test-clips", clips_dir, "1Gi", f"{RELEASE}-framebus-clips"),
    )
    kubectl(
        "apply",
        "-n",
        NAMESPACE,
        "-f",
        "-",
        stdin=yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "framebus-models"},
                "spec": {
                    "accessModes": ["ReadOnlyMany"],
                    "storageClassName": "",
                    "volumeName": "framebus-test-models",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ),
    )


def remove_site() -> None:
    """What an earlier run left: the release, the namespace and the two volumes."""
    helm_list = helm("list", "-n", NAMESPACE, "-q") if _namespace_exists() else ""
    if RELEASE in helm_list.split():
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout", "180s")
    kubectl("delete", "pv", "framebus-test-models", "framebus-test-clips", "--ignore-not-found")


def _namespace_exists() -> bool:
    return bool(kubectl("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name").strip())


def _keep_logs(work: Path) -> None:
    """Every pod's log beside the test's files (pytest's tmp folder), for a failure's reader."""
    pods = kubectl("get", "pods", "-n", NAMESPACE, "-o", "name", check=False).split()
    for pod in pods:
        text = kubectl(
            "logs", "-n", NAMESPACE, pod, "--all-containers", "--tail", "2000", check=False
        )
        (work / f"{pod.replace('/', '-')}.log").write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def release(
    tmp_path_factory: pytest.TempPathFactory, host_kafka: KafkaSettings, scene_camera: RtspCamera
) -> Iterator[Release]:
    """`helm install` of the chart with ci/local-k8s-values.yaml, the scene's cameras and rules."""
    _require_cluster()
    remove_site()
    work = tmp_path_factory.mktemp("release")
    clips_dir = work / "clips"
    _site_objects(work, clips_dir)
    rules = work / "rules.yaml"
    rules.write_text(yaml.safe_dump(scene_rules_document(demo_scene(), dwell_s=2.0)), "utf-8")
    url = f"rtsp://{node_ip()}:{RTSP_PORT}/scene"
    cameras = [{"id": c, "url": url, "target_fps": 5, "video": True} for c in CAMERAS]
    site = work / "site-values.yaml"
    site.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrapServers": f"{node_ip()}:{KAFKA_PORT + 2}"},
                "decoder": {"cameras": cameras},
            }
        ),
        "utf-8",
    )
    values = ["--values", str(VALUES), "--values", str(site), "--set-file", f"alerts.rules={rules}"]
    deploy_chart("install", *values)
    try:
        yield Release(host_kafka, work, clips_dir, values)
    finally:
        _keep_logs(work)
        remove_site()
