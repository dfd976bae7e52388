"""The Grafana dashboards, and the Prometheus Operator's copy of the alert rules, built from here.

    python3 deploy/monitoring/build_monitoring.py           # write them
    python3 deploy/monitoring/build_monitoring.py --check   # exit 1 naming each file out of date

Writes `deploy/monitoring/dashboards/slotflow-*.json` (an overview and one per service, each a
Grafana dashboard with a Prometheus data source variable and a namespace variable) and the Helm
chart's copy of `deploy/monitoring/alerts.yaml` (`deploy/helm/slotflow/files/alerts.yaml`, which its
PrometheusRule template reads; `deploy/kubernetes/monitoring/prometheusrule.yaml` is that template
rendered by `deploy/helm/build_kubernetes.py`). The dashboards are data here, not hand-edited
JSON, so a panel's query is reviewed as one line; `tests/unit/deploy/test_monitoring.py` fails
when a committed file differs from what this writes, and `tests/integration/monitoring` checks every
metric a query names exists on the running services (docs/operations.md, "Dashboards and alerts").
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DASHBOARDS = HERE / "dashboards"
ALERTS = HERE / "alerts.yaml"
#: The Helm chart's copy of the alert rules: its PrometheusRule template reads them (a chart reads
#: no file outside its directory), and deploy/kubernetes/monitoring/prometheusrule.yaml is that
#: template rendered (deploy/helm/build_kubernetes.py).
CHART_ALERTS = ROOT / "deploy" / "helm" / "slotflow" / "files" / "alerts.yaml"

#: Every query is scoped to the namespace variable (one Prometheus may watch staging and production).
NS = 'namespace=~"$namespace"'
#: The window of every rate.
WINDOW = "$__rate_interval"


@dataclass(frozen=True)
class Panel:
    """One time series (or stat) panel: a title, what it shows, and its queries (legend, expr)."""

    title: str
    description: str
    queries: tuple[tuple[str, str], ...]
    unit: str = "short"
    kind: str = "timeseries"
    stacked: bool = False


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = field(default=("slotflow",))


def quantile(q: float, metric: str, by: str = "") -> str:
    """The ``q`` quantile of histogram ``metric`` over the window, summed over every pod."""
    group = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{NS}}}[{WINDOW}])))"


def rate(metric: str, by: str = "", selector: str = "") -> str:
    """Per-second rate of counter ``metric`` (its `_total` sample), summed (by ``by``)."""
    labels = f"{NS}, {selector}" if selector else NS
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}_total{{{labels}}}[{WINDOW}]))"


def gauge(metric: str, by: str = "", how: str = "sum") -> str:
    grouping = f" by ({by})" if by else ""
    return f"{how}{grouping} ({metric}{{{NS}}})"


# -- the panels each dashboard shares ----------------------------------------------------------

LATENESS = Panel(
    "Firing lateness (ticker)",
    "Database time a slot's JobDue was staged minus its fire time: how late the ticker fires. "
    "Alert SlotflowFiringLate.",
    (
        ("p50", quantile(0.5, "slotflow_ticker_fire_lateness_seconds")),
        ("p99", quantile(0.99, "slotflow_ticker_fire_lateness_seconds")),
    ),
    unit="s",
)
OUTCOMES = Panel(
    "Runs by outcome (claimer)",
    "Every attempt that ended and every run the overlap policy skipped, by outcome "
    "(completed, retrying, dead_lettered, cancelled, held, skipped). Alert SlotflowRunsDeadLettered.",
    (("{{outcome}}", rate("slotflow_claimer_run_outcomes", by="outcome")),),
    unit="ops",
    stacked=True,
)
DLQ_DEPTH = Panel(
    "DLQ depth",
    "Dead letters parked now, by reason; each one is a run, command or event waiting for an "
    "operator. Alert SlotflowDeadLettersWaiting.",
    (("{{reason}}", gauge("slotflow_dlq_parked_entries", by="reason", how="max")),),
    stacked=True,
)
DLQ_AGE = Panel(
    "Oldest parked dead letter",
    "Age of the oldest parked entry, by the database clock.",
    (("oldest", gauge("slotflow_dlq_oldest_parked_age_seconds", how="max")),),
    unit="s",
)
DECISION_LATENCY = Panel(
    "Workflow decision latency (orchestrator)",
    "One decision transaction, lease check to commit. Alert SlotflowDecisionsSlow.",
    (
        ("p50", quantile(0.5, "slotflow_orchestrator_decision_seconds")),
        ("p99", quantile(0.99, "slotflow_orchestrator_decision_seconds")),
    ),
    unit="s",
)
OUTBOX_BACKLOG = Panel(
    "Outbox backlog",
    "Events staged in each service's outbox and not yet published: a backlog that grows is a relay "
    "that cannot publish. Alert SlotflowOutboxBacklog.",
    tuple(
        (service, gauge(f"slotflow_{service}_outbox_backlog", how="max"))
        for service in ("ticker", "claimer", "orchestrator", "dlq")
    ),
)
CONSUMER_LAG = Panel(
    "Consumer lag by group",
    "Records each consumer group is behind the end of its topics, summed over partitions. "
    "Alert SlotflowConsumerLagging.",
    (("{{group}}", gauge("slotflow_kafka_consumer_lag", by="group")),),
)


def lag_of(service_group: str) -> Panel:
    """The lag of one service's groups, per topic and partition."""
    return Panel(
        "Consumer lag",
        "Records behind per topic and partition (slotflow_kafka_consumer_lag).",
        (
            (
                "{{topic}}[{{partition}}]",
                f'max by (topic, partition) (slotflow_kafka_consumer_lag{{{NS}, group=~".*{service_group}.*"}})',
            ),
        ),
    )


