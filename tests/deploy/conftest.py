"""Fixtures of the deployment tests: the real helm binary and the chart rendered per CI values file."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.fixture(params=sorted(CI_VALUES))
def values_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def values_path(values_name: str) -> Path | None:
    return CI_VALUES[values_name]
