"""Fixtures of the deployment tests: the real helm binary and the chart rendered per CI values file."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from framebus import topology
from framebus.kafka import topics as kafka_topics
from framebus.kafka.topics import TopicSpec
from framebus_tools import cli
from tests.deploy.exported import exported_names
from tests.deploy.helmutil import CI_VALUES, Helm, Rendered, find_helm


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    binary = find_helm()
    if binary is None:  # `make test` builds it first; a deploy test never skips
        pytest.fail(
            "helm not found: set FRAMEBUS_HELM or run scripts/install-helm.sh "
            "(builds .cache/bin/helm from its Go module; `make test` runs it)"
        )
    if not binary.exists():
        pytest.fail(f"FRAMEBUS_HELM={binary} does not exist")
    return Helm(binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def rendered(helm: Helm) -> dict[str, Rendered]:
    """The chart rendered once for each values file in helm/framebus/ci (and the defaults)."""
    return {name: helm.render([path]) for name, path in CI_VALUES.items()}


@pytest.fixture(scope="session")
def exported_metrics() -> dict[str, set[str]]:
    """Service -> the series names its /metrics exports (scraped in-process, tests/deploy/exported.py)."""
    return exported_names()


@pytest.fixture(params=sorted(CI_VALUES))
def values_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def values_path(values_name: str) -> Path | None:
    return CI_VALUES[values_name]


TopicsStep = Callable[[Sequence[str], Mapping[str, str]], list[TopicSpec]]


@pytest.fixture
def run_topics_step(monkeypatch: pytest.MonkeyPatch) -> TopicsStep:
    """Run a manifest's `framebus topics create` through the CLI; return the topics it asks for.

    Kafka's admin calls are replaced: `ensure_topics` records the specs, the broker count
    (asked only without --replication-factor) is 1, as in compose, and a broker answers at once
    (--wait-s).
    """
    created: list[TopicSpec] = []

    def ensure_topics(_kafka: object, specs: list[TopicSpec], **_: object) -> list[str]:
        created.extend(specs)
        return [s.name for s in specs]

    monkeypatch.setattr(kafka_topics, "ensure_topics", ensure_topics)
    # framebus.topology asks the cluster's size (Sizing.copies) through its own import.
    monkeypatch.setattr(topology, "broker_count", lambda _kafka: 1)
    monkeypatch.setattr(kafka_topics, "broker_reachable", lambda _kafka, _timeout_s=5.0: True)

    def run(argv: Sequence[str], env: Mapping[str, str]) -> list[TopicSpec]:
        assert list(argv[:3]) == ["framebus", "topics", "create"], argv
        for name in [n for n in os.environ if n.startswith("FRAMEBUS_")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        created.clear()
        assert cli.main(list(argv[1:])) == 0
        return list(created)

    return run
