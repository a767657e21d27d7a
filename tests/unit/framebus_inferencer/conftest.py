"""The machine these tests simulate has an NVIDIA driver: tests that list GPU providers in the
wheel (a stubbed `get_available_providers`) mean a GPU machine, where `libcuda.so.1` loads. The
tests of a machine without one stub `providerlibs.driver_error` themselves."""

from __future__ import annotations

import pytest

from framebus_inferencer import providerlibs


@pytest.fixture(autouse=True)
def nvidia_driver_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(providerlibs, "driver_error", lambda: None)
