"""The `tools` extra: packages `framebus tune` and `loadtest` need and the service images lack."""

from __future__ import annotations

import importlib.util

from framebus.errors import FramebusError


def require_tools_extra(command: str, *modules: str) -> None:
    """Fail with the install command when a package of the `tools` extra is missing.

    matplotlib and tqdm are not core dependencies: the service images install without them.
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise FramebusError(
            f"`framebus {command}` needs {' and '.join(missing)}, from the tools extra: "
            "pip install 'framebus[tools]'"
        )
