from __future__ import annotations

from pathlib import Path

import pytest

from framebus.errors import ConfigError
from framebus.settings import Secret
from framebus_live.auth import Sessions, read_password
from framebus_live.service import login_sessions
from framebus_live.settings import LiveAuth, LiveSettings
from tests.unit.framebus_live.test_hub import Clock


def test_sessions_when_password_given_then_only_the_exact_one_matches() -> None:
    sessions = Sessions(Secret("s3cret pass"), 60)
    assert sessions.password_matches("s3cret pass")
    assert not sessions.password_matches("s3cret")
    assert not sessions.password_matches("")


def test_sessions_when_cookie_issued_then_valid_until_it_expires() -> None:
    clock = Clock()
    sessions = Sessions(Secret("pw"), 60, clock)
    cookie = sessions.issue()
    assert sessions.valid(cookie)
    clock.now += 59
    assert sessions.valid(cookie)
    clock.now += 2
    assert not sessions.valid(cookie)


def test_sessions_when_cookie_forged_or_tampered_then_refused() -> None:
    clock = Clock()
    sessions = Sessions(Secret("pw"), 60, clock)
    session_id, expiry, signature = sessions.issue().split(".")
    later = str(int(expiry) + 3600)
    assert not sessions.valid(f"{session_id}.{later}.{signature}")  # a longer life
    assert not sessions.valid(f"{session_id}.{expiry}.{'0' * len(signature)}")
    assert not sessions.valid(f"{session_id}.{expiry}")
    assert not sessions.valid("")
    assert not sessions.valid(None)
    other = Sessions(Secret("another password"), 60, clock)
    assert not sessions.valid(other.issue())  # a new password logs everyone out


def test_sessions_when_same_password_then_replicas_accept_each_others_cookies() -> None:
    assert Sessions(Secret("pw"), 60).valid(Sessions(Secret("pw"), 60).issue())


def test_read_password_when_file_ends_in_newline_then_dropped_and_kept_secret(
    tmp_path: Path,
) -> None:
    path = tmp_path / "password"
    path.write_text("hunter2\n")
    password = read_password(path)
    assert password.reveal() == "hunter2"
    assert "hunter2" not in repr(password)


def test_read_password_when_empty_or_missing_then_config_error_without_content(
    tmp_path: Path,
) -> None:
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        read_password(tmp_path / "empty")
    with pytest.raises(ConfigError, match="FRAMEBUS_PASSWORD_FILE"):
        read_password(tmp_path / "missing")


def test_login_sessions_when_password_mode_without_file_then_config_error() -> None:
    with pytest.raises(ConfigError, match="FRAMEBUS_PASSWORD_FILE"):
        login_sessions(LiveSettings())
    assert login_sessions(LiveSettings(auth=LiveAuth.OFF, http_host="127.0.0.1")) is None


def test_live_settings_when_auth_off_on_a_public_address_then_refused() -> None:
    with pytest.raises(ConfigError, match="auth"):
        LiveSettings(auth=LiveAuth.OFF, http_host="0.0.0.0")  # noqa: S104 - the refused case
