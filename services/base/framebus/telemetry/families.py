"""Prometheus metric families built from what a stats object holds, for the services' collectors.

Each service's collector reads its stats at scrape time and yields families; these helpers turn a
mapping of label values to numbers into one family, so a collector lists its metrics and nothing
else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

LabelValues = str | tuple[str, ...]


def _labels(key: Any) -> list[str]:
    return [str(k) for k in key] if isinstance(key, tuple) else [str(key)]


def counters(
    name: str, doc: str, labels: Sequence[str], values: Mapping[Any, float]
) -> CounterMetricFamily:
    """A counter family with one sample per key (a label value, or a tuple of them), sorted."""
    return _filled(CounterMetricFamily(name, doc, labels=list(labels)), values)


def gauges(
    name: str, doc: str, labels: Sequence[str], values: Mapping[Any, float]
) -> GaugeMetricFamily:
    """A gauge family with one sample per key (a label value, or a tuple of them), sorted."""
    return _filled(GaugeMetricFamily(name, doc, labels=list(labels)), values)


F = TypeVar("F", CounterMetricFamily, GaugeMetricFamily)


def _filled(family: F, values: Mapping[Any, float]) -> F:
    for key, value in sorted(values.items(), key=lambda kv: _labels(kv[0])):
        family.add_metric(_labels(key), value)
    return family


def info(name: str, doc: str, label: str, value: str) -> GaugeMetricFamily:
    """A gauge of 1 whose one label names the current value (an enum, a provider)."""
    return gauges(name, doc, [label], {value or "none": 1})
