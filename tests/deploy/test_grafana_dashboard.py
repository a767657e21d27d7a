"""The Grafana dashboard the chart ships: a valid layout, one datasource variable the sidecar can
load as it is, and queries that read only metrics the services really export."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from itertools import product
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.helmutil import CHART, K8S_VERSION, Helm, Rendered
from tests.deploy.promql import metric_names, variable_query_names

pytestmark = pytest.mark.deploy

DASHBOARD = CHART / "dashboards" / "framebus.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    top = dashboard["panels"]
    return [*top, *(p for row in top for p in row.get("panels", []))]


def _queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target."""
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['id']} ({panel['title']}) {target['refId']}", target["expr"]


def _variable_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            yield (
                f"variable {variable['name']}",
                query["query"] if isinstance(query, dict) else query,
            )


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair of the JSON document, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


# --- layout --------------------------------------------------------------------------------


def test_dashboard_when_parsed_then_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert all(isinstance(i, int) and i > 0 for i in ids)


def test_dashboard_when_laid_out_then_panels_fit_24_columns_and_never_overlap(
    dashboard: dict[str, Any],
) -> None:
    taken: dict[tuple[int, int], int] = {}
    for panel in dashboard["panels"]:  # collapsed rows' panels are placed when expanded
        grid = panel["gridPos"]
        assert set(grid) >= {"x", "y", "w", "h"}, panel["id"]
        x, y, w, h = (grid[k] for k in ("x", "y", "w", "h"))
        assert all(isinstance(v, int) for v in (x, y, w, h)), panel["id"]
        assert x >= 0 and y >= 0 and w >= 1 and h >= 1, panel["id"]
        assert x + w <= GRID_COLUMNS, f"panel {panel['id']} ends at column {x + w}"
        for cell in product(range(x, x + w), range(y, y + h)):
            assert cell not in taken, f"panels {taken[cell]} and {panel['id']} overlap at {cell}"
            taken[cell] = panel["id"]


def test_layout_check_when_two_panels_overlap_then_it_fails() -> None:
    overlapping = {
        "panels": [
            {"id": 1, "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8}},
            {"id": 2, "gridPos": {"x": 6, "y": 4, "w": 12, "h": 8}},
        ]
    }
    with pytest.raises(AssertionError, match="overlap"):
        test_dashboard_when_laid_out_then_panels_fit_24_columns_and_never_overlap(overlapping)


# --- datasource ----------------------------------------------------------------------------


def test_dashboard_when_loaded_by_the_sidecar_then_it_has_a_prometheus_datasource_variable(
    dashboard: dict[str, Any],
) -> None:
    (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert variable["name"] == "datasource"
    assert variable["query"] == "prometheus"


def test_dashboard_when_loaded_by_the_sidecar_then_nothing_needs_import_time_inputs(
    dashboard: dict[str, Any],
) -> None:
    """The sidecar copies the file as it is: no `__inputs`, no `${DS_...}` left to resolve."""
    text = DASHBOARD.read_text(encoding="utf-8")
    assert "__inputs" not in dashboard
    assert not re.search(r"\$\{?DS_", text)
    # Every datasource reference anywhere (panels, targets, variables) is the variable.
    references = [value for key, value in _walk(dashboard) if key == "datasource"]
    assert references
    assert all(ref == DATASOURCE for ref in references), {json.dumps(r) for r in references}


def test_dashboard_when_any_panel_shows_data_then_it_and_its_targets_use_the_variable(
    dashboard: dict[str, Any],
) -> None:
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            assert not panel.get("targets"), panel["id"]
            continue
        assert panel["datasource"] == DATASOURCE, panel["id"]
        assert panel["targets"], f"panel {panel['id']} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, (panel["id"], target["refId"])
            assert target["expr"].strip(), (panel["id"], target["refId"])


# --- queries -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (camera, outcome) (rate(a_total{camera=~"$camera",x="b{c}"}[$__rate_interval]))',
            {"a_total"},
        ),
        (
            'histogram_quantile(0.99, sum by (le) (rate(h_bucket{n=~"$namespace"}[5m])))',
            {"h_bucket"},
        ),
        ("sum(rate(s_sum[1m])) / sum(rate(s_count[1m])) > bool 0.5", {"s_sum", "s_count"}),
        ("x unless on (pod) group_left y offset 1h30m", {"x", "y"}),
        ('max without (partition) (lag{topic="t"}) * 1e3 and ignoring(a) z @ end()', {"lag", "z"}),
        ('{__name__="named_total", a="b"} or count(q == 1)', {"named_total", "q"}),
        ("rate(c[5m:30s]) + -Inf + NaN + 0x1F + .5e-3 - ${factor}", {"c"}),
        ("sum by(le)(x_bucket) / on() group_right(pod) max(y)", {"x_bucket", "y"}),
    ],
)
def test_metric_names_when_expression_has_labels_functions_and_keywords_then_only_metrics(
    expr: str, names: set[str]
) -> None:
    assert metric_names(expr) == names


def test_variable_query_names_when_label_values_then_the_selector_metric_only() -> None:
    query = 'label_values(m_total{namespace=~"$namespace"}, camera)'
    assert variable_query_names(query) == {"m_total"}
    assert variable_query_names("label_values(camera)") == set()


