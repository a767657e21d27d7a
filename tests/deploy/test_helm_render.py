"""The chart lints, renders valid Kubernetes objects, and its values schema rejects bad values."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from framebus_decoder.cameras import CAMERA_KEYS, parse_cameras
from framebus_decoder.motion import MotionConfig
from framebus_decoder.settings import DecoderSettings
from tests.deploy.crd_schemas import BY_KIND
from tests.deploy.helmutil import CHART, CI_VALUES, K8S_VERSION, Helm, Rendered, write_values

pytestmark = pytest.mark.deploy


def test_lint_when_values_file_given_then_strict_lint_passes(
    helm: Helm, values_path: Path | None
) -> None:
    args = ["lint", "--strict", "--kube-version", K8S_VERSION, str(CHART)]
    if values_path is not None:
        args += ["-f", str(values_path)]
    proc = helm.run(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_template_when_values_file_given_then_every_builtin_kind_is_valid_kubernetes(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    checked = 0
    for doc in rendered[values_name].docs:
        if (doc["apiVersion"], doc["kind"]) in BY_KIND:
            continue  # custom resources: see the next test
        # strict: an unknown or misspelt field fails, as `kubectl apply --validate=strict` would.
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 6


def test_template_when_values_file_given_then_custom_resources_match_their_crds(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    for doc in rendered[values_name].docs:
        schema = BY_KIND.get((doc["apiVersion"], doc["kind"]))
        if schema is not None:
            jsonschema.validate(doc, schema)


def test_template_when_any_values_file_then_no_kind_is_left_unvalidated(
    rendered: dict[str, Rendered],
) -> None:
    """Every kind rendered is covered: by kubernetes-validate, or by a CRD schema here."""
    for result in rendered.values():
        for doc in result.docs:
            key = (doc["apiVersion"], doc["kind"])
            if key in BY_KIND:
                continue
            try:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                pytest.fail(f"{key} has no Kubernetes schema and no CRD schema in crd_schemas.py")


@pytest.mark.parametrize(
    ("trigger", "why"),
    [
        # KEDA wants every trigger metadata value a string.
        (
            {"type": "kafka", "metadata": {"bootstrapServers": "k:9092", "consumerGroup": 5}},
            "is not of type 'string'",
        ),
        # A scaler cannot start without its required metadata.
        (
            {
                "type": "prometheus",
                "metricType": "Value",
                "metadata": {"serverAddress": "http://p:9090", "query": "max(x)"},
            },
            "'threshold' is a required property",
        ),
    ],
)
def test_crd_schema_when_trigger_metadata_is_wrong_then_it_is_rejected(
    trigger: dict[str, Any], why: str
) -> None:
    """The CR schemas themselves can fail."""
    schema = BY_KIND[("keda.sh/v1alpha1", "ScaledObject")]
    bad = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "x"},
        "spec": {"scaleTargetRef": {"name": "x"}, "triggers": [trigger]},
    }
    with pytest.raises(jsonschema.ValidationError, match=re.escape(why)):
        jsonschema.validate(bad, schema)


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        ("string:inferencer.maxBatch=eight", "/inferencer/maxBatch"),
        ("string:inferencer.replicas=two", "/inferencer/replicas"),
        ("string:kafka.partitions.frames=many", "/kafka/partitions/frames"),
        ("inferencer.gpu.enabled=maybe", "/inferencer/gpu/enabled"),
        ("inferencer.maxBatch=0", "/inferencer/maxBatch"),
        ("decoder.compression=brotli", "/decoder/compression"),
        ("kafka.securityProtocol=SASL", "/kafka/securityProtocol"),
        ("inferencer.providers={tensorrt,rocm}", "/inferencer/providers/1"),
        ("inferencer.delivery=exactly-twice", "/inferencer/delivery"),
        ("inferencer.model.source=huggingface", "/inferencer/model/source"),
        ("keda.maxReplicaCount=0", "/keda/maxReplicaCount"),
        ("podSecurityContext.runAsNonRoot=false", "/podSecurityContext/runAsNonRoot"),
        ("inferencer.maxBatchSize=8", "/inferencer"),  # a misspelt key is not silently ignored
        ("tracker.minHits=0", "/tracker/minHits"),
        ("tracker.minMatchIou=1.5", "/tracker/minMatchIou"),
        ("tracker.maxLostS=0", "/tracker/maxLostS"),
        ("tracker.keda.maxReplicaCount=0", "/tracker/keda/maxReplicaCount"),
        ("kafka.topics.tracks=bad topic", "/kafka/topics/tracks"),
        ("tracker.gpu.enabled=true", "/tracker"),  # the tracker has no GPU settings
        ("keda.prometheus.threshold=0", "/keda/prometheus/threshold"),
        ("keda.prometheus.activationThreshold=-1", "/keda/prometheus/activationThreshold"),
        ("keda.prometheus.serverAddress=prometheus:9090", "/keda/prometheus/serverAddress"),
        ("keda.prometheus.metricType=AverageValue", "/keda/prometheus"),  # always Value
        ("grafana.dashboards.label=not a label", "/grafana/dashboards/label"),
        ("grafana.dashboards.namespace=Monitoring", "/grafana/dashboards/namespace"),
        ("grafana.dashboards.enabled=yes", "/grafana/dashboards/enabled"),
        ("grafana.dashboards.folderName=x", "/grafana/dashboards"),
        ("live.source=webrtc", "/live/source"),
        ("live.service.port=0", "/live/service/port"),
        ("live.httpPort=8090", "/live"),  # gone: the pod listens on http.port
        ("live.replicas=2", "/live"),  # one pod serves every viewer
        ("live.service.type=ExternalName", "/live/service/type"),
        ("kafka.topics.alerts=bad topic", "/kafka/topics/alerts"),
        ("alerts.source=auto", "/alerts/source"),  # KEDA must know the topic
        ("alerts.rules=5", "/alerts/rules"),
        ("alerts.rules[0]=door", "/alerts/rules/0"),
        ("alerts.keda.maxReplicaCount=0", "/alerts/keda/maxReplicaCount"),
        ("alerts.gpu.enabled=true", "/alerts"),  # alerts have no GPU settings
    ],
)
def test_schema_when_value_is_wrong_then_helm_rejects_it_naming_the_key(
    helm: Helm, setting: str, where: str
) -> None:
    proc = helm.template_cmd(sets=[setting])
    assert proc.returncode != 0, f"{setting} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert f"at '{where}'" in proc.stderr, proc.stderr


def test_schema_when_values_file_has_wrong_type_then_rejected(helm: Helm, tmp_path: Path) -> None:
    path = write_values(tmp_path, {"inferencer": {"maxBatch": "eight", "replicas": "two"}})
    proc = helm.template_cmd(values=[path])
    assert proc.returncode != 0
    assert "at '/inferencer/maxBatch': got string, want integer" in proc.stderr
    assert "at '/inferencer/replicas': got string, want integer" in proc.stderr


def test_schema_when_camera_has_no_url_then_rejected(helm: Helm, tmp_path: Path) -> None:
    path = write_values(tmp_path, {"decoder": {"cameras": [{"id": "cam-1"}]}})
    proc = helm.template_cmd(values=[path])
    assert proc.returncode != 0
    assert "/decoder/cameras/0" in proc.stderr
    assert "url" in proc.stderr


def test_schema_when_camera_has_motion_then_its_config_map_gives_the_decoder_that_gate(
    helm: Helm, tmp_path: Path
) -> None:
    mask = [[[0, 0], [640, 0], [640, 60]]]
    motion = {"enabled": True, "still_refresh_s": 5, "mask": mask}
    cam = {"id": "cam-1", "url": "rtsp://cam/1", "motion": motion}
    rendered = helm.render([write_values(tmp_path, {"decoder": {"cameras": [cam]}})])
    (config_map,) = [c for c in rendered.of_kind("ConfigMap") if "cameras.yaml" in c["data"]]
    doc = yaml.safe_load(config_map["data"]["cameras.yaml"])
    (camera,) = parse_cameras(doc, DecoderSettings())
    assert camera.motion == MotionConfig(
        still_refresh_s=5, mask=(((0.0, 0.0), (640.0, 0.0), (640.0, 60.0)),)
    )
    bad = {**cam, "motion": {"enabled": True, "threshold": 300}}
    proc = helm.template_cmd(values=[write_values(tmp_path, {"decoder": {"cameras": [bad]}})])
    assert proc.returncode != 0
    assert "/decoder/cameras/0/motion/threshold" in proc.stderr


def test_ci_values_files_exist() -> None:
    for name, path in CI_VALUES.items():
        assert path is None or path.is_file(), name


def test_schema_when_camera_sets_video_and_phase_then_the_decoder_gets_them(
    helm: Helm, tmp_path: Path
) -> None:
    # Found on the local cluster: the schema refused `video`, so no chart-made camera published
    # the packets clips are cut from.
    cam = {"id": "cam-1", "url": "rtsp://cam/1", "video": True, "sample_phase": 0.5}
    rendered = helm.render([write_values(tmp_path, {"decoder": {"cameras": [cam]}})])
    (config_map,) = [c for c in rendered.of_kind("ConfigMap") if "cameras.yaml" in c["data"]]
    (camera,) = parse_cameras(yaml.safe_load(config_map["data"]["cameras.yaml"]), DecoderSettings())
    assert (camera.video, camera.sample_phase) == (True, 0.5)


def test_schema_when_compared_with_the_decoder_then_it_takes_every_camera_key() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert set(schema["definitions"]["camera"]["properties"]) == CAMERA_KEYS