SERVER_ERROR_SHARE = (
    rate("slotflow_api_requests", selector='status=~"5.."') + " / " + rate("slotflow_api_requests")
)

OVERVIEW = Dashboard(
    "slotflow-overview",
    "slotflow / overview",
    "The three promises at a glance: slots fire on time, runs finish, nothing waits unseen.",
    (
        Row(
            "Promises",
            (
                LATENESS,
                Panel(
                    "Slots fired",
                    "JobDue staged per second, by kind (scheduled, retry, manual, backfill, activity).",
                    (("{{kind}}", rate("slotflow_ticker_slots_fired", by="kind")),),
                    unit="ops",
                    stacked=True,
                ),
                OUTCOMES,
                DLQ_DEPTH,
            ),
        ),
        Row("Workflows", (DECISION_LATENCY,)),
        Row("Plumbing", (OUTBOX_BACKLOG, CONSUMER_LAG)),
        Row(
            "api",
            (
                Panel(
                    "api requests by status",
                    "HTTP requests per second, by status code.",
                    (("{{status}}", rate("slotflow_api_requests", by="status")),),
                    unit="reqps",
                    stacked=True,
                ),
            ),
        ),
    ),
)

SERVICES = (
    Dashboard(
        "slotflow-ticker",
        "slotflow / ticker",
        "Schedules into JobDue records: firing, lateness, claims, timers, commands (docs/ticker.md).",
        (
            Row(
                "Firing",
                (
                    LATENESS,
                    Panel(
                        "Slots fired and skipped",
                        "JobDue staged per slot, by kind; SlotSkipped by reason.",
                        (
                            ("fired {{kind}}", rate("slotflow_ticker_slots_fired", by="kind")),
                            ("skipped {{reason}}", rate("slotflow_ticker_slots_skipped", by="reason")),
                        ),
                        unit="ops",
                    ),
                    Panel(
                        "Claim transactions",
                        "Duration of one claim transaction and schedules claimed per transaction.",
                        (
                            ("p99 duration", quantile(0.99, "slotflow_ticker_claim_seconds")),
                            ("p99 batch", quantile(0.99, "slotflow_ticker_claim_batch_size")),
                        ),
                    ),
                    Panel(
                        "Timers",
                        "Durable timers fired by action; deadlines held in the timing wheel.",
                        (
                            ("fired {{action}}", rate("slotflow_ticker_timers_fired", by="action")),
                            ("in the wheel", gauge("slotflow_ticker_wheel_pending")),
                        ),
                    ),
                ),
            ),
            Row(
                "Commands and plumbing",
                (
                    Panel(
                        "Commands",
                        "Schedule and timer commands handled, by type and outcome.",
                        (("{{type}} {{outcome}}", rate("slotflow_ticker_commands", by="type, outcome")),),
                        unit="ops",
                    ),
                    Panel(
                        "Outbox",
                        "Backlog and events published by the relays.",
                        (
                            ("backlog", gauge("slotflow_ticker_outbox_backlog", how="max")),
                            ("published/s", rate("slotflow_ticker_outbox_published")),
                        ),
                    ),
                    lag_of("ticker"),
                ),
            ),
        ),
    ),
    Dashboard(
        "slotflow-claimer",
        "slotflow / claimer",
        "Runs claimed, their outcomes, leases and fencing, handlers, downstreams (docs/claimer.md).",
        (
            Row(
                "Runs",
                (
                    OUTCOMES,
                    Panel(
                        "Runs claimed",
                        "Runs claimed, by how: a JobDue, a lease takeover, a buffered start.",
                        (("{{how}}", rate("slotflow_claimer_runs_claimed", by="how")),),
                        unit="ops",
                    ),
                    Panel(
                        "Dead-lettered by reason",
                        "Runs given up, by DLQ reason.",
                        (
                            (
                                "{{reason}}",
                                rate(
                                    "slotflow_claimer_run_outcomes",
                                    by="reason",
                                    selector='outcome="dead_lettered"',
                                ),
                            ),
                        ),
                        unit="ops",
                    ),
                    Panel(
                        "Runs in flight",
                        "Runs claimed and not yet recorded, per claimer.",
                        (("{{pod}}", gauge("slotflow_claimer_runs_in_flight", by="pod")),),
                    ),
                    Panel(
                        "Handler duration p99",
                        "Handler wall time per attempt, by handler.",
                        (
                            (
                                "{{handler}}",
                                quantile(0.99, "slotflow_claimer_handler_duration_seconds", by="handler"),
                            ),
                        ),
                        unit="s",
                    ),
                ),
            ),
            Row(
                "Leases and fencing",
                (
                    Panel(
                        "Lost work",
                        "Writes refused by a newer fencing token, handlers cancelled because their "
                        "lease moved, runs taken over. Alert SlotflowLeasesLost.",
                        (
                            ("fence rejected {{write}}", rate("slotflow_claimer_fence_rejected", by="write")),
                            ("leases lost", rate("slotflow_claimer_leases_lost")),
                            ("takeovers", rate("slotflow_claimer_takeovers")),
                        ),
                        unit="ops",
                    ),
                    Panel(
                        "Event loop",
                        "How late the event loop woke a timer (p99) and stalls past the threshold.",
                        (
                            ("lag p99", quantile(0.99, "slotflow_claimer_loop_lag_seconds")),
                            ("stalls/s", rate("slotflow_claimer_loop_blocked")),
                        ),
                    ),
                    Panel(
                        "Downstream circuits",
                        "Circuit state as each claimer last saw it move: 0 closed, 1 half-open, 2 "
                        "open. Alert SlotflowCircuitOpen.",
                        (
                            (
                                "{{downstream}}",
                                gauge(
                                    "slotflow_claimer_downstream_circuit_state", by="downstream", how="max"
                                ),
                            ),
                        ),
                    ),
                    Panel(
                        "Outbox backlog",
                        "Run events and retry timers staged and not yet published.",
                        (("backlog", gauge("slotflow_claimer_outbox_backlog", how="max")),),
                    ),
                    lag_of("claimer"),
                ),
            ),
        ),
    ),
    Dashboard(
        "slotflow-orchestrator",
        "slotflow / orchestrator",
        "Workflow decisions, history, commands, shards (docs/orchestrator.md).",
        (
            Row(
                "Decisions",
                (
                    DECISION_LATENCY,
                    Panel(
                        "Decisions by outcome",
                        "Decision transactions: appended, unchanged, lease_lost, failed.",
                        (("{{outcome}}", rate("slotflow_orchestrator_decisions", by="outcome")),),
                        unit="ops",
                        stacked=True,
                    ),
                    Panel(
                        "Inputs and history",
                        "Inputs recorded by type; history events appended by type.",
                        (
                            ("input {{type}}", rate("slotflow_orchestrator_inputs", by="type")),
                            ("history {{type}}", rate("slotflow_orchestrator_history_events", by="type")),
                        ),
                        unit="ops",
                    ),
                    Panel(
                        "Stuck and refused",
                        "Replays that diverged from their history (the workflow waits for a fix: "
                        "alert SlotflowNonDeterminism) and inputs their issuer does not back.",
                        (
                            ("non-determinism", rate("slotflow_orchestrator_non_determinism")),
                            ("refused {{reason}}", rate("slotflow_orchestrator_refused_inputs", by="reason")),
                        ),
                        unit="ops",
                    ),
                ),
            ),
            Row(
                "Shards and plumbing",
                (
                    Panel(
                        "Shards owned",
                        "Command-topic partitions whose lease each orchestrator holds.",
                        (("{{pod}}", gauge("slotflow_orchestrator_shards_owned", by="pod")),),
                        stacked=True,
                    ),
                    Panel(
                        "Commands answered",
                        "Workflow commands by type and answer.",
                        (
                            (
                                "{{type}} {{answer}}",
                                rate("slotflow_orchestrator_commands", by="type, answer"),
                            ),
                        ),
                        unit="ops",
                    ),
                    Panel(
                        "Outbox backlog",
                        "History, activities' JobDue, timers and answers staged and not yet published.",
                        (("backlog", gauge("slotflow_orchestrator_outbox_backlog", how="max")),),
                    ),
                    lag_of("orchestrator"),
                ),
            ),
        ),
    ),
    Dashboard(
        "slotflow-dlq",
        "slotflow / dlq",
        "Dead letters parked, redriven, discarded; the webhook (docs/dlq.md).",
        (
            Row(
                "Dead letters",
                (
                    DLQ_DEPTH,
                    DLQ_AGE,
                    Panel(
                        "Parked, redriven, discarded",
                        "New entries by reason, redrives and discards per second.",
                        (
                            ("parked {{reason}}", rate("slotflow_dlq_parked", by="reason")),
                            ("redriven", rate("slotflow_dlq_redrives")),
                            ("discarded", rate("slotflow_dlq_discards")),
                            ("seen again", rate("slotflow_dlq_repeat_sightings")),
                        ),
                        unit="ops",
                    ),
                    Panel(
                        "Webhook",
                        "Notifications for money-moving runs, by outcome. Alert SlotflowWebhookGaveUp.",
                        (("{{outcome}}", rate("slotflow_dlq_notifications", by="outcome")),),
                        unit="ops",
                    ),
                ),
            ),
            Row(
                "Plumbing",
                (
                    Panel(
                        "Own poison and outbox",
                        "Records the DLQ service's own consumers refused; its outbox backlog.",
                        (
                            ("own poison {{reason}}", rate("slotflow_dlq_own_poison", by="reason")),
                            ("outbox backlog", gauge("slotflow_dlq_outbox_backlog", how="max")),
                        ),
                    ),
                    lag_of("dlq"),
                ),
            ),
        ),
    ),
    Dashboard(
        "slotflow-api",
        "slotflow / api",
        "HTTP requests, commands published, the read model's projection (docs/api.md).",
        (
            Row(
                "HTTP",
                (
                    Panel(
                        "Requests by route",
                        "HTTP requests per second by route template.",
                        (("{{route}}", rate("slotflow_api_requests", by="route")),),
                        unit="reqps",
                        stacked=True,
                    ),
                    Panel(
                        "Request latency p99",
                        "By route template.",
                        (("{{route}}", quantile(0.99, "slotflow_api_request_seconds", by="route")),),
                        unit="s",
                    ),
                    Panel(
                        "Server errors",
                        "Share of requests answered 5xx. Alert SlotflowApiErrors.",
                        (("5xx share", SERVER_ERROR_SHARE),),
                        unit="percentunit",
                    ),
                ),
            ),
            Row(
                "Commands and read model",
                (
                    Panel(
                        "Commands published",
                        "Commands published to Kafka over HTTP, by type.",
                        (("{{type}}", rate("slotflow_api_commands_published", by="type")),),
                        unit="ops",
                    ),
                    Panel(
                        "Projection",
                        "Records projected into the read model by type; record timestamp to commit (p99).",
                        (
                            ("{{type}}", rate("slotflow_api_events_projected", by="type")),
                            ("lag p99", quantile(0.99, "slotflow_api_projection_lag_seconds")),
                        ),
                    ),
                    lag_of("api"),
                ),
            ),
        ),
    ),
    Dashboard(
        "slotflow-stats",
        "slotflow / stats",
        "The stats worker: events counted, windows copied to PostgreSQL, lag (docs/stats.md).",
        (
            Row(
                "Worker",
                (
                    Panel(
                        "Events",
                        "Events counted per family, and left out by reason.",
                        (
                            ("{{family}}", rate("slotflow_stats_events", by="family")),
                            ("skipped {{reason}}", rate("slotflow_stats_events_skipped", by="reason")),
                        ),
                        unit="ops",
                    ),
                    Panel(
                        "Copies to PostgreSQL",
                        "Window rows copied and failed copies per second.",
                        (
                            ("windows", rate("slotflow_stats_windows_copied")),
                            ("failures", rate("slotflow_stats_copy_failures")),
                        ),
                        unit="ops",
                    ),
                    Panel(
                        "Since the last copy",
                        "Seconds since a copy to PostgreSQL last succeeded. Alert SlotflowStatsStale.",
                        (
                            (
                                "seconds",
                                f"time() - {gauge('slotflow_stats_last_copy_timestamp_seconds', how='max')}",
                            ),
                        ),
                        unit="s",
                    ),
                    lag_of("stats"),
                ),
            ),
        ),
    ),
)


