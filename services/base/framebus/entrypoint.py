"""What every service's `python -m` entry point shares: flags, logging, signals, exit codes.

A service's `__main__` passes its settings class and its `run(settings, stop)`; this module builds
the flags from the settings (the same `FRAMEBUS_*` variables apply), configures logging, installs
the process's only SIGTERM/SIGINT handlers, and turns a `FramebusError` into a message and exit 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from framebus import settings as cfg
from framebus.errors import FramebusError
from framebus.logs import configure_logging

EXIT_ERROR = 2  # a FramebusError: bad setting, missing model, unreachable broker, ...
EXIT_INTERRUPTED = 130  # Ctrl-C before the handlers were installed (shell convention: 128 + 2)


class ServiceSettings(Protocol):
    """What the entry point reads from a service's settings."""

    @property
    def log_level(self) -> str:
        """Log level name: debug, info, warning, error."""
        ...


S = TypeVar("S", bound=ServiceSettings)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM (Kubernetes, `docker stop`) or SIGINT (Ctrl-C).

    The service drains and flushes instead of dying mid-record. These are the process's only
    handlers: a service's `run` must not install its own. A repeated signal only logs again (a
    forced exit would drop the records the producer still holds; SIGKILL remains for that).
    Call from the main thread, once.
    """
    stop = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        logging.getLogger("framebus").info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def service_main(
    prog: str,
    description: str | None,
    settings_cls: type[S],
    run: Callable[[S, threading.Event], int],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse flags and `FRAMEBUS_*` variables into `settings_cls`, then run the service.

    Returns the process exit code: `run`'s, or 2 with the error on stderr for a `FramebusError`.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    cfg.add_arguments(parser, settings_cls)
    args = parser.parse_args(argv)
    try:
        settings = cfg.load(settings_cls, os.environ, args)
        configure_logging(settings.log_level)
        return run(settings, stop_on_signals())
    except FramebusError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
