"""The Helm chart installed for real: scripts/local-k8s.sh's cluster, this machine's images.

In order, on one release: the topics Job ran before any service and every Deployment turned
ready; the scene's two cameras give every frame one detections and one tracks record, every rule
fires, every clip lands on the clips volume and the page serves it after a login; a paused
inferencer's backlog makes KEDA scale it to two replicas and back to one; a rolling update of the
inferencer under live cameras, and pod evictions that the PodDisruptionBudget limits, lose and
double nothing; `helm uninstall` leaves only the clips claim (docs/deploy.md).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from framebus.topology import Topic, TopicSettings
from tests.k8s.conftest import CAMERAS, PASSWORD, Release
from tests.k8s.kube import (
    HTTP_PORT,
    KUBECONFIG,
    KUBECTL,
    NAMESPACE,
    RELEASE,
    component_pods,
    container_id,
    ctr,
    deployment,
    helm,
    kubectl,
    kubectl_json,
    pod_metrics,
    pod_ready,
    wait_until,
)
from tests.ledger import (
    FENCED_AT_START,
    Ledger,
    TopicReader,
    check_clip_files,
    check_exactly_once,
    check_scene_alerts,
    clip_path,
    doubled,
    frame_key,
)
from tests.page import login_form, member, status, stranger
from tests.reliability.harness import metric

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

COMPONENTS = ("decoder", "inferencer", "tracker", "alerts", "clips", "live")
DECODER = f"{RELEASE}-framebus-decoder-default"
INFERENCER = f"{RELEASE}-framebus-inferencer"
FIRST_RUN_FRAMES = 150  # per camera: 30 s at 5 fps, more than one pass of the 24 s scene


@dataclass
class Progress:
    """What the earlier tests of the module found, for the later ones."""

    first: Ledger | None = None
    timeline: list[str] = field(default_factory=list)


PROGRESS = Progress()


def created(obj: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"])


def delivered() -> dict[str, float]:
    """Frames the running decoder pod delivered per camera; {} when none answers."""
    pods = [p for p in component_pods("decoder") if pod_ready(p)]
    if not pods:
        return {}
    try:
        text = pod_metrics(pods[0])
    except OSError:
        return {}
    return {
        c: metric(text, "framebus_decoder_frames_total", camera=c, outcome="delivered")
        for c in CAMERAS
    }


def play(frames_per_camera: int, timeout_s: float = 300) -> None:
    """Let the cameras play until the decoder pod delivered that many frames of each."""
    wait_until(
        f"the decoder delivering {frames_per_camera} frames of each camera",
        lambda: bool(d := delivered()) and min(d.values()) >= frames_per_camera,
        timeout_s,
    )


def scale_decoder(replicas: int) -> None:
    """The cameras on (1) or off (0): a stopped decoder pod flushes its frames and exits."""
    kubectl("scale", "deployment", DECODER, "-n", NAMESPACE, f"--replicas={replicas}")
    if replicas == 0:
        wait_until("the decoder pod gone", lambda: not component_pods("decoder"), 120)
    else:
        wait_until(
            "the decoder pod ready", lambda: any(map(pod_ready, component_pods("decoder"))), 120
        )


def restarts(component: str) -> list[tuple[str, int]]:
    return [
        (p["metadata"]["name"], s["restartCount"])
        for p in component_pods(component)
        for s in p["status"].get("containerStatuses", [])
        if s["restartCount"]
    ]


def check_no_restarts(components: tuple[str, ...]) -> None:
    """No pod restarted, but for the known start-up fencing of a stateful service (one restart)."""
    for component in components:
        for pod, count in restarts(component):
            logs = kubectl("logs", "-n", NAMESPACE, pod, "--previous", check=False)
            assert count == 1 and FENCED_AT_START in logs, (
                f"{pod} restarted {count}:\n{logs[-3000:]}"
            )


def test_install_when_done_then_topics_came_first_and_every_deployment_is_ready(
    release: Release,
) -> None:
    # The Job is a pre-install hook, deleted once it succeeded: its events remain.
    events = kubectl_json("get", "events", "-n", NAMESPACE)["items"]
    completed = [
        datetime.fromisoformat(e.get("lastTimestamp") or e["eventTime"])
        for e in events
        if e["involvedObject"]["kind"] == "Job" and e["reason"] == "Completed"
    ]
    assert completed, "no Completed event of the topics Job"
    deployments = kubectl_json("get", "deployments", "-n", NAMESPACE)["items"]
    assert {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in deployments} == set(
        COMPONENTS
    )
    assert max(completed) <= min(created(d) for d in deployments)
    listed = AdminClient(release.kafka.client_config()).list_topics(timeout=10).topics
    assert {TopicSettings().name(t) for t in Topic} <= set(listed)
    # helm's --wait counts a Deployment whose maxUnavailable covers its replicas as ready: wait.
    for component in COMPONENTS:
        wait_until(
            f"every {component} pod ready",
            lambda c=component: all(map(pod_ready, pods := component_pods(c))) and bool(pods),
            180,
        )
    # The ServiceMonitors and the dashboard ConfigMap (no Grafana or Prometheus Operator runs).
    monitors = kubectl_json("get", "servicemonitors", "-n", NAMESPACE)["items"]
    assert len(monitors) == len(COMPONENTS)
    dashboards = kubectl_json("get", "configmaps", "-n", NAMESPACE, "-l", "grafana_dashboard=1")
    assert [c["metadata"]["name"] for c in dashboards["items"]] == [
        f"{RELEASE}-framebus-dashboards"
    ]
    for scaled in kubectl_json("get", "scaledobjects", "-n", NAMESPACE)["items"]:
        ready = {c["type"]: c["status"] for c in scaled["status"]["conditions"]}
        assert ready.get("Ready") == "True", (scaled["metadata"]["name"], scaled["status"])


def test_scene_when_cameras_play_then_frames_alerts_clips_and_page_answered_once(
    release: Release,
) -> None:
    play(FIRST_RUN_FRAMES)
    scale_decoder(0)
    ledger = TopicReader(release.kafka).wait_answered()
    check_exactly_once(ledger)
    check_scene_alerts([a for _, _, a in ledger.alerts], CAMERAS)
    check_clip_files(ledger.clips, release.clips_dir)
    PROGRESS.first = ledger

    (live,) = component_pods("live")
    page = f"http://{live['status']['podIP']}:{HTTP_PORT}"
    clip_url = f"{page}/clips/{clip_path(ledger.clips[0])}"
    assert status(stranger(), page + "/") in (302, 303, 307)
    assert status(stranger(), clip_url) == 401
    user = member()
    assert status(user, page + "/login", login_form(PASSWORD)) == 303
    assert status(user, clip_url) == 200
    check_no_restarts(("inferencer", "tracker", "alerts", "clips", "live"))


def hpa_metrics() -> dict[str, str]:
    """The current value of each of the inferencer HPA's external metrics (KEDA's triggers)."""
    hpa = kubectl_json("get", "hpa", "-n", NAMESPACE, f"keda-hpa-{INFERENCER}")
    return {
        m["external"]["metric"]["name"]: m["external"]["current"].get("averageValue")
        or m["external"]["current"].get("value")
        for m in hpa.get("status", {}).get("currentMetrics") or []
        if m.get("type") == "External"
    }


def keda_sample(start: float) -> tuple[int, int]:
    """(replicas the inferencer Deployment wants, replicas ready), logged on the timeline."""
    status = deployment("inferencer")
    wanted, ready = status["spec"]["replicas"], status["status"].get("readyReplicas", 0)
    metrics = "  ".join(f"{k} {v}" for k, v in sorted(hpa_metrics().items()))
    PROGRESS.timeline.append(
        f"{time.monotonic() - start:6.1f} s  replicas {wanted}  ready {ready}  {metrics}"
    )
    return int(wanted), int(ready)


def prometheus_lag_s() -> float | None:
    """The chart's seconds-of-lag query, asked of the cluster's Prometheus; None: no series."""
    query = f'max(framebus_inferencer_consumer_lag_seconds{{namespace="{NAMESPACE}"}})'
    url = f"http://127.0.0.1:19090/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the node's Prometheus
        result = json.load(resp)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def signal_containers(containers: list[str], signal: str) -> None:
    for container in containers:
        ctr("tasks", "kill", "--all", "-s", signal, container)


def test_keda_when_inferencer_paused_then_scaled_to_two_and_back_to_one(release: Release) -> None:
    assert PROGRESS.first is not None, "the scene test did not finish"
    scale_decoder(1)
    play(10)
    assert deployment("inferencer")["spec"]["replicas"] == 1
    # Both triggers have a source: the group's lag from Kafka, the oldest frame's age from
    # Prometheus, which scrapes the inferencer pod by its annotations.
    wait_until("Prometheus scraping the inferencer", lambda: prometheus_lag_s() is not None, 60)
    wait_until("the HPA reading both KEDA triggers", lambda: len(hpa_metrics()) == 2, 60)
    start = time.monotonic()
    # The only inferencer stops (SIGSTOP to its processes): the frames' lag grows past
    # keda.lagThreshold per replica while the cameras go on.
    paused = [container_id(pod, "inferencer") for pod in component_pods("inferencer")]
    signal_containers(paused, "SIGSTOP")
    try:
        wait_until("KEDA scaling the inferencer to 2", lambda: keda_sample(start)[0] >= 2, 180)
    finally:
        signal_containers(paused, "SIGCONT")
    wait_until("two inferencers ready", lambda: keda_sample(start) == (2, 2), 180)
    wait_until("KEDA scaling back to 1", lambda: keda_sample(start) == (1, 1), 300)
    print("\nKEDA timeline (inferencer):\n" + "\n".join(PROGRESS.timeline))  # noqa: T201
    (release.work / "keda-timeline.txt").write_text("\n".join(PROGRESS.timeline), "utf-8")


def test_rolling_update_when_setting_changes_under_live_cameras_then_rolled_out(
    release: Release,
) -> None:
    before = {p["metadata"]["name"] for p in component_pods("inferencer")}
    release.upgrade("--set", "inferencer.maxWaitMs=40")
    after = component_pods("inferencer")
    assert before.isdisjoint(p["metadata"]["name"] for p in after), "no inferencer pod replaced"
    env = {
        e["name"]: e.get("value")
        for e in deployment("inferencer")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["FRAMEBUS_MAX_WAIT_MS"] == "40"
    wait_until(
        "the updated inferencer ready",
        lambda: bool(pods := component_pods("inferencer")) and all(map(pod_ready, pods)),
        180,
    )
    wait_until("frames after the update", lambda: bool(delivered()), 120)


def evict(pod: str) -> subprocess.CompletedProcess[str]:
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": NAMESPACE},
    }
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/eviction"
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(KUBECONFIG), "create", "--raw", path, "-f", "-"],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_pdb_when_tracker_pods_evicted_then_one_at_a_time(release: Release) -> None:
    first, second = (p["metadata"]["name"] for p in component_pods("tracker"))
    assert evict(first).returncode == 0
    refused = evict(second)  # the first one's replacement is not ready yet: budget spent
    assert refused.returncode != 0 and "disruption budget" in refused.stderr, refused.stderr
    wait_until(
        "two tracker pods ready again",
        lambda: sum(map(pod_ready, component_pods("tracker"))) == 2,
        120,
    )
    assert evict(second).returncode == 0


def test_frames_when_cameras_stop_then_every_frame_answered_once_across_it_all(
    release: Release,
) -> None:
    play(30)
    scale_decoder(0)
    ledger = TopicReader(release.kafka).wait_answered()
    first = PROGRESS.first
    assert first is not None and set(first.frames) < set(ledger.frames)
    frames = set(ledger.frames)
    detections = [frame_key(d) for d in ledger.detections]
    print(  # noqa: T201
        f"\nframes {len(ledger.frames)}, detections {len(detections)} "
        f"(doubled {len(doubled(detections))}, missing {len(frames - set(detections))}), "
        f"tracks {len(ledger.tracks)}, alerts {len(ledger.alerts)}, clips {len(ledger.clips)}"
    )
    check_exactly_once(ledger)
    check_clip_files(ledger.clips, release.clips_dir)


def test_uninstall_when_done_then_only_the_clips_claim_is_left(release: Release) -> None:
    helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    kinds = (
        "deployments,replicasets,pods,services,configmaps,secrets,persistentvolumeclaims,"
        "poddisruptionbudgets,serviceaccounts,jobs,scaledobjects,servicemonitors"
    )
    wait_until(
        "the release's pods gone",
        lambda: not kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "name").strip(),
        120,
    )
    left = kubectl("get", kinds, "-n", NAMESPACE, "-l", selector, "-o", "name").split()
    assert left == [f"persistentvolumeclaim/{RELEASE}-framebus-clips"]
    assert not kubectl_json("get", "hpa", "-n", NAMESPACE)["items"]
