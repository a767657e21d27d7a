"""Which execution provider really ran the graph, from ONNX Runtime's profile of one run (pure).

A session's providers are those registered, not those that run nodes: TensorRT can be registered
and take no node (an unsupported op everywhere, a subgraph below its minimum size), leaving the
graph to CUDA or the CPU. The engine profiles its first run; each node's kernel-time event names
the provider that ran it, and the provider with the most kernel time ran the graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def provider_times(events: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Microseconds of node kernel time per provider in a profile (Chrome trace events)."""
    times: dict[str, float] = {}
    for event in events:
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        provider = str((event.get("args") or {}).get("provider", ""))
        if provider:
            times[provider] = times.get(provider, 0.0) + float(event.get("dur", 0))
    return times


def time_shares(times: Mapping[str, float]) -> dict[str, float]:
    """Each provider's fraction of the kernel time (each 0 when nothing was timed)."""
    total = sum(times.values())
    return {p: (t / total if total else 0.0) for p, t in sorted(times.items())}


def graph_provider(times: Mapping[str, float], registered: str) -> str:
    """The provider that ran most of the graph; `registered` when the profile timed no node."""
    if not times:
        return registered
    return max(times.items(), key=lambda item: item[1])[0]


def idle_note(times: Mapping[str, float], registered: str) -> str | None:
    """A warning when the first registered provider ran no node of the graph, else None."""
    if not times or times.get(registered, 0.0) > 0:
        return None
    ran = graph_provider(times, registered)
    return (
        f"{registered} is registered first but ran none of the graph's nodes: {ran} ran it "
        f"(kernel time by provider: {dict(time_shares(times))}); set FRAMEBUS_PROVIDERS to what "
        "runs, or see why the provider takes no node (unsupported ops, its minimum subgraph size)"
    )
