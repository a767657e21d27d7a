"""Run the real helm CLI on the chart and pick rendered manifests apart."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "framebus"
CI_VALUES = {
    "default": None,
    "gpu-keda": CHART / "ci" / "gpu-keda-values.yaml",
    "cpu": CHART / "ci" / "cpu-values.yaml",
    "local-k8s": CHART / "ci" / "local-k8s-values.yaml",
}
RELEASE = "fb"
GPU = "nvidia.com/gpu"
# `keda` values that turn KEDA on: the Prometheus trigger (on by default) needs its server.
KEDA_ON: dict[str, Any] = {
    "enabled": True,
    "prometheus": {"serverAddress": "http://prometheus-operated.monitoring.svc:9090"},
}
# `alerts` values that turn the alerts consumer on: it needs rules (one object rule here).
DOOR_COUNTER = {
    "name": "door-counter",
    "type": "line_crossing",
    "camera": "cam-1",
    "classes": ["person"],
    "line": [[600, 700], [1300, 700]],
}
ALERTS_ON: dict[str, Any] = {"enabled": True, "rules": [DOOR_COUNTER]}


def _k8s_version() -> str:
    """Kubernetes 1.30, or the oldest later release this kubernetes-validate still ships.

    The chart is rendered (`--kube-version`) and validated for the same release. Its objects
    (apps/v1, batch/v1, policy/v1, v1) are the same in every later release.
    """
    available = sorted(
        set(kubernetes_validate.utils.all_versions()),
        key=lambda v: tuple(int(p) for p in v.split(".")),
    )
    later = [v for v in available if tuple(int(p) for p in v.split(".")[:2]) >= (1, 30)]
    assert later, f"kubernetes-validate ships no schemas for Kubernetes >= 1.30: {available}"
    return later[0]


K8S_VERSION = _k8s_version()


def find_helm() -> Path | None:
    """`$FRAMEBUS_HELM`, else the binary scripts/install-helm.sh builds, else None."""
    configured = os.environ.get("FRAMEBUS_HELM")
    if configured:
        return Path(configured)
    built = REPO / ".cache" / "bin" / "helm"
    return built if built.exists() else None


@dataclass(frozen=True)
class Helm:
    """The helm binary, run with a throwaway home so no user config or repo cache leaks in."""

    binary: Path
    home: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        return subprocess.run(
            [str(self.binary), *args],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    def template_cmd(
        self, values: Sequence[Path | None] = (), sets: Sequence[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        args = ["template", RELEASE, str(CHART), "--namespace", "vision"]
        args += ["--kube-version", K8S_VERSION]
        for path in values:
            if path is not None:
                args += ["-f", str(path)]
        for item in sets:
            args += [
                "--set-string" if item.startswith("string:") else "--set",
                item.removeprefix("string:"),
            ]
        return self.run(*args)

    def render_fails(self, values: Sequence[Path | None] = (), sets: Sequence[str] = ()) -> str:
        """`helm template` that must fail (a schema or validate.yaml check); its stderr."""
        proc = self.template_cmd(values, sets)
        assert proc.returncode != 0, "helm template succeeded"
        return proc.stderr

    def render(self, values: Sequence[Path | None] = (), sets: Sequence[str] = ()) -> Rendered:
        """`helm template`; fails the test with helm's message if rendering fails."""
        proc = self.template_cmd(values, sets)
        assert proc.returncode == 0, f"helm template failed:\n{proc.stderr}"
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return Rendered(proc.stdout, docs)


@dataclass(frozen=True)
class Rendered:
    """The output of one `helm template`: the raw text and the parsed manifests."""

    text: str
    docs: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]

    def of_component(self, kind: str, component: str) -> list[dict[str, Any]]:
        """The rendered objects of one kind whose component label is `component`."""
        return [
            d
            for d in self.of_kind(kind)
            if d["metadata"]["labels"]["app.kubernetes.io/component"] == component
        ]

    def deployments(self, component: str) -> list[dict[str, Any]]:
        return self.of_component("Deployment", component)

    def deployment(self, component: str) -> dict[str, Any]:
        """The component's only Deployment."""
        (deployment,) = self.deployments(component)
        return deployment

    def container(self, component: str) -> dict[str, Any]:
        """The only container of the component's only Deployment."""
        (container,) = self.deployment(component)["spec"]["template"]["spec"]["containers"]
        return container

    def scaled_object(self, component: str) -> dict[str, Any]:
        """The component's only KEDA ScaledObject."""
        (scaled,) = self.of_component("ScaledObject", component)
        return scaled

    def pod_specs(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(component, pod spec) of every workload: Deployments and Jobs."""
        for d in self.docs:
            if d["kind"] in ("Deployment", "Job"):
                component = d["metadata"]["labels"]["app.kubernetes.io/component"]
                yield component, d["spec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's env entries by name."""
    return {e["name"]: e for e in container.get("env", [])}


def process_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's env as the process would see it (references replaced by stand-ins)."""
    env = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            env[entry["name"]] = "from-a-secret"
        else:
            env[entry["name"]] = "pod-0"
    return env


def cpu_service_containers(
    result: Rendered, component: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The CPU service's only container and the (first) decoder's, checked to share an image.

    The service (tracker, alerts, live) runs `python -m framebus_<component>` from the decoder
    image, which carries every CPU service.
    """
    container = result.container(component)
    (decoder, *_) = result.deployments("decoder")
    (decoder_container,) = decoder["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", f"framebus_{component}"]
    assert container["image"] == decoder_container["image"]
    return container, decoder_container


def assert_off_the_gpu_pool(result: Rendered, component: str) -> None:
    """The component's only Deployment keeps off the GPU pool: no GPU request, no toleration of
    the pool's nvidia.com/gpu taint, none of its node labels, no GPU runtime class."""
    pod = result.deployment(component)["spec"]["template"]["spec"]
    container = result.container(component)
    assert not any(GPU in (container["resources"].get(p) or {}) for p in ("requests", "limits"))
    assert not any(t.get("key") == GPU for t in pod.get("tolerations", []))
    assert not any("nvidia" in k for k in pod.get("nodeSelector", {}))
    assert "runtimeClassName" not in pod


def containers_of(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def write_values(tmp_path: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path
