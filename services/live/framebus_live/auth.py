"""The page's login: a password, then a signed session cookie. Pure (no aiohttp).

A cookie is `<session id>.<expiry, unix seconds>.<HMAC-SHA256 of both>`. The key is derived
from the password, so every replica with the same password accepts the same cookies, and a new
password logs everyone out. Nothing is stored on the server.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from framebus.errors import ConfigError
from framebus.settings import Secret

COOKIE = "framebus_live_session"
_KEY_LABEL = b"framebus live session key"


def read_password(path: Path) -> Secret:
    """The password in `path` (one trailing newline dropped); ConfigError if unreadable or empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"FRAMEBUS_PASSWORD_FILE (--password-file): cannot read {path}: {exc.strerror}"
        ) from None
    password = text.removesuffix("\n").removesuffix("\r")
    if not password:
        raise ConfigError(f"FRAMEBUS_PASSWORD_FILE (--password-file): {path} is empty")
    return Secret(password)


class Sessions:
    """Checks passwords, issues session cookies and verifies them."""

    def __init__(
        self, password: Secret, max_age_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self._password = password.reveal().encode()
        self._key = hmac.new(self._password, _KEY_LABEL, hashlib.sha256).digest()
        self.max_age_s = max_age_s
        self._clock = clock

    def password_matches(self, given: str) -> bool:
        """Whether `given` is the password (in constant time)."""
        return hmac.compare_digest(given.encode(), self._password)

    def issue(self) -> str:
        """A new session cookie's value, valid for `max_age_s`."""
        payload = f"{secrets.token_urlsafe(16)}.{int(self._clock() + self.max_age_s)}"
        return f"{payload}.{self._sign(payload)}"

    def valid(self, cookie: str | None) -> bool:
        """Whether `cookie` was issued here (same password) and has not expired."""
        if not cookie:
            return False
        payload, _, signature = cookie.rpartition(".")
        if not payload or not hmac.compare_digest(signature, self._sign(payload)):
            return False
        expiry = payload.rpartition(".")[2]
        return expiry.isdigit() and self._clock() < int(expiry)

    def _sign(self, payload: str) -> str:
        return hmac.new(self._key, payload.encode(), hashlib.sha256).hexdigest()
