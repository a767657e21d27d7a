"""The chart and compose.yaml configure the services through settings the app really has.

The services ignore `FRAMEBUS_*` variables they do not know, so a renamed setting would silently
fall back to its default in a cluster (e.g. a TensorRT cache under a read-only home). Here every
variable a manifest sets must name a field of the command's settings class, and the values must
load through the app's own settings parser.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from framebus import settings as cfg
from framebus.kafka.settings import KafkaSettings
from framebus.topology import TopicSettings
from framebus_alerts.settings import AlertsSettings
from framebus_clips.settings import ClipsSettings
from framebus_decoder.settings import DecoderSettings
from framebus_inferencer.settings import InferencerSettings
from framebus_live.settings import LiveSettings
from framebus_tracker.settings import TrackerSettings
from tests.deploy.composeutil import load_compose
from tests.deploy.helmutil import REPO, Rendered, containers_of, process_env

pytestmark = pytest.mark.deploy

SETTINGS: dict[str, tuple[type[Any], ...]] = {
    "decoder": (DecoderSettings,),
    "inferencer": (InferencerSettings,),
    "tracker": (TrackerSettings,),
    "alerts": (AlertsSettings,),
    "clips": (ClipsSettings,),
    "live": (LiveSettings,),
    "topics": (KafkaSettings, TopicSettings),
}


def _known_names(classes: tuple[type[Any], ...]) -> set[str]:
    names = {row[0] for cls in classes for row in cfg.reference_rows(cls)}
    # Secrets may also come from a file named by <NAME>_FILE.
    return names | {f"{n}_FILE" for n in names}


def _check(command: str, env: dict[str, str], where: str) -> None:
    """Check the env against the command's settings: known names, values that load."""
    classes = SETTINGS[command]
    unknown = {k for k in env if k.startswith("FRAMEBUS_")} - _known_names(classes)
    assert not unknown, f"{where}: {sorted(unknown)} are not settings of `framebus {command}`"
    for cls in classes:
        cfg.load(cls, env)  # raises ConfigError naming the variable on a bad value


# The services' entry points, and the `framebus` CLI for the rest (the topics Job).
ENTRY_POINTS = {
    ("python", "-m", "framebus_decoder"): "decoder",
    ("python", "-m", "framebus_inferencer"): "inferencer",
    ("python", "-m", "framebus_tracker"): "tracker",
    ("python", "-m", "framebus_alerts"): "alerts",
    ("python", "-m", "framebus_live"): "live",
    ("python", "-m", "framebus_clips"): "clips",
}


def _command_of(argv: list[str]) -> str:
    """Which settings the process reads, from the command line a manifest gives it."""
    for prefix, command in ENTRY_POINTS.items():
        if tuple(argv[: len(prefix)]) == prefix:
            return command
    assert argv[0] == "framebus", argv
    return str(argv[1])


def test_chart_when_rendered_then_every_framebus_variable_is_a_real_setting(
    rendered: dict[str, Rendered], values_name: str
) -> None:
    for component, pod_spec in rendered[values_name].pod_specs():
        for container in containers_of(pod_spec):
            if container["name"] == "fetch-model":
                continue
            argv = [*container.get("command", []), *container.get("args", [])]
            command = _command_of(argv)
            _check(command, process_env(container), f"{values_name}/{component}")


def test_compose_when_loaded_then_every_framebus_variable_is_a_real_setting() -> None:
    compose = load_compose()
    commands = []
    for name, service in compose["services"].items():
        if not service["image"].startswith(("framebus/decoder:", "framebus/inferencer:")):
            continue
        env = {k: str(v) for k, v in service.get("environment", {}).items()}
        argv = [*service.get("entrypoint", []), *service.get("command", [])]
        commands.append(_command_of(argv))
        _check(commands[-1], env, f"compose {name}")
    assert len(commands) == 8
    assert {"tracker", "alerts", "clips", "live"} <= set(commands)


def test_images_when_built_then_their_default_env_is_a_real_setting() -> None:
    dockerfile = (REPO / "services" / "inferencer" / "Dockerfile").read_text(encoding="utf-8")
    names = {
        word.split("=", 1)[0]
        for word in dockerfile.replace("\\\n", " ").split()
        if word.startswith("FRAMEBUS_") and "=" in word
    }
    assert "FRAMEBUS_TRT_CACHE_DIR" in names
    assert not names - _known_names(SETTINGS["inferencer"])


@pytest.mark.parametrize("service", ["decoder", "inferencer"])
def test_images_when_run_then_their_entrypoint_is_the_service_module(service: str) -> None:
    dockerfile = (REPO / "services" / service / "Dockerfile").read_text(encoding="utf-8")
    (line,) = [ln for ln in dockerfile.splitlines() if ln.startswith("ENTRYPOINT")]
    argv = json.loads(line.removeprefix("ENTRYPOINT"))
    assert _command_of(argv) == service
    assert "CMD" not in dockerfile.split()  # no default argument for the entry point


def test_wiring_check_when_a_variable_is_misspelt_then_it_fails() -> None:
    with pytest.raises(AssertionError, match="FRAMEBUS_TRT_ENGINE_CACHE_DIR"):
        _check("inferencer", {"FRAMEBUS_TRT_ENGINE_CACHE_DIR": "/x"}, "test")