# -- Grafana JSON ----------------------------------------------------------------------------------

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    custom: dict[str, Any] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10}
    if panel.stacked:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit, "custom": custom}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {"refId": chr(ord("A") + index), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
            for index, (legend, expr) in enumerate(panel.queries)
        ],
    }


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    """``dashboard`` as Grafana's JSON model (schema 39), two panels a row."""
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row in dashboard.rows:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        for index, panel in enumerate(row.panels):
            panels.append(_panel_json(panel, next_id, 12 * (index % 2), y + 8 * (index // 2)))
            next_id += 1
        y += 8 * ((len(row.panels) + 1) // 2)
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "utc",
        "links": [
            {"title": "slotflow dashboards", "type": "dashboards", "tags": ["slotflow"], "asDropdown": True}
        ],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "namespace",
                    "label": "namespace",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": {"query": "label_values(slotflow_kafka_consumer_lag, namespace)", "refId": "ns"},
                    "definition": "label_values(slotflow_kafka_consumer_lag, namespace)",
                    "includeAll": True,
                    "allValue": ".*",
                    "multi": True,
                    "current": {"selected": True, "text": "All", "value": "$__all"},
                    "refresh": 2,
                    "hide": 0,
                },
            ]
        },
        "panels": panels,
    }


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every query of a dashboard's JSON (its panels' targets)."""
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def outputs() -> dict[Path, str]:
    """Every file this script writes, with its content."""
    files = {
        DASHBOARDS / f"{d.uid}.json": json.dumps(dashboard_json(d), indent=2) + "\n"
        for d in (OVERVIEW, *SERVICES)
    }
    files[CHART_ALERTS] = ALERTS.read_text()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, content in outputs().items():
        if path.exists() and path.read_text() == content:
            continue
        if args.check:
            stale.append(path.relative_to(ROOT).as_posix())
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"out of date (run deploy/monitoring/build_monitoring.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
