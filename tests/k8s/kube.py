"""kubectl, helm and the node of scripts/local-k8s.sh's cluster, for tests/k8s."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.harness import wait_for

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("FRAMEBUS_K8S_STATE", REPO / ".cache" / "k8s" / "cluster"))
KUBE_VERSION = os.environ.get("FRAMEBUS_KUBE_VERSION", "v1.34.2")
KUBECTL = REPO / ".cache" / "k8s" / KUBE_VERSION / "bin" / "kubectl"
HELM = Path(os.environ.get("FRAMEBUS_HELM", REPO / ".cache" / "bin" / "helm"))
KUBECONFIG = STATE / "admin.kubeconfig"
CONTAINERD_SOCK = STATE / "containerd" / "containerd.sock"
NAMESPACE = "framebus-test"
RELEASE = "fb"
HTTP_PORT = 8080  # every service's /metrics, /readyz and (live) page port: the chart's http.port


def run(
    cmd: list[str], stdin: str | None = None, timeout_s: float = 120, check: bool = True
) -> str:
    """Run a command; its stdout, or a failure with its stderr."""
    done = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(cmd[:4])}... exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


def kubectl(
    *args: str, stdin: str | None = None, timeout_s: float = 120, check: bool = True
) -> str:
    return run([str(KUBECTL), "--kubeconfig", str(KUBECONFIG), *args], stdin, timeout_s, check)


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def helm(*args: str, timeout_s: float = 600) -> str:
    return run([str(HELM), "--kubeconfig", str(KUBECONFIG), *args], timeout_s=timeout_s)


def ctr(*args: str, check: bool = True) -> str:
    """containerd's own CLI on the node's containerd (the kubelet's k8s.io namespace)."""
    return run(["ctr", "--address", str(CONTAINERD_SOCK), "-n", "k8s.io", *args], check=check)


def node_ip() -> str:
    """The node's address, as scripts/local-k8s.sh picks it: pods reach the host there."""
    if os.environ.get("FRAMEBUS_K8S_NODE_IP"):
        return os.environ["FRAMEBUS_K8S_NODE_IP"]
    words = run(["ip", "-4", "route", "get", "1.1.1.1"]).split()
    return words[words.index("src") + 1]


def component_pods(component: str) -> list[dict[str, Any]]:
    """The release's pods of one component (decoder, inferencer, ...), not being deleted."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    items = kubectl_json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def pod_metrics(pod: dict[str, Any], timeout_s: float = 5.0) -> str:
    """A pod's /metrics text, read over the node's bridge at the pod's IP."""
    url = f"http://{pod['status']['podIP']}:{HTTP_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - the pod's own IP
        return str(resp.read().decode())


def deployment(component: str) -> dict[str, Any]:
    return dict(
        kubectl_json("get", "deployment", "-n", NAMESPACE, f"{RELEASE}-framebus-{component}")
    )


def wait_until(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    """The harness's wait, asking every 2 s: each check here runs kubectl (a process each)."""
    wait_for(check, timeout_s, what, every_s=2.0)


def container_id(pod: dict[str, Any], name: str) -> str:
    """containerd's id of the pod's container `name`."""
    for status in pod["status"].get("containerStatuses", []):
        if status["name"] == name:
            return str(status["containerID"]).removeprefix("containerd://")
    pytest.fail(f"pod {pod['metadata']['name']} has no container {name}")
