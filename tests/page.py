"""The live page seen from outside, by a stranger and by a member who logged in.

Shared by the deployment tests (tests/containers, tests/k8s): status codes only, redirects left
unfollowed, so that a redirect to the login form is seen as one.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from typing import Any


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def stranger() -> urllib.request.OpenerDirector:
    """A client without a session."""
    return urllib.request.build_opener(NoRedirect())


def member() -> urllib.request.OpenerDirector:
    """A client that keeps the session cookie a login gives it."""
    return urllib.request.build_opener(
        NoRedirect(), urllib.request.HTTPCookieProcessor(CookieJar())
    )


def login_form(password: str) -> bytes:
    return urllib.parse.urlencode({"password": password}).encode()


def status(opener: urllib.request.OpenerDirector, url: str, data: bytes | None = None) -> int:
    """The HTTP status `url` answers (a POST of `data` when given)."""
    try:
        with opener.open(url, data=data, timeout=10) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
