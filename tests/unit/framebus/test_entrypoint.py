"""The services' shared entry point: flags over env over defaults, exit codes, one signal handler."""

from __future__ import annotations

import ast
import logging
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from framebus.entrypoint import service_main, stop_on_signals
from framebus.errors import ConfigError
from framebus.settings import check, setting

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class DemoSettings:
    log_level: str = setting("info", "Log level.")
    max_batch: int = setting(8, "Frames per batch.")

    def __post_init__(self) -> None:
        check(self.max_batch >= 1, "max_batch", "must be at least 1")


@pytest.fixture(autouse=True)
def restore_process_state() -> Iterator[None]:
    """service_main installs signal handlers and configures the root logger: undo both."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_service_main_when_help_then_lists_setting_flags_with_env_names_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        service_main("demo-svc", "What it does.", DemoSettings, lambda _s, _e: 1, ["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: demo-svc")
    assert "--max-batch" in out and "FRAMEBUS_MAX_BATCH" in out


def test_service_main_when_flag_and_env_then_flag_wins_and_run_gets_the_signal_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FRAMEBUS_MAX_BATCH", "4")
    monkeypatch.setenv("FRAMEBUS_LOG_LEVEL", "warning")
    seen: list[tuple[DemoSettings, threading.Event]] = []

    def run(settings: DemoSettings, stop: threading.Event) -> int:
        seen.append((settings, stop))
        os.kill(os.getpid(), signal.SIGTERM)  # as Kubernetes stops a pod
        return 7

    assert service_main("demo-svc", None, DemoSettings, run, ["--max-batch", "16"]) == 7
    ((settings, stop),) = seen
    assert settings == DemoSettings(log_level="warning", max_batch=16)
    assert stop.is_set()  # the handler the entry point installed is the one in force


def test_service_main_when_setting_invalid_then_exit_2_naming_it_without_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FRAMEBUS_MAX_BATCH", "0")
    ran: list[DemoSettings] = []
    code = service_main("demo-svc", None, DemoSettings, lambda s, _e: ran.append(s) or 0, [])
    assert (code, ran) == (2, [])
    assert "demo-svc: error: FRAMEBUS_MAX_BATCH (--max-batch): must be at least 1" in (
        capsys.readouterr().err
    )


def test_service_main_when_run_raises_a_framebus_error_then_exit_2_with_its_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def run(_settings: DemoSettings, _stop: threading.Event) -> int:
        raise ConfigError("no model: set FRAMEBUS_MODEL_PATH (--model-path)")

    assert service_main("demo-svc", None, DemoSettings, run, []) == 2
    assert "demo-svc: error: no model" in capsys.readouterr().err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_on_signals_when_signalled_then_event_set_and_process_keeps_running(
    sig: signal.Signals,
) -> None:
    stop = stop_on_signals()
    assert not stop.is_set()
    os.kill(os.getpid(), sig)
    assert stop.wait(5.0)
    os.kill(os.getpid(), sig)  # a second signal only stops again: no exit, no KeyboardInterrupt
    assert stop.is_set()


def _signal_handler_installs(path: Path) -> list[int]:
    """Lines of `signal.signal(...)` calls in a module."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "signal"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "signal"
    ]


def test_signal_handlers_when_sources_scanned_then_only_the_entry_point_installs_them() -> None:
    installs = {
        str(path.relative_to(REPO)): lines
        for folder in (REPO / "services", REPO / "tools")
        for path in sorted(folder.rglob("*.py"))
        if (lines := _signal_handler_installs(path))
    }
    assert list(installs) == ["services/base/framebus/entrypoint.py"], installs
