"""docs/grafana-dashboard.json: it loads, shows what issue 16 asks for, and every
query names only metrics /metrics exports (a renamed metric breaks this test, not a
deployer's dashboard)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from infra.metrics import METRICS, exported_sample_names

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
METRIC_NAME = re.compile(r"\bvigil_[a-z0-9_]+")


def queries(dashboard: dict) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    found += [v["query"] for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "query"]
    return found


def test_every_query_names_an_exported_metric_and_nothing_else():
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_sample_names()
    exprs = queries(dashboard)
    assert len(exprs) >= 10
    for expr in exprs:
        names = set(METRIC_NAME.findall(expr))
        assert names, f"query names no Vigil metric: {expr}"
        assert names <= exported, f"{expr}: {sorted(names - exported)} are not exported"
        assert expr.count("(") == expr.count(")"), expr


def test_the_dashboard_shows_restarts_latencies_sweep_lag_and_deliveries():
    dashboard = json.loads(DASHBOARD.read_text())
    by_title = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in dashboard["panels"]}
    shown = " ".join(by_title.values())
    for metric in (
        "vigil_restarts_total",
        "vigil_detection_latency_seconds_bucket",
        "vigil_restart_latency_seconds_bucket",
        "vigil_monitor_sweep_lag_seconds_bucket",
        "vigil_notification_deliveries_total",
        "vigil_notification_delivery_latency_seconds_bucket",
    ):
        assert metric in shown, metric
    assert "by (cause" in by_title["Restarts by cause"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    # Imported into any Grafana: the data source is an input, not this machine's uid.
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    assert all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in dashboard["panels"])


def test_every_exported_family_appears_on_the_dashboard():
    shown = " ".join(queries(json.loads(DASHBOARD.read_text())))
    missing = [m.name for m in METRICS.values() if not any(s in shown for s in m.samples)]
    assert not missing, missing