def _named(queries: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each metric the (where, query) pairs name -> where; a query naming none fails the test."""
    named = {}
    for where, expr in queries:
        names = (variable_query_names if where.startswith("variable") else metric_names)(expr)
        assert names, f"{where} names no metric: {expr}"
        for name in names:
            named[name] = where
    return named


def _unexported(queries: Iterable[tuple[str, str]], exported: set[str]) -> dict[str, str]:
    """Each metric the queries name that is not in `exported` -> where it is named."""
    return {name: where for name, where in _named(queries).items() if name not in exported}


def test_dashboard_when_queried_then_every_metric_it_names_is_exported_by_a_service(
    dashboard: dict[str, Any], exported_metrics: dict[str, set[str]]
) -> None:
    exported = set().union(*exported_metrics.values())
    queries = [*_queries(dashboard), *_variable_queries(dashboard)]
    missing = _unexported(queries, exported)
    assert not missing, f"not exported by any service's /metrics: {missing}"
    named = _named(queries)
    # Each service's own metrics are shown (the live service's are left to its own work).
    for service, names in exported_metrics.items():
        assert names & set(named), f"no panel shows a {service} metric"


def test_metric_check_when_a_name_is_made_up_then_it_is_caught(
    exported_metrics: dict[str, set[str]],
) -> None:
    exported = set().union(*exported_metrics.values())
    queries = [
        ("panel 1 A", 'sum(rate(framebus_inferencer_frames_infered_total{status="INFERRED"}[5m]))'),
        # A histogram is stored as _bucket/_sum/_count: its bare name is no series.
        (
            "panel 2 A",
            "histogram_quantile(0.99, rate(framebus_inferencer_e2e_latency_seconds[5m]))",
        ),
        ("panel 3 A", "max(framebus_inferencer_consumer_lag_seconds)"),
        ("variable camera", "label_values(framebus_inferencer_consumer_lag_seconds, camera)"),
    ]
    assert _unexported(queries, exported) == {
        "framebus_inferencer_frames_infered_total": "panel 1 A",
        "framebus_inferencer_e2e_latency_seconds": "panel 2 A",
    }


def test_dashboard_when_showing_quantiles_then_they_come_from_bucket_rates_by_le(
    dashboard: dict[str, Any],
) -> None:
    quantiles = [(w, e) for w, e in _queries(dashboard) if "histogram_quantile" in e]
    assert quantiles
    for where, expr in quantiles:
        assert re.search(r"rate\(\w+_bucket\{", expr), where
        assert re.search(r"by \((?:[\w, ]*, )?le(?:, [\w, ]*)?\)", expr), where


@pytest.mark.parametrize(
    ("figure", "metric"),
    [
        ("frames in per camera", "framebus_decoder_frames_total"),
        ("frames out per camera", "framebus_tracker_frames_total"),
        ("end-to-end latency", "framebus_inferencer_e2e_latency_seconds_bucket"),
        ("lag in seconds", "framebus_inferencer_consumer_lag_seconds"),
        ("lag in messages", "framebus_inferencer_consumer_lag_messages"),
        ("batch sizes", "framebus_inferencer_batch_size_bucket"),
        ("decoder drops by reason", "framebus_decoder_frames_dropped_total"),
        ("inferencer drops by reason", "framebus_inferencer_frames_dropped_total"),
        ("execution provider", "framebus_inferencer_provider"),
        ("GPU memory", "framebus_inferencer_memory_bytes"),
        ("tracks", "framebus_tracker_active_tracks"),
        ("alerts", "framebus_alerts_published_total"),
    ],
)
def test_dashboard_when_opened_then_it_shows_each_figure_the_issue_asks_for(
    dashboard: dict[str, Any], figure: str, metric: str
) -> None:
    assert any(metric in metric_names(e) for _, e in _queries(dashboard)), figure


# --- in the chart --------------------------------------------------------------------------


def _dashboard_config_map(result: Rendered) -> dict[str, Any]:
    (config_map,) = result.of_component("ConfigMap", "dashboards")
    return config_map


def test_chart_when_dashboards_enabled_then_a_sidecar_config_map_carries_the_file(
    helm: Helm,
) -> None:
    result = helm.render(
        sets=[
            "grafana.dashboards.enabled=true",
            "grafana.dashboards.label=team_dashboards",
            "string:grafana.dashboards.labelValue=video",
            "grafana.dashboards.namespace=monitoring",
            "grafana.dashboards.folderAnnotation=grafana_folder",
            "grafana.dashboards.folder=Video analytics",
        ]
    )
    config_map = _dashboard_config_map(result)
    meta = config_map["metadata"]
    assert meta["labels"]["team_dashboards"] == "video"
    assert meta["namespace"] == "monitoring"
    assert meta["annotations"] == {"grafana_folder": "Video analytics"}
    assert config_map["data"] == {"framebus.json": DASHBOARD.read_text(encoding="utf-8")}
    kubernetes_validate.validate(config_map, K8S_VERSION, strict=True)


def test_chart_when_dashboards_enabled_with_defaults_then_kube_prometheus_stack_finds_it(
    helm: Helm,
) -> None:
    meta = _dashboard_config_map(helm.render(sets=["grafana.dashboards.enabled=true"]))["metadata"]
    assert meta["labels"]["grafana_dashboard"] == "1"
    assert meta["namespace"] == "vision"  # the release's
    assert meta["annotations"] == {"k8s-sidecar-target-directory": "framebus"}


def test_chart_when_no_folder_then_no_folder_annotation(helm: Helm) -> None:
    sets = ["grafana.dashboards.enabled=true", "grafana.dashboards.folder="]
    assert "annotations" not in _dashboard_config_map(helm.render(sets=sets))["metadata"]


def test_chart_when_dashboards_off_by_default_then_no_config_map(
    rendered: dict[str, Rendered],
) -> None:
    assert not rendered["default"].of_component("ConfigMap", "dashboards")
    assert _dashboard_config_map(rendered["gpu-keda"])["metadata"]["namespace"] == "monitoring"
