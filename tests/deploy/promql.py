"""The metric names a PromQL expression (or a Grafana variable query) reads.

Not a PromQL parser: it blanks out everything that can hold an identifier that is not a metric
name (strings, label matchers, ranges and subqueries, grouping label lists, durations, numbers,
Grafana variables), then keeps the identifiers that are neither called like a function nor
keywords. Good for the queries a dashboard or a ScaledObject holds; tests of it are in
test_grafana_dashboard.py.
"""

from __future__ import annotations

import re

# Operators, modifiers and literals that look like identifiers (PromQL is case-sensitive for
# metric names, not for these).
KEYWORDS = frozenset(
    {
        # aggregation operators (may be followed by `by (...)` before their parenthesis)
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
        # binary and set operators, modifiers
        "and",
        "or",
        "unless",
        "atan2",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "start",
        "end",
        # float literals
        "inf",
        "nan",
    }
)

_NAME_MATCHER = re.compile(r"""__name__\s*=\s*["']([A-Za-z_:][A-Za-z0-9_:]*)["']""")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_]\w*|\[\[[^\]]*\]\]")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_DURATION = re.compile(r"(?<![\w:.])(?:\d+(?:ms|s|m|h|d|w|y))+(?![\w:])")
_NUMBER = re.compile(
    r"(?<![\w:.])(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?![\w:])"
)
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_VALUES = re.compile(r"^\s*label_values\s*\((?P<expr>.*),\s*[A-Za-z_]\w*\s*\)\s*$", re.S)
_QUERY_RESULT = re.compile(r"^\s*query_result\s*\((?P<expr>.*)\)\s*$", re.S)


def metric_names(expr: str) -> set[str]:
    """Every metric name `expr` selects (series names, with their _total/_bucket suffixes)."""
    names = set(_NAME_MATCHER.findall(expr))
    text = _STRING.sub(" ", expr)
    text = _GRAFANA_VARIABLE.sub(" 0 ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _DURATION.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    for match in _IDENTIFIER.finditer(text):
        name = match.group()
        called = text[match.end() :].lstrip().startswith("(")
        if not called and name.lower() not in KEYWORDS:
            names.add(name)
    return names


def variable_query_names(query: str) -> set[str]:
    """Metric names of a Grafana Prometheus variable query.

    `label_values(<selector>, <label>)` and `query_result(<expr>)` name metrics in their
    expression; `label_values(<label>)` and `metrics(<regex>)` name none.
    """
    for form in (_LABEL_VALUES, _QUERY_RESULT):
        match = form.match(query)
        if match:
            return metric_names(match.group("expr"))
    if re.match(r"^\s*(label_values|label_names|metrics)\s*\(", query):
        return set()
    return metric_names(query)
