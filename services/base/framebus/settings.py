"""Typed, frozen settings built from defaults, `FRAMEBUS_*` environment variables and CLI flags.

Each service declares one frozen dataclass whose fields use `setting(...)`. This module turns such a
class into argparse flags, reads it from an environment mapping, and writes its reference table, so
the flag, the variable and the documentation of a setting can never drift apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from framebus.errors import ConfigError

ENV_PREFIX = "FRAMEBUS_"
T = TypeVar("T")


class Secret:
    """A string that never shows itself in repr, str, logs or error messages."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """Return the clear value; call only where it is handed to a client library."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def setting(default: Any, help: str, *, choices: tuple[str, ...] | None = None) -> Any:  # noqa: A002
    """Declare a settings field with its default and one line of documentation."""
    meta = {"help": help, "choices": choices}
    if isinstance(default, list | dict):
        raise TypeError("mutable defaults are not allowed; use a tuple")
    return dataclasses.field(default=default, metadata=meta)


def env_name(field_name: str) -> str:
    """Environment variable that sets a field (`max_batch` -> `FRAMEBUS_MAX_BATCH`)."""
    return ENV_PREFIX + field_name.upper()


def flag_name(field_name: str) -> str:
    """CLI flag that sets a field (`max_batch` -> `--max-batch`)."""
    return "--" + field_name.replace("_", "-")


def _label(field_name: str) -> str:
    return f"{env_name(field_name)} ({flag_name(field_name)})"


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def parse_value(tp: Any, raw: str, field_name: str) -> Any:
    """Parse one raw string into the field's type, or raise ConfigError naming the setting."""
    inner, optional = _strip_optional(tp)
    if optional and raw.strip().lower() in ("", "none", "null"):
        return None
    try:
        return _parse_as(inner, raw)
    except (ValueError, KeyError) as exc:
        shown = "***" if inner is Secret else repr(raw)
        raise ConfigError(f"{_label(field_name)}: cannot use {shown}: {exc}") from None


def _parse_as(tp: Any, raw: str) -> Any:
    if tp is bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if tp is int:
        return int(raw.replace("_", ""))
    if tp is float:
        return float(raw)
    if tp is str:
        return raw
    if tp is Secret:
        return Secret(raw)
    if tp is Path:
        return Path(raw).expanduser()
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(raw.strip().lower())
        except ValueError:
            allowed = ", ".join(str(m.value) for m in tp)
            raise ValueError(f"expected one of {allowed}") from None
    if typing.get_origin(tp) is tuple:
        (item_type, *_rest) = typing.get_args(tp)
        return tuple(_parse_as(item_type, part.strip()) for part in raw.split(",") if part.strip())
    raise ValueError(f"unsupported setting type {tp!r}")


def _fields(cls: type[Any]) -> Iterator[tuple[dataclasses.Field[Any], Any]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        yield f, hints[f.name]


def add_arguments(parser: argparse.ArgumentParser, cls: type[Any]) -> None:
    """Add one `--flag` per field of a settings class (recursing into nested settings)."""
    for f, tp in _fields(cls):
        if dataclasses.is_dataclass(tp):
            add_arguments(parser, tp)  # type: ignore[arg-type]
            continue
        if flag_name(f.name) in parser._option_string_actions:  # shared nested settings
            continue
        parser.add_argument(
            flag_name(f.name),
            dest=f.name,
            default=None,
            metavar=f.name.upper(),
            help=f"{f.metadata.get('help', '')} [env {env_name(f.name)}]",
        )


def load(cls: type[T], env: Mapping[str, str], args: argparse.Namespace | None = None) -> T:
    """Build a settings object: defaults, then `FRAMEBUS_*` variables, then CLI flags."""
    flags = vars(args) if args is not None else {}
    values: dict[str, Any] = {}
    for f, tp in _fields(cls):
        if dataclasses.is_dataclass(tp):
            values[f.name] = load(tp, env, args)  # type: ignore[arg-type]
            continue
        raw = flags.get(f.name)
        if raw is None:
            raw = env.get(env_name(f.name))
        if raw is None and typing.get_origin(tp) is not tuple and _strip_optional(tp)[0] is Secret:
            raw = _read_secret_file(env, f.name)
        if raw is not None:
            values[f.name] = parse_value(tp, str(raw), f.name)
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {cls.__name__}: {exc}") from None


def _read_secret_file(env: Mapping[str, str], field_name: str) -> str | None:
    """Secrets may also come from a file named by `FRAMEBUS_<NAME>_FILE` (Kubernetes Secrets)."""
    path = env.get(env_name(field_name) + "_FILE")
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"{env_name(field_name)}_FILE: cannot read the file it names ({exc.strerror})"
        ) from None


