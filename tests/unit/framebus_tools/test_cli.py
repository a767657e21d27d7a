"""`framebus decoder|inferencer` hand their arguments to the services' own entry points."""

from __future__ import annotations

import pytest

from framebus_tools.cli import main


@pytest.mark.parametrize(
    ("service", "flag"),
    [("decoder", "--camera-url"), ("inferencer", "--model-path"), ("live", "--live-source")],
)
def test_cli_when_service_help_then_the_service_entry_point_answers_as_framebus_service(
    service: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([service, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: framebus {service}")
    assert flag in out


def test_cli_when_service_setting_invalid_then_exit_2_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FRAMEBUS_TARGET_FPS", "fast")
    assert main(["decoder"]) == 2
    err = capsys.readouterr().err
    assert "framebus decoder: error: FRAMEBUS_TARGET_FPS (--target-fps): cannot use 'fast'" in err


def test_cli_when_top_level_help_then_services_still_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help lines
    assert "decoder decode cameras" in out and "(python -m framebus_decoder)" in out
    assert "(python -m framebus_inferencer)" in out
