"""Which clip files the page may fetch, and the link the feed shows for a clip's URI. Pure.

Only regular `.mp4` and `.jpg` files inside the clips folder are served: a path that leaves it
(`..`, an absolute path, a symlink pointing out) is refused.
"""

from __future__ import annotations

import os.path
import urllib.parse
from pathlib import Path

ROUTE = "/clips/"
SERVED_SUFFIXES = (".mp4", ".jpg")


def served_file(root: Path, relative: str) -> Path | None:
    """The file `relative` names under `root`, or None when it is not one to serve."""
    base = root.resolve()
    try:
        path = (base / relative).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        return None
    if not path.is_relative_to(base) or path == base:
        return None
    if path.suffix.lower() not in SERVED_SUFFIXES or not path.is_file():
        return None
    return path


def link(uri: str | None, root: Path) -> dict[str, str] | None:
    """How the feed shows a clip's file: {"href"} to fetch, or {"text"} where it cannot link.

    A `file://` URI inside `root` becomes a link to /clips/...; an http(s) URI (a presigned
    object-store URL) is linked as it is; anything else (s3://, a file elsewhere) is shown as text.
    """
    if not uri:
        return None
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme in ("http", "https"):
        return {"href": uri}
    if parsed.scheme == "file":
        path = Path(os.path.normpath(urllib.parse.unquote(parsed.path)))
        base = root.resolve()
        if path.is_relative_to(base):
            relative = path.relative_to(base).as_posix()
            return {"href": ROUTE + urllib.parse.quote(relative)}
    return {"text": uri}
