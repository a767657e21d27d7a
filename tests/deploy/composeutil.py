"""Read compose.yaml and check what its CPU services share."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.helmutil import REPO

COMPOSE = REPO / "compose.yaml"
_DEFAULTED = re.compile(r"\$\{[A-Z0-9_]+:-([^}]*)\}")


def load_compose() -> dict[str, Any]:
    """compose.yaml as compose reads it when none of its `${VAR:-default}` variables is set."""
    text = _DEFAULTED.sub(lambda m: m.group(1), COMPOSE.read_text(encoding="utf-8"))
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


def bound_file(service: dict[str, Any], target: str) -> Path:
    """The host file a service binds at `target` (relative paths from the repository root)."""
    for volume in service.get("volumes", []):
        source, _, rest = volume.partition(":")
        if rest.split(":")[0] == target:
            return REPO / source
    raise AssertionError(f"nothing is bound at {target}: {service.get('volumes')}")


def service_env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as the process sees it (every value a string)."""
    return {k: str(v) for k, v in service.get("environment", {}).items()}


def service_argv(service: dict[str, Any]) -> list[str]:
    return [*service.get("entrypoint", []), *service.get("command", [])]


def cpu_service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    """compose's `name` service, checked to run like every CPU service; returned.

    `python -m framebus_<name>` from the decoder image (which carries every CPU service), in no
    profile (it runs beside whichever inferencer runs), with no GPU reservation, a read-only root
    filesystem, and started only after the topics step succeeded.
    """
    services = compose["services"]
    service: dict[str, Any] = services[name]
    assert service_argv(service) == ["python", "-m", f"framebus_{name}"]
    assert service["image"] == services["decoder"]["image"]
    assert "profiles" not in service and "deploy" not in service
    assert service["read_only"] is True
    assert service["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    return service