def check(condition: bool, field_name: str, requirement: str) -> None:
    """Raise ConfigError naming the setting unless `condition` holds; for `__post_init__`."""
    if not condition:
        raise ConfigError(f"{_label(field_name)}: {requirement}")


def reference_rows(
    cls: type[Any], skip_nested: bool = False
) -> Iterator[tuple[str, str, str, str]]:
    """Yield (env var, flag, default, meaning) for every field, for the configuration reference."""
    for f, tp in _fields(cls):
        if dataclasses.is_dataclass(tp):
            if not skip_nested:
                yield from reference_rows(tp)  # type: ignore[arg-type]
            continue
        default = f.default
        if isinstance(default, enum.Enum):
            shown = str(default.value)
        elif isinstance(default, tuple):
            shown = ",".join(str(getattr(d, "value", d)) for d in default)
        elif default is None:
            shown = "(unset)"
        else:
            shown = str(default)
        meaning = f.metadata.get("help", "")
        inner, _ = _strip_optional(tp)
        if isinstance(inner, type) and issubclass(inner, enum.Enum):
            meaning += " One of: " + ", ".join(f"`{m.value}`" for m in inner) + "."
        if inner is Secret:
            meaning += f" Or put it in a file named by `{env_name(f.name)}_FILE`."
        yield env_name(f.name), flag_name(f.name), shown, meaning


def reference_markdown(title: str, cls: type[Any], skip_nested: bool = False) -> str:
    """Render one settings class as a Markdown table (nested settings skipped on request)."""
    lines = [f"## {title}", "", "| Variable | Flag | Default | Meaning |", "|---|---|---|---|"]
    for env, flag, default, meaning in reference_rows(cls, skip_nested):
        lines.append(f"| `{env}` | `{flag}` | `{default}` | {meaning} |")
    return "\n".join(lines) + "\n"


# ---- settings every service declares the same way -------------------------------------------

MAX_STAGE_TIMEOUT_S = 240.0  # below librdkafka's max.poll.interval.ms (300 s)


def http_port_setting() -> Any:
    """`http_port`: where the service serves /healthz, /livez, /readyz and /metrics."""
    return setting(0, "Port of /healthz, /readyz and /metrics (0 = off).")


def log_level_setting() -> Any:
    """`log_level`."""
    return setting("info", "Log level: debug, info, warning, error.")


def stop_after_idle_setting(what: str) -> Any:
    """`stop_after_idle_s`: for demos and tests, an exit after `what` stop coming."""
    return setting(
        0.0, f"Exit after this many seconds without {what} (0 = run forever; demos and tests)."
    )


def stage_timeout_setting() -> Any:
    """`stage_timeout_s`: the watchdog's budget (`framebus.telemetry.watchdog`)."""
    return setting(
        60.0,
        "A stage stuck this long in one call (a Kafka transactional call or commit, an engine "
        "run) or in its loop is a stall: every thread's stack is logged, /livez and /readyz "
        "fail, and the process exits 70 to be restarted. Transactional calls time out at half.",
    )


def transactional_id_setting(group_field: str) -> Any:
    """`transactional_id` of an exactly-once service whose consumer group is `group_field`."""
    return setting(
        None, f"Kafka transactional.id of this instance; default: <{group_field}>-<hostname>."
    )


def check_run_settings(settings: Any) -> None:
    """Check the fields the helpers above declare, those `settings` has."""
    if hasattr(settings, "http_port"):
        check(0 <= settings.http_port <= 65535, "http_port", "must be a TCP port or 0")
    if hasattr(settings, "stop_after_idle_s"):
        check(settings.stop_after_idle_s >= 0, "stop_after_idle_s", "must be >= 0")
    if hasattr(settings, "stage_timeout_s"):
        check(
            1 <= settings.stage_timeout_s <= MAX_STAGE_TIMEOUT_S,
            "stage_timeout_s",
            f"must be between 1 and {MAX_STAGE_TIMEOUT_S:g} (below librdkafka's "
            "max.poll.interval.ms, 300 s)",
        )
