"""The login routes and the check in front of every other route (auth=password, docs/live.md)."""

from __future__ import annotations

import asyncio
import importlib.resources
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from framebus.telemetry.health import PATHS
from framebus_live.auth import COOKIE, Sessions
from framebus_live.telemetry import LiveMetrics

# Probes and scrapes come from the kubelet and Prometheus, which do not log in.
OPEN_PATHS = frozenset({*PATHS, "/login"})
WRONG_PASSWORD_DELAY_S = 1.0  # slows guessing down; the event loop serves others meanwhile

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def login_page(message: str = "") -> str:
    """The login form, with a (fixed, not user-given) message."""
    page = importlib.resources.files("framebus_live").joinpath("static", "login.html")
    return page.read_text(encoding="utf-8").replace("{message}", message)


def require_login(sessions: Sessions) -> Middleware:
    """Middleware: a request without a valid session cookie gets the login page's address.

    The page itself redirects to /login; anything else (the socket, /mjpeg, /clips) gets 401.
    """

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or sessions.valid(request.cookies.get(COOKIE)):
            return await handler(request)
        if request.method == "GET" and request.path == "/":
            raise web.HTTPSeeOther("/login")
        raise web.HTTPUnauthorized(text="log in first at /login")

    return check


class LoginRoutes:
    """GET /login (the form), POST /login (the password), POST /logout."""

    def __init__(self, sessions: Sessions, metrics: LiveMetrics) -> None:
        self.sessions = sessions
        self.metrics = metrics

    async def form(self, _request: web.Request) -> web.Response:
        """The login form."""
        return web.Response(text=login_page(), content_type="text/html")

    async def submit(self, request: web.Request) -> web.Response:
        """The right password: a session cookie and the page; a wrong one: 401 and the form."""
        form = await request.post()
        password = form.get("password")
        if not isinstance(password, str) or not self.sessions.password_matches(password):
            self.metrics.logins.labels("wrong_password").inc()
            await asyncio.sleep(WRONG_PASSWORD_DELAY_S)
            return web.Response(
                status=401, text=login_page("Wrong password."), content_type="text/html"
            )
        self.metrics.logins.labels("ok").inc()
        response = web.Response(status=303, headers={"Location": "/"})
        response.set_cookie(
            COOKIE,
            self.sessions.issue(),
            max_age=int(self.sessions.max_age_s),
            path="/",
            httponly=True,  # no script reads it
            samesite="Strict",  # no other site's page sends it (its forms, its sockets)
            secure=_https(request),
        )
        return response

    async def logout(self, _request: web.Request) -> web.Response:
        """Forget the cookie (the browser's copy; it stays valid until it expires)."""
        response = web.Response(status=303, headers={"Location": "/login"})
        response.del_cookie(COOKIE, path="/")
        return response


def _https(request: web.Request) -> bool:
    """Whether the browser reached us over HTTPS (directly, or through a TLS-ending proxy)."""
    return request.secure or request.headers.get("X-Forwarded-Proto", "") == "https"
