"""What a platform team builds on the metrics holds on the running system: every service started
as its own process (as deployed), driven through a workflow and a run that dead-letters, then
scraped. Each /metrics passes `promtool check metrics`; every metric a dashboard panel or an alert
rule names is served by a live service (counter and histogram suffixes as exposed); every
dashboard query is valid PromQL (promtool parses each as a rule); every consuming service reports
its consumer lag.
"""

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from slotflow.client import Client, HttpTransport
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ProcessGroup, ServiceProcess, free_port, stack_env
from tests.integration.api.stats_support import StatsProcess

REPO = Path(__file__).parents[3]
MONITORING = REPO / "deploy" / "monitoring"
ADMIN_TOKEN = "sft_monitoring-test-token-0123456789abcdef"
#: Names that are not a slotflow service's: Prometheus makes `up` itself.
NOT_OURS = {"up"}


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: run `make tools` (deploy/devstack/install-tools.sh promtool)"
    return found


@pytest.fixture
def processes() -> Iterator[ProcessGroup]:
    group = ProcessGroup()
    try:
        yield group
    finally:
        group.close()


def exposed(text: str) -> set[str]:
    """Every sample name ``text`` (a scrape) can carry: a family with no sample yet (a labelled
    counter never incremented) counts with the names its type gives its samples."""
    names: set[str] = set()
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("_count", "_sum", "_created"),
        "gauge": ("",),
        "info": ("_info",),
        "unknown": ("",),
    }
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in suffixes.get(family.type, ("",))}
        names |= {sample.name for sample in family.samples}
    return names


def queries() -> dict[str, str]:
    """Every PromQL expression the dashboards and the alert rules hold, by where it is."""
    found: dict[str, str] = {}
    for file in sorted((MONITORING / "dashboards").glob("*.json")):
        board = json.loads(file.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                found[f"{file.name}: {panel['title']} {target['refId']}"] = target["expr"]
    for group in yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"]:
        for index, rule in enumerate(group["rules"]):
            found[f"alerts.yaml: {rule['alert']} #{index}"] = rule["expr"]
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (not its functions, labels or strings)."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_labels = re.sub(r"\{[^}]*\}", "{}", without_strings)
    without_grouping = re.sub(r"\b(by|without)\s*\([^)]*\)", "", without_labels)
    return set(re.findall(r"\b(slotflow_[a-z0-9_]+|up)\b", without_grouping))


def as_rules(expressions: dict[str, str]) -> str:
    """The dashboards' queries as recording rules, Grafana's variables filled in, for promtool."""
    rules = [
        {
            "record": f"slotflow:dashboard_query_{index}",
            "expr": expr.replace("$__rate_interval", "5m").replace("$namespace", ".*"),
        }
        for index, expr in enumerate(expressions.values())
    ]
    return yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]})


