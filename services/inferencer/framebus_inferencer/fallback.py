"""What ONNX Runtime gave against what was asked: providers left out, failed, or with other options.

ONNX Runtime does not always run a session where it was asked to. Left to itself, a session
whose creation fails for a provider is created again with ORT's fallback list and that list's
default options (no memory limit, device 0), and a provider whose library does not load is left
out with a warning on stderr. The engine turns ORT's own fallback off and drops a failing
provider itself; this module says, from the session that resulted, what differs from the ask
(pure logic: the engine passes in what ORT answered).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from framebus_inferencer.providers import GPU_PROVIDERS


class MismatchKind(enum.StrEnum):
    """How a provider asked for did not run as asked (the values are metric labels)."""

    FAILED = "failed"  # creating the session with it first raised; it was dropped
    NOT_LOADED = "not_loaded"  # ONNX Runtime created the session without it
    OPTIONS = "options"  # it loaded, with other options than asked


@dataclass(frozen=True)
class ProviderMismatch:
    """One provider asked for that does not run as asked, and why."""

    provider: str
    kind: MismatchKind
    reason: str

    def __str__(self) -> str:
        return f"{self.provider} {self.kind.value}: {self.reason}"


# Options compared with what the session reports, and how to read ORT's strings for each. Only
# those whose loss matters (the device, the memory cap, the precision) and whose form is plain.
_COMPARED: dict[str, Callable[[str], Any]] = {
    "device_id": int,
    "gpu_mem_limit": int,
    "trt_max_workspace_size": int,
    "trt_fp16_enable": lambda v: v.strip().lower() in ("1", "true"),
}


def option_differences(
    asked: Mapping[str, Any], got: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Options whose value in the session differs from the one asked: name -> (asked, got).

    ORT reports every option as a string; an option it does not report, or reports in a form not
    read here, is not taken for a difference.
    """
    out: dict[str, tuple[str, str]] = {}
    for key, read in _COMPARED.items():
        if key not in asked or key not in got:
            continue
        try:
            want, have = read(str(asked[key])), read(got[key])
        except ValueError:
            continue
        if want != have:
            out[key] = (str(asked[key]), got[key])
    return out


def session_mismatches(
    asked: Sequence[tuple[str, Mapping[str, Any]]],
    loaded: Sequence[str],
    loaded_options: Mapping[str, Mapping[str, str]],
    why_not_loaded: Callable[[str], str],
) -> list[ProviderMismatch]:
    """Providers of the chain `asked` that the session left out or loaded with other options."""
    out: list[ProviderMismatch] = []
    for name, options in asked:
        if name not in loaded:
            out.append(ProviderMismatch(name, MismatchKind.NOT_LOADED, why_not_loaded(name)))
            continue
        diffs = option_differences(options, loaded_options.get(name, {}))
        if diffs:
            said = ", ".join(f"{k} asked {a}, got {g}" for k, (a, g) in sorted(diffs.items()))
            out.append(ProviderMismatch(name, MismatchKind.OPTIONS, said))
    return out


def gpu_shortfall(loaded: Sequence[str], mismatches: Sequence[ProviderMismatch]) -> str | None:
    """Why `require_gpu` must refuse this session, or None when a GPU provider runs as asked."""
    wrong = {m.provider for m in mismatches if m.kind is MismatchKind.OPTIONS}
    good = [p for p in loaded if p in GPU_PROVIDERS and p not in wrong]
    if good:
        return None
    why = "; ".join(str(m) for m in mismatches) or "no GPU provider was asked for"
    return f"no GPU provider loaded as asked (loaded {list(loaded)}): {why}"


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception as one short line: ORT's messages run to pages of stack and paths."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:limit]}"
