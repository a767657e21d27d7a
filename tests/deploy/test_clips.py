"""`framebus clips` in the chart (off by default): the clips Deployment from the decoder image, the
claim its files live on, and the live page mounting that claim read-only to serve them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.helmutil import (
    Helm,
    Rendered,
    assert_off_the_gpu_pool,
    cpu_service_containers,
    process_env,
    write_values,
)

pytestmark = pytest.mark.deploy

CLIPS_DIR = "/var/lib/framebus/clips"


def _volume(result: Rendered, component: str, name: str) -> dict[str, object]:
    volumes = result.deployment(component)["spec"]["template"]["spec"]["volumes"]
    return next(v for v in volumes if v["name"] == name)


def _mount(result: Rendered, component: str, name: str) -> dict[str, object]:
    return next(m for m in result.container(component)["volumeMounts"] if m["name"] == name)


@pytest.mark.parametrize("values_name", ["default", "cpu"])
def test_clips_when_not_enabled_then_nothing_of_it_renders(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    for kind in ("Deployment", "Service", "ServiceMonitor", "PersistentVolumeClaim"):
        assert not rendered[values_name].of_component(kind, "clips"), kind


def test_clips_when_enabled_then_clips_module_writes_to_a_claim_live_mounts_read_only(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    container, _ = cpu_service_containers(result, "clips")
    env = process_env(container)
    assert env["FRAMEBUS_CLIPS_DIR"] == CLIPS_DIR
    assert env["FRAMEBUS_CLIPS_GROUP"] == "framebus-clips"
    assert env["FRAMEBUS_ALERTS_TOPIC"] == "framebus.alerts"
    assert (env["FRAMEBUS_VIDEO_TOPIC"], env["FRAMEBUS_CLIPS_TOPIC"]) == (
        "framebus.video",
        "framebus.clips",
    )
    (claim,) = result.of_component("PersistentVolumeClaim", "clips")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "nfs-client"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    name = claim["metadata"]["name"]
    assert _volume(result, "clips", "clips")["persistentVolumeClaim"] == {"claimName": name}
    assert _mount(result, "clips", "clips") == {"name": "clips", "mountPath": CLIPS_DIR}
    # The live page serves the same files, read-only, at the path the records' URIs name.
    assert _volume(result, "live", "clips")["persistentVolumeClaim"] == {
        "claimName": name,
        "readOnly": True,
    }
    assert _mount(result, "live", "clips") == {
        "name": "clips",
        "mountPath": CLIPS_DIR,
        "readOnly": True,
    }
    assert process_env(result.container("live"))["FRAMEBUS_CLIPS_DIR"] == CLIPS_DIR


def test_clips_when_enabled_then_scraped_like_the_others_and_off_the_gpu_pool(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    annotations = result.deployment("clips")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics"
    (monitor,) = result.of_component("ServiceMonitor", "clips")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
    assert result.of_component("Service", "clips")
    assert_off_the_gpu_pool(result, "clips")


def test_live_when_enabled_then_it_asks_a_password_from_a_secret_it_does_not_create(
    rendered: dict[str, Rendered],
) -> None:
    result = rendered["gpu-keda"]
    env = process_env(result.container("live"))
    assert env["FRAMEBUS_AUTH"] == "password"
    assert env["FRAMEBUS_PASSWORD_FILE"] == "/etc/framebus/live-auth/password"  # noqa: S105
    secret = _volume(result, "live", "live-auth")["secret"]
    assert secret["secretName"] == "framebus-live-auth"  # type: ignore[index]
    assert _mount(result, "live", "live-auth")["readOnly"] is True


def test_clips_when_existing_claim_or_no_storage_then_no_claim_made_and_live_serves_none(
    helm: Helm, tmp_path: Path
) -> None:
    rules = [{"name": "r", "type": "dwell", "camera": "c", "zone": [[0, 0], [1, 0], [1, 1]]}]
    base = {"alerts": {"enabled": True, "rules": rules}, "live": {"enabled": True}}
    existing = {**base, "clips": {"enabled": True, "storage": {"existingClaim": "site-clips"}}}
    result = helm.render([write_values(tmp_path, existing)])
    assert not result.of_component("PersistentVolumeClaim", "clips")
    assert _volume(result, "live", "clips")["persistentVolumeClaim"] == {
        "claimName": "site-clips",
        "readOnly": True,
    }
    no_storage = {**base, "clips": {"enabled": True, "storage": {"enabled": False}}}
    result = helm.render([write_values(tmp_path, no_storage)])
    assert _volume(result, "clips", "clips")["emptyDir"] == {}
    assert "FRAMEBUS_CLIPS_DIR" not in process_env(result.container("live"))