async def test_every_dashboard_and_alert_metric_is_served_and_every_scrape_passes_promtool(
    kafka: KafkaSettings, pg_dsn: str, tmp_path: Path, processes: ProcessGroup
) -> None:
    checker = promtool()
    path = {"PYTHONPATH": f"{REPO / 'examples'}:{REPO}"}

    def service(module: str, prefix: str, **settings: object) -> ServiceProcess:
        port = free_port()
        env = stack_env(kafka, pg_dsn, prefix, metrics_port=port, **settings) | path
        return ServiceProcess(module, module, env=env, log_dir=tmp_path, cwd=REPO, metrics_port=port)

    services: dict[str, ServiceProcess] = {
        "ticker": await processes.start(service("slotflow_ticker", "SLOTFLOW_TICKER_")),
        "claimer": await processes.start(
            service("slotflow_claimer", "SLOTFLOW_CLAIMER_", handler_modules="orders.activities")
        ),
        "orchestrator": await processes.start(
            service("slotflow_orchestrator", "SLOTFLOW_ORCHESTRATOR_", workflow_modules="orders.workflow")
        ),
        "dlq": await processes.start(service("slotflow_dlq", "SLOTFLOW_DLQ_")),
    }
    api_port = free_port()
    api_env = stack_env(
        kafka, pg_dsn, "SLOTFLOW_API_", port=api_port, bootstrap_token=ADMIN_TOKEN, projector_poll_ms=50
    )
    services["api"] = await processes.start(
        ServiceProcess("slotflow_api", "api", env=api_env, log_dir=tmp_path, cwd=REPO, metrics_port=api_port)
    )
    stats = StatsProcess(kafka, pg_dsn, tmp_path)
    services["stats"] = await processes.start(stats)

    # A workflow through every activity, and a scheduled run whose handler nobody serves (so it is
    # dead-lettered and parked): every service has something to count.
    async with HttpTransport(f"http://127.0.0.1:{api_port}", token=ADMIN_TOKEN) as http:
        client = Client(http)
        order = {
            "order_id": "m-1",
            "customer_id": "c-7",
            "amount_cents": 9990,
            "card_token": "tok_visa",
            "lines": [{"sku": "mug", "quantity": 2}],
            "hold": "PT1S",
        }
        await client.start_workflow("orders.checkout", order, id="order-monitored", wait=30)
        at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
        await client.create_schedule(
            "nobody-serves-this",
            {"spec": {"kind": "once", "at": at.isoformat()}, "handler": "no.such.handler"},
            wait=30,
        )

        async def worked() -> bool:
            claimer = await services["claimer"].metrics()
            dlq = await services["dlq"].metrics()
            completed = sum(
                v
                for k, v in claimer.items()
                if k.startswith("slotflow_claimer_run_outcomes_total{outcome=completed,")
            )
            dead = sum(
                v
                for k, v in claimer.items()
                if k.startswith("slotflow_claimer_run_outcomes_total{outcome=dead_lettered,")
            )
            parked = sum(v for k, v in dlq.items() if k.startswith("slotflow_dlq_parked_entries{"))
            return (
                completed >= 3
                and dead >= 1
                and parked >= 1
                and (await client.get_workflow("order-monitored")).status == "completed"
            )

        await assert_eventually(
            worked, timeout=120, interval=0.5, message="the workflow completed, a run parked"
        )

    served: set[str] = set()
    for name, proc in services.items():
        async with httpx.AsyncClient(timeout=5) as scraper:
            text = (await scraper.get(f"http://127.0.0.1:{proc.port}/metrics")).text
        check = subprocess.run(
            [checker, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        # promtool prints each lint problem; a clean scrape prints nothing.
        assert (check.returncode, check.stdout + check.stderr) == (0, ""), f"{name}: promtool check metrics"
        served |= exposed(text)
        # Every consumer group is the service's (its name in the group's, after the namespace):
        # the dashboards select a service's lag by that.
        groups = {
            sample.labels["group"]
            for family in text_string_to_metric_families(text)
            if family.name == "slotflow_kafka_consumer_lag"
            for sample in family.samples
        }
        assert groups, f"{name}: no consumer lag"
        assert all(g.startswith(f"{kafka.topic_namespace}.") and name in g for g in groups), (name, groups)

    expressions = queries()
    missing = {
        where: sorted(metric_names(expr) - served - NOT_OURS)
        for where, expr in expressions.items()
        if metric_names(expr) - served - NOT_OURS
    }
    assert missing == {}, "metrics no live service serves"
    assert all(metric_names(expr) for expr in expressions.values())

    rules = tmp_path / "dashboard-queries.yaml"
    rules.write_text(as_rules({k: v for k, v in expressions.items() if ".json:" in k}))
    parsed = subprocess.run(
        [checker, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr


def test_metric_names_are_read_from_expressions() -> None:
    expr = 'sum by (reason) (rate(slotflow_claimer_run_outcomes_total{outcome="x_total"}[5m])) / up'
    assert metric_names(expr) == {"slotflow_claimer_run_outcomes_total", "up"}
    text = "# HELP a_b x\n# TYPE a_b counter\n# HELP h x\n# TYPE h histogram\n"
    assert exposed(text) >= {"a_b_total", "h_bucket", "h_count", "h_sum"}
