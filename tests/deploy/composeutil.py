"""Read compose.yaml and check what its CPU services share."""

from __future__ import annotations

from typing import Any

import yaml

from tests.deploy.helmutil import REPO

COMPOSE = REPO / "compose.yaml"


def load_compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return doc


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
