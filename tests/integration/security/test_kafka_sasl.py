"""The pipeline on a SASL_SSL broker with one principal per service holding only its ACLs, and
proven principals: with signatures required, a command is applied only when a registered key
proves who sent it (docs/decisions/0007-proven-principals.md).

A broker of this module's own, started through deploy/devstack in its sasl_ssl mode (a CA of its
own, SCRAM-SHA-512 users made at format time, StandardAuthorizer with nothing allowed without an
ACL), on free ports; PostgreSQL is the session's. The ticker and the claimer run as real processes,
each as its own user with the ACLs `slotflow.kafka.acls.service_acls` grants (docs/security.md);
the test itself publishes as the `cli` user. A workflow (a durable sleep through the ticker, then an
activity retried through the claimer's timer) completes with an orchestrator, a claimer and a
ticker in this process, each again as its own user; their timer commands travel on the internal
timer topic, which `User:cli` may not write, and a timer command `User:cli` puts on the public
topic is refused by the ticker. A wrong password, and a missing ACL, make a service exit at start
with a message that says so.
"""

import asyncio
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import SecretStr

from slotflow.commands import publish_command
from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    CommandRejected,
    CreateSchedule,
    DeadLetterFilter,
    DeleteSchedule,
    DiscardDeadLetters,
    Envelope,
    FireJobDue,
    FireTimerFired,
    IntervalSpec,
    JobDue,
    Message,
    OnceSpec,
    OpenDownstream,
    RedriveDeadLetters,
    RetryActivity,
    ScheduleDefinition,
    SigningKey,
    StartTimer,
    StartWorkflow,
    TimerStarted,
    TriggerNow,
    WorkflowCompleted,
    WorkflowStarted,
    WorkflowTimerFired,
    wrap,
)
from slotflow.contracts.routing import build_command
from slotflow.contracts.scopes import Scope
from slotflow.contracts.timers import retry_timer_id, sleep_timer_id
from slotflow.contracts.topics import (
    DLQ_EVENTS,
    DLQ_MESSAGES,
    DLQ_REDRIVES,
    DOWNSTREAM_EVENTS,
    JOBS_DUE,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    SIGNING_KEYS,
    TIMER_COMMANDS,
    WORKFLOW_COMMANDS,
    WORKFLOW_EVENTS,
)
from slotflow.core.identity import run_id
from slotflow.errors import KafkaAccessDenied, KafkaAuthenticationFailed
from slotflow.kafka.acls import AclBinding, Operation, ResourceType, create_acls, service_acls
from slotflow.kafka.admin import ensure_topics, warm_coordinators
from slotflow.kafka.producer import Producer
from slotflow.kafka.security import KafkaSecurity
from slotflow.pg.pool import Pool, create_pool
from slotflow.principals import SignatureSettings, Signer
from slotflow.principals.signing import write_private_key
from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.processes import ProcessGroup, ServiceProcess, free_port, stack_env
from slotflow.testing.topics import TopicTail
from slotflow_api.app import create_app
from slotflow_api.config import ApiSettings
from slotflow_api.config import Settings as ApiAppSettings
from slotflow_claimer.app import ClaimerService
from slotflow_orchestrator.workflow_code import load_workflow_code
from tests.integration.api.stats_support import StatsProcess, past_minute, stored_counts, workload
from tests.integration.claimer.support import REPO, wait_state
from tests.integration.claimer.support import settings_for as claimer_settings
from tests.integration.cli.support import served
from tests.integration.dlq.conftest import start_dlq, stop_dlq
from tests.integration.orchestrator.activities import ACTIVITIES, create_tables
from tests.integration.orchestrator.support import (
    effects,
    orchestrator_settings,
    start_orchestrator,
    wait_history,
)
from tests.integration.security.devstack_module import load_devstack
from tests.integration.ticker.support import db_now, send, start_ticker, stop_ticker

HANDLERS = "tests.integration.security.handlers"
#: How long a misconfigured service may take to give up (a poll or two after its start).
FAIL_FAST_S = 60.0


@dataclasses.dataclass(frozen=True)
class SecuredBroker:
    devstack: ModuleType
    cfg: Any

    @property
    def bootstrap(self) -> str:
        return str(self.cfg.bootstrap)

    def security(self, user: str, password: str | None = None) -> KafkaSecurity:
        security: KafkaSecurity = self.devstack.client_security(self.cfg, user, password)
        return security

    def settings(self, user: str, namespace: str, password: str | None = None) -> KafkaSettings:
        return KafkaSettings(
            bootstrap=self.bootstrap, topic_namespace=namespace, security=self.security(user, password)
        )


@pytest.fixture(scope="module")
def secured_broker() -> Iterator[SecuredBroker]:
    devstack = load_devstack()
    state = tempfile.mkdtemp(prefix="slotflow-sasl-")
    base = devstack.Config.from_env()
    kafka_port, controller_port = free_port(), free_port()
    cfg = dataclasses.replace(
        base,
        state_dir=Path(state),
        kafka_port=kafka_port,
        controller_port=controller_port,
        kafka_security="sasl_ssl",
    )
    asyncio.run(devstack.start_kafka(cfg))
    try:
        yield SecuredBroker(devstack, cfg)
    finally:
        asyncio.run(devstack.stop_kafka(False, cfg))
        shutil.rmtree(state, ignore_errors=True)


async def _namespace(
    broker: SecuredBroker, namespace: str | None = None, *, without: frozenset[AclBinding] = frozenset()
) -> str:
    """A fresh topic namespace with every topic, and each service's ACLs in it (less ``without``)."""
    namespace = namespace or unique_name("sasl")
    admin = broker.settings("admin", namespace)
    await ensure_topics(broker.bootstrap, admin.topics(), security=admin.security)
    await warm_coordinators(broker.bootstrap, security=admin.security)
    bindings = [
        acl
        for service in ("ticker", "claimer", "orchestrator", "dlq", "api", "stats", "cli")
        for acl in service_acls(service, f"User:{service}", admin)
        if acl not in without
    ]
    await create_acls(broker.bootstrap, bindings, security=admin.security)
    return namespace


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[Pool]:
    pool = await create_pool(PostgresSettings(dsn=pg_dsn), min_size=1, max_size=4)
    yield pool
    await pool.close()


def _ticker(kafka: KafkaSettings, pg_dsn: str, log_dir: Path, **extra: str) -> ServiceProcess:
    port = free_port()
    env = stack_env(
        kafka, pg_dsn, "SLOTFLOW_TICKER_", metrics_port=port, ticker_id=unique_name("tk"), backlog_seconds=0.5
    )
    env.update(extra)
    return ServiceProcess("slotflow_ticker", "ticker", env=env, log_dir=log_dir, cwd=REPO, metrics_port=port)


def _claimer(
    kafka: KafkaSettings, pg_dsn: str, log_dir: Path, name: str = "claimer", modules: str = HANDLERS
) -> ServiceProcess:
    port = free_port()
    env = stack_env(
        kafka, pg_dsn, "SLOTFLOW_CLAIMER_", claimer_id=name, handler_modules=modules, metrics_port=port
    )
    env["PYTHONPATH"] = str(REPO)
    return ServiceProcess("slotflow_claimer", name, env=env, log_dir=log_dir, cwd=REPO, metrics_port=port)


async def _exits(proc: ServiceProcess) -> str:
    """The log of ``proc`` once it exited (non-zero) on its own."""

    async def gone() -> bool:
        return not proc.alive()

    await assert_eventually(gone, timeout=FAIL_FAST_S, interval=0.2, message=f"{proc.name} exits")
    assert proc.proc.returncode != 0, proc.log()
    return proc.log(20_000)


async def test_a_schedule_fires_and_completes_with_one_principal_per_service(
    secured_broker: SecuredBroker, pg_dsn: str, db: Pool, tmp_path: Path
) -> None:
    namespace = await _namespace(secured_broker)
    group = ProcessGroup()
    try:
        await group.start(_ticker(secured_broker.settings("ticker", namespace), pg_dsn, tmp_path))
        await group.start(_claimer(secured_broker.settings("claimer", namespace), pg_dsn, tmp_path))
        cli = secured_broker.settings("cli", namespace)
        admin = secured_broker.settings("admin", namespace)
        async with (
            Producer(cli, client_id="secure-test") as producer,
            TopicTail(admin, (SCHEDULE_EVENTS,)) as answers,
        ):
            now = await db_now(db)
            slot = now.replace(microsecond=0) + timedelta(seconds=2)
            definition = ScheduleDefinition(spec=OnceSpec(at=slot), handler="secure.settle")
            await send(producer, cli, CreateSchedule(schedule_id="secured-payout", definition=definition))
            # The finding, replayed as User:cli: a StartTimer on the public topic that would run a
            # handler with the attacker's payload, no schedule behind it. Refused, never run.
            payday = JobDue(
                run_id=run_id("payouts", slot),
                job_id="payouts",
                slot=slot,
                attempt=2,
                kind="retry",
                handler="secure.settle",
                payload={"to": "attacker"},
            )
            attack = StartTimer(
                timer_id=retry_timer_id(payday.run_id, 2), fire_at=now, on_fire=FireJobDue(job=payday)
            )
            _, envelope = build_command(attack, command_id="attack-payday", source="cli")
            await producer.send(cli.topic(SCHEDULE_COMMANDS), envelope)
            row = await wait_state(db, run_id("secured-payout", slot), "completed", timeout=60)
            await answers.wait_for(lambda t: bool(t.by_id("attack-payday/rejected")), timeout=60)
    finally:
        group.close()
    assert row["attempt"] == 1
    [refused] = answers.by_id("attack-payday/rejected")
    assert str(refused.data["reason"]).startswith("timer commands are internal:"), refused.data
    assert await db.fetchval("SELECT count(*) FROM claimer.runs WHERE job_id = 'payouts'") == 0


async def test_the_api_and_the_dlq_serve_as_their_own_principals(
    secured_broker: SecuredBroker, pg_dsn: str, db: Pool, tmp_path: Path
) -> None:
    """The whole path through the door people use: a schedule made over HTTP (the api writes the
    command as User:api), one run completed and one dead-lettered (the claimer), the letter parked
    and then discarded over HTTP (the dlq as User:dlq), every outcome read back from the api's read
    model (the api reading the event topics): each service with only its own ACLs."""
    namespace = await _namespace(secured_broker)
    token = "sft_" + "s" * 40
    group = ProcessGroup()
    try:
        await group.start(_ticker(secured_broker.settings("ticker", namespace), pg_dsn, tmp_path))
        await group.start(_claimer(secured_broker.settings("claimer", namespace), pg_dsn, tmp_path))
        dlq_port = free_port()
        dlq_env = stack_env(
            secured_broker.settings("dlq", namespace), pg_dsn, "SLOTFLOW_DLQ_", metrics_port=dlq_port
        )
        await group.start(
            ServiceProcess(
                "slotflow_dlq", "dlq", env=dlq_env, log_dir=tmp_path, cwd=REPO, metrics_port=dlq_port
            )
        )
        api_port = free_port()
        api_env = stack_env(
            secured_broker.settings("api", namespace),
            pg_dsn,
            "SLOTFLOW_API_",
            port=api_port,
            bootstrap_token=token,
            projector_poll_ms=50,
        )
        await group.start(
            ServiceProcess(
                "slotflow_api", "api", env=api_env, log_dir=tmp_path, cwd=REPO, metrics_port=api_port
            )
        )
        slot = (await db_now(db)).replace(microsecond=0) + timedelta(seconds=3)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{api_port}", headers=headers, timeout=40
        ) as api:
            for schedule_id, handler in (
                ("secured-ok", "secure.settle"),
                ("secured-refused", "secure.refuse"),
            ):
                body = {
                    "schedule_id": schedule_id,
                    "definition": {"spec": {"kind": "once", "at": slot.isoformat()}, "handler": handler},
                }
                created = await api.post("/v1/schedules", json=body, params={"wait": 30})
                assert created.status_code == 200, created.text
                assert created.json()["status"] == "accepted", created.text

            async def listed(path: str, **params: str) -> list[dict[str, Any]]:
                answer = await api.get(path, params=params)
                assert answer.status_code == 200, answer.text
                items: list[dict[str, Any]] = answer.json()["items"]
                return items

            async def completed() -> bool:
                return len(await listed("/v1/runs", job_id="secured-ok", state="completed")) == 1

            async def parked() -> bool:
                return len(await listed("/v1/dlq", job_id="secured-refused", status="parked")) == 1

            await assert_eventually(completed, timeout=90, interval=0.5, message="the run completes")
            await assert_eventually(parked, timeout=90, interval=0.5, message="the refused run is parked")
            [letter] = await listed("/v1/dlq", job_id="secured-refused", status="parked")
            assert letter["source_service"] == "claimer", letter
            assert "refused" in letter["error"], letter

            discard = {"selection": {"job_id": "secured-refused"}, "reason": "checked by the security test"}
            answered = await api.post("/v1/dlq/discard", json=discard, params={"wait": 30})
            assert answered.status_code == 200, answered.text

            async def discarded() -> bool:
                return len(await listed("/v1/dlq", job_id="secured-refused", status="discarded")) == 1

            await assert_eventually(
                discarded, timeout=60, interval=0.5, message="the dlq discards the letter"
            )
            [gone] = await listed("/v1/dlq", job_id="secured-refused", status="discarded")
            assert gone["changed_by"] == "bootstrap", gone
    finally:
        group.close()


async def test_a_dead_lettered_run_is_redriven_by_its_owner_while_the_dlq_writes_no_jobs_due(
    secured_broker: SecuredBroker, pg_dsn: str, db: Pool, tmp_path: Path
) -> None:
    """The finding: the dlq's user may not write jobs.due, so its redrive relay was refused, the
    letters read `redriven`, nothing ran and every later redrive queued behind. Now the dlq, as
    User:dlq with no WRITE on jobs.due, asks the run's owner (the claimer, as User:claimer) on its
    internal redrive topic; the claimer reopens the run through its retry timer (the ticker, as
    User:ticker), the run completes with the handler deployed since, and the letter reads
    `redriven` once the claimer said so. A redrive that cannot be carried out (its schedule is gone)
    reads `redrive_failed` with the ticker's reason, and blocks nothing after it."""
    namespace = await _namespace(secured_broker)
    admin = secured_broker.settings("admin", namespace)
    dlq_writes = {
        acl.resource_name
        for acl in service_acls("dlq", "User:dlq", admin)
        if acl.operation is Operation.WRITE
    }
    assert admin.topic(JOBS_DUE) not in dlq_writes
    assert dlq_writes == {admin.topic(spec) for spec in (DLQ_MESSAGES, DLQ_EVENTS, DLQ_REDRIVES)}
    group = ProcessGroup()
    try:
        await group.start(_ticker(secured_broker.settings("ticker", namespace), pg_dsn, tmp_path))
        first = await group.start(_claimer(secured_broker.settings("claimer", namespace), pg_dsn, tmp_path))
        dlq_port = free_port()
        dlq_env = stack_env(
            secured_broker.settings("dlq", namespace), pg_dsn, "SLOTFLOW_DLQ_", metrics_port=dlq_port
        )
        dlq = await group.start(
            ServiceProcess(
                "slotflow_dlq", "dlq", env=dlq_env, log_dir=tmp_path, cwd=REPO, metrics_port=dlq_port
            )
        )
        cli = secured_broker.settings("cli", namespace)
        async with Producer(cli, client_id="secure-test") as producer:
            slot = (await db_now(db)).replace(microsecond=0) + timedelta(seconds=2)
            for schedule_id in ("secured-later", "secured-gone"):
                definition = ScheduleDefinition(spec=OnceSpec(at=slot), handler="secure.later")
                await send(producer, cli, CreateSchedule(schedule_id=schedule_id, definition=definition))
            later, gone = run_id("secured-later", slot), run_id("secured-gone", slot)

            async def both_parked() -> bool:
                rows = await db.fetch(
                    "SELECT run_id FROM dlq.dead_letters WHERE reason = 'unknown_handler' AND status = 'parked'"
                )
                return {r["run_id"] for r in rows} == {later, gone}

            await assert_eventually(both_parked, timeout=90, interval=0.5, message="both runs parked")
            letters = {
                r["run_id"]: r["id"] for r in await db.fetch("SELECT run_id, id FROM dlq.dead_letters")
            }
            await send(producer, cli, DeleteSchedule(schedule_id="secured-gone"))
            # The deploy: a claimer that serves the handler replaces the one that did not.
            first.stop()
            await group.start(
                _claimer(
                    secured_broker.settings("claimer", namespace),
                    pg_dsn,
                    tmp_path,
                    name="claimer-2",
                    modules=f"{HANDLERS},tests.integration.security.handlers_later",
                )
            )

            async def schedule_gone() -> bool:
                deleted = await db.fetchval(
                    "SELECT deleted FROM ticker.schedules WHERE schedule_id = 'secured-gone'"
                )
                return bool(deleted)

            await assert_eventually(schedule_gone, timeout=60, interval=0.5, message="the schedule deleted")
            # First the one that cannot be carried out, then the one that can: nothing waits.
            for command_id, letter, definition_asked in (
                ("redrive-gone", letters[gone], "current"),
                ("redrive-later", letters[later], "as_run"),
            ):
                redrive = RedriveDeadLetters(
                    selection=DeadLetterFilter(ids=(letter,)),
                    definition=definition_asked,  # type: ignore[arg-type]
                )
                await publish_command(producer, cli, redrive, command_id=command_id, source="test")

            async def settled() -> bool:
                rows = await db.fetch("SELECT run_id, status FROM dlq.dead_letters")
                return {r["run_id"]: r["status"] for r in rows} == {later: "redriven", gone: "redrive_failed"}

            await assert_eventually(settled, timeout=90, interval=0.5, message="both redrives answered")
            row = await wait_state(db, later, "completed", timeout=60)
    finally:
        group.close()
    assert (row["attempt"], row["redrive_count"]) == (2, 1)
    notes = {r["run_id"]: r["note"] for r in await db.fetch("SELECT run_id, note FROM dlq.dead_letters")}
    assert notes[gone] == (
        "refused by the ticker: schedule 'secured-gone' no longer exists: there is no definition to re-issue "
        "its slot from"
    )
    assert notes[later].startswith(f"redriven by the claimer: reopened run {later} (redrive 1)")
    assert await db.fetchval("SELECT state FROM claimer.runs WHERE run_id = $1", gone) == "dead_lettered"
    # The dlq wrote nothing it may not: no refusal in its log, and it ran to the end.
    log = dlq.log(200_000)
    assert "TopicAuthorizationFailed" not in log, log
    assert "KafkaAccessDenied" not in log, log


async def test_a_workflow_sleeps_and_runs_its_activity_with_one_principal_per_service(
    secured_broker: SecuredBroker, pg_dsn: str, pg_pool: Pool
) -> None:
    namespace = await _namespace(secured_broker)
    async with pg_pool.acquire() as conn:
        await create_tables(conn)
    registry = HandlerRegistry()
    for name, fn in ACTIVITIES.items():
        registry.register(name, fn)
    ticker = await start_ticker(secured_broker.settings("ticker", namespace), pg_dsn)
    orchestrator = await start_orchestrator(
        orchestrator_settings(secured_broker.settings("orchestrator", namespace), pg_dsn),
        load_workflow_code(["tests.integration.orchestrator.flows"]),
    )
    claimer = ClaimerService(
        claimer_settings(secured_broker.settings("claimer", namespace), pg_dsn), registry=registry
    )
    await claimer.start()
    try:
        cli = secured_broker.settings("cli", namespace)
        async with Producer(cli, client_id="secure-test") as producer:
            start = StartWorkflow(
                workflow_id="secured-nap",
                workflow_type="tests.sleeper",
                input={"order_id": "o-1", "seconds": 1, "fail_first": True},
            )
            await publish_command(producer, cli, start, command_id="start-secured-nap", source="test")
        events = await wait_history(pg_pool, "secured-nap", "workflow.completed", timeout=90)
        tried = await effects(pg_pool, "secured-nap/")
    finally:
        await claimer.stop(grace=0.5)
        await orchestrator.stop()
        await stop_ticker(ticker)
    assert [type(e) for e in events] == [
        WorkflowStarted,
        TimerStarted,
        WorkflowTimerFired,
        ActivityScheduled,
        ActivityCompleted,
        WorkflowCompleted,
    ]
    # The activity failed once and its retry came back through the claimer's timer at the ticker:
    # a StartTimer the claimer wrote to the internal topic as User:claimer.
    assert [(e["activity"], e["attempt"]) for e in tried] == [
        ("payments.authorize", 1),
        ("payments.authorize", 2),
    ]


async def test_the_stats_worker_counts_as_its_own_principal(
    secured_broker: SecuredBroker, pg_dsn: str, tmp_path: Path
) -> None:
    namespace = await _namespace(secured_broker)
    work = workload(past_minute(10), runs_per_schedule=3)
    admin = secured_broker.settings("admin", namespace)
    async with Producer(admin, client_id="secure-test") as producer:
        await producer.send_many(work.topics(admin))
    worker = StatsProcess(secured_broker.settings("stats", namespace), pg_dsn, tmp_path)
    try:

        async def all_counted() -> bool:
            assert worker.alive(), worker.log()
            return Counter(await stored_counts(pg_dsn)) == work.expected

        await assert_eventually(all_counted, timeout=90, interval=0.5, message="stats equal the workload")
    finally:
        worker.close()


async def test_the_cli_user_may_not_write_what_only_the_ticker_writes(
    secured_broker: SecuredBroker,
) -> None:
    namespace = await _namespace(secured_broker)
    cli = secured_broker.settings("cli", namespace)
    jobs_due = cli.topic(next(s for s in cli.topics() if s.name.endswith("jobs.due.v1")))
    async with Producer(cli, client_id="secure-test") as producer:
        with pytest.raises(KafkaAccessDenied, match=r"User:cli .*TopicAuthorizationFailed"):
            await producer.send_raw(jobs_due, key=b"k", value=b"{}")


@pytest.mark.parametrize("user", ["cli", "api"])
async def test_only_the_issuers_may_write_the_internal_timer_topic(
    secured_broker: SecuredBroker, user: str
) -> None:
    """A StartTimer fires whatever it carries: writing the timer topic would be writing jobs.due
    and timers.events through the ticker. The users that may write commands may not write it."""
    namespace = await _namespace(secured_broker)
    writer = secured_broker.settings(user, namespace)
    timer = StartTimer(
        timer_id=sleep_timer_id("victim-wf", 3),
        fire_at=datetime.now(UTC),
        on_fire=FireTimerFired(owner="victim-wf", sequence=3),
    )
    _, envelope = build_command(timer, command_id="attack-wake", source=user)
    async with Producer(writer, client_id="secure-test") as producer:
        with pytest.raises(KafkaAccessDenied, match=rf"User:{user} .*TopicAuthorizationFailed"):
            await producer.send(writer.topic(TIMER_COMMANDS), envelope)


async def test_a_wrong_password_stops_the_service_at_start_and_says_so(
    secured_broker: SecuredBroker, pg_dsn: str, tmp_path: Path
) -> None:
    namespace = await _namespace(secured_broker)
    wrong = secured_broker.settings("claimer", namespace, password="not-the-password")
    claimer = _claimer(wrong, pg_dsn, tmp_path)
    try:
        log = await _exits(claimer)
    finally:
        claimer.close()
    assert "KafkaAuthenticationFailed" in log, log
    assert "refused the authentication of User:claimer (SCRAM-SHA-512)" in log, log
    assert "not-the-password" not in log
    # The same from the library, for a client in this process.
    async with asyncio.timeout(30):
        with pytest.raises(KafkaAuthenticationFailed, match="User:claimer"):
            await Producer(wrong, client_id="wrong").start()


async def test_a_missing_acl_stops_the_service_at_start_and_says_so(
    secured_broker: SecuredBroker, pg_dsn: str, tmp_path: Path
) -> None:
    # The claimer may not read jobs.due in this namespace (everything else it has).
    namespace = unique_name("sasl")
    admin = secured_broker.settings("admin", namespace)
    jobs_due = next(s for s in admin.topics() if s.name.endswith("jobs.due.v1")).name
    missing = AclBinding("User:claimer", ResourceType.TOPIC, jobs_due, Operation.READ)
    assert missing in service_acls("claimer", "User:claimer", admin)
    await _namespace(secured_broker, namespace, without=frozenset({missing}))
    claimer = _claimer(secured_broker.settings("claimer", namespace), pg_dsn, tmp_path)
    try:
        log = await _exits(claimer)
    finally:
        claimer.close()
    assert "KafkaAccessDenied" in log, log
    assert "refused User:claimer (SCRAM-SHA-512): TopicAuthorizationFailedError" in log, log
    assert jobs_due in log, log


# -- proven principals: signed commands, checked by every consumer (SLOTFLOW_COMMAND_SIGNATURES) --

REQUIRED = SignatureSettings(command_signatures="required")
SLOTFLOW_SCRIPT = Path(sys.executable).with_name("slotflow")


def _key(name: str) -> Signer:
    """A key pair made here for the principal `key:<name>`; only its public half is registered."""
    return Signer(Ed25519PrivateKey.generate(), f"key:{name}")


async def _register_as_the_api(broker: SecuredBroker, namespace: str, keys: dict[Signer, Scope]) -> None:
    """Publish keys' records to the keys topic as User:api, as the api's relay does (the api's own
    path, POST /v1/keys, is exercised by the test that runs it)."""
    api = broker.settings("api", namespace)
    topic = api.topic(SIGNING_KEYS)
    async with Producer(api, client_id="keys") as producer:
        for signer, scope in keys.items():
            key = SigningKey(
                key_id=signer.key_id,
                name=signer.principal.removeprefix("key:"),
                principal=signer.principal,
                scope=scope,
                public_key=signer.public_key,
                created_at=datetime.now(UTC),
                created_by="test",
            )
            await producer.send(
                topic,
                wrap(
                    key,
                    id=f"{key.key_id}/registered",
                    key=key.key_id,
                    source="test",
                    occurred_at=key.created_at,
                ),
            )


def _cli_env(kafka: KafkaSettings, api_url: str, *, token: str) -> dict[str, str]:
    """The environment of the `slotflow` script as User:``kafka``, against the api at ``api_url``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLOTFLOW_")}
    env.update(
        SLOTFLOW_KAFKA_BOOTSTRAP=kafka.bootstrap,
        SLOTFLOW_KAFKA_TOPIC_NAMESPACE=kafka.topic_namespace,
        SLOTFLOW_API_URL=api_url,
        SLOTFLOW_TOKEN=token,
        **kafka.security.env(),
    )
    return env


async def _run_cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    process = await asyncio.create_subprocess_exec(
        str(SLOTFLOW_SCRIPT), *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=90)
    code = process.returncode if process.returncode is not None else -1
    return subprocess.CompletedProcess(argv, code, out.decode(), err.decode())


def _key_file(signer: Signer, directory: Path) -> Path:
    path = directory / f"{signer.principal.removeprefix('key:')}.pem"
    write_private_key(path, signer.private_key)
    return path


async def _send(
    producer: Producer,
    kafka: KafkaSettings,
    message: Message,
    command_id: str,
    *,
    signer: Signer | None = None,
    principal: str | None = None,
    signed_at: datetime | None = None,
    tamper: Callable[[Envelope], Envelope] | None = None,
) -> None:
    """Write one command as whoever ``kafka`` logs in as: signed by ``signer`` (or not), maybe
    altered after signing."""
    spec, envelope = build_command(message, command_id=command_id, source="test", principal=principal)
    topic = kafka.topic(spec)
    if signer is not None:
        envelope = signer.sign(envelope, topic=topic, signed_at=signed_at)
    if tamper is not None:
        envelope = tamper(envelope)
    await producer.send(topic, envelope)


async def test_only_a_proven_principal_is_applied_and_each_refusal_says_why(
    secured_broker: SecuredBroker, pg_dsn: str, db: Pool, tmp_path: Path
) -> None:
    """The ticker (a process, as User:ticker, signatures required) applies a schedule command only
    when a key the api registered proves its principal and holds its scope, inside the replay
    window; the api (as User:api) registers and revokes the keys, serves the commands list with
    every refusal's reason, and the audit names who paused the schedule."""
    namespace = await _namespace(secured_broker)
    token = "sft_" + "p" * 40
    ops, alice, reader, gone, stranger = (_key(n) for n in ("ops", "alice", "reader", "gone", "alice"))
    group = ProcessGroup()
    try:
        ticker = _ticker(
            secured_broker.settings("ticker", namespace),
            pg_dsn,
            tmp_path,
            SLOTFLOW_COMMAND_SIGNATURES="required",
        )
        await group.start(ticker)
        api_settings = ApiAppSettings(
            api=ApiSettings(projector_poll_ms=50, bootstrap_token=SecretStr(token)),
            kafka=secured_broker.settings("api", namespace),
            postgres=PostgresSettings(dsn=pg_dsn, pool_min_size=1, pool_max_size=5),
        )
        headers = {"Authorization": f"Bearer {token}", "X-Slotflow-Client": "test"}
        async with (
            served(create_app(api_settings)) as base,
            httpx.AsyncClient(base_url=base, headers=headers, timeout=40) as api,
        ):
            for signer, scope in ((ops, "admin"), (alice, "operate"), (reader, "read"), (gone, "operate")):
                name = signer.principal.removeprefix("key:")
                body = {"name": name, "scope": scope, "public_key": signer.public_key}
                registered = await api.post("/v1/keys", json=body)
                assert registered.status_code == 201, registered.text
            revoked = await api.delete("/v1/keys/gone")
            assert revoked.status_code == 200, revoked.text

            cli = secured_broker.settings("cli", namespace)
            definition = ScheduleDefinition(
                spec=IntervalSpec(every=timedelta(hours=1)), handler="secure.settle"
            )
            guarded = "guarded"
            async with Producer(cli, client_id="secure-test") as producer:
                await _send(
                    producer,
                    cli,
                    CreateSchedule(schedule_id=guarded, definition=definition),
                    "p-create",
                    signer=ops,
                )
                created = await api.get("/v1/commands/p-create", params={"wait": 30})
                assert created.json()["status"] == "accepted", created.text

                def as_alices(envelope: Envelope) -> Envelope:
                    # A signature by another key passed off as Alice's: her key id, her principal.
                    proof = envelope.proof
                    assert proof is not None
                    return envelope.model_copy(
                        update={"proof": proof.model_copy(update={"key_id": alice.key_id})}
                    )

                trigger = TriggerNow(schedule_id=guarded)
                delete = DeleteSchedule(schedule_id=guarded)
                long_ago = (await db_now(db)) - timedelta(days=8)
                await _send(producer, cli, delete, "p-unsigned", principal="token:ops-admin")
                await _send(producer, cli, trigger, "p-forged", signer=stranger, tamper=as_alices)
                await _send(producer, cli, trigger, "p-unknown", signer=stranger)
                await _send(producer, cli, trigger, "p-revoked", signer=gone)
                await _send(producer, cli, trigger, "p-read-scope", signer=reader)
                await _send(
                    producer,
                    cli,
                    delete,
                    "p-foreign",
                    signer=Signer(alice.private_key, "token:root-admin"),
                )
                await _send(producer, cli, trigger, "p-stale", signer=alice, signed_at=long_ago)

            # The CLI: through the api, a read token cannot trigger (the api's 403, nothing sent) ...
            reader_token = (await api.post("/v1/tokens", json={"name": "auditor", "scope": "read"})).json()[
                "secret"
            ]
            script = _cli_env(secured_broker.settings("cli", namespace), base, token=reader_token)
            refused = await _run_cli(script, "schedule", "trigger", guarded, "--command-id", "p-cli-read")
            assert refused.returncode == 1, refused
            assert "this needs the 'operate' scope; token:auditor holds 'read'" in refused.stderr, refused
            assert "nothing was sent" in refused.stderr, refused
            # ... and straight to Kafka (as User:cli) it signs with Alice's key, which proves her.
            alice_file = _key_file(alice, tmp_path)
            as_alice = {
                **script,
                "SLOTFLOW_SIGNING_KEY_FILE": str(alice_file),
                "SLOTFLOW_SIGNING_PRINCIPAL": "key:alice",
            }
            paused_by_cli = await _run_cli(
                as_alice,
                "--via",
                "kafka",
                "schedule",
                "pause",
                guarded,
                "--reason",
                "checked by the principals test",
                "--command-id",
                "p-pause",
                "--wait",
                "30",
            )
            assert paused_by_cli.returncode == 0, paused_by_cli
            assert "status:     accepted" in paused_by_cli.stdout, paused_by_cli

            expected = {
                "p-unsigned": "unsigned: this deployment accepts only signed commands",
                "p-forged": f"the signature does not match the command for key {alice.key_id} of key:alice",
                "p-unknown": f"signed with key '{stranger.key_id}', which no principal has registered",
                "p-revoked": f"signed with key {gone.key_id} of key:gone, revoked at",
                "p-read-scope": "key:reader holds the 'read' scope; schedule.trigger needs 'operate'",
                "p-foreign": f"key {alice.key_id} belongs to key:alice, not to token:root-admin",
                "p-stale": "outside the replay window",
            }
            for command_id, reason in expected.items():
                answer = (await api.get(f"/v1/commands/{command_id}", params={"wait": 30})).json()
                assert answer["status"] == "rejected", answer
                assert reason in answer["reason"], answer
            paused = (await api.get("/v1/commands/p-pause", params={"wait": 30})).json()
            assert (paused["status"], paused["principal"]) == ("accepted", "key:alice"), paused
            # The commands list shows every refusal with its reason and the principal it claimed.
            listed = (await api.get("/v1/commands", params={"subject": guarded, "limit": 50})).json()["items"]
            by_id = {row["command_id"]: row for row in listed}
            assert by_id["p-unsigned"]["principal"] == "token:ops-admin"
            assert by_id["p-unsigned"]["status"] == "rejected"
            assert "unsigned" in by_id["p-unsigned"]["reason"]
            assert {by_id[c]["status"] for c in expected} == {"rejected"}
            assert "p-cli-read" not in by_id  # the api refused it: it never reached a topic

            # The api's own commands are signed with its key and name the caller it authenticated.
            resumed = await api.post(f"/v1/schedules/{guarded}/resume", params={"wait": 30})
            assert resumed.status_code == 200, resumed.text
            assert (resumed.json()["status"], resumed.json()["principal"]) == ("accepted", "bootstrap")

            audit = (await api.get("/v1/audit", params={"schedule": guarded})).json()
            changes = [(c["change"], c["by"]) for c in audit["changes"]]
            assert changes == [("created", "key:ops"), ("paused", "key:alice"), ("resumed", "bootstrap")]

        # Nothing of a refused command was applied: the schedule was never deleted, never fired.
        row = await db.fetchrow("SELECT paused FROM ticker.schedules WHERE schedule_id = $1", guarded)
        assert row is not None
        assert row["paused"] is False
        fired = await db.fetchval(
            "SELECT count(*) FROM ticker.outbox_events WHERE topic = $1",
            cli.topic(JOBS_DUE),
        )
        assert fired == 0
    finally:
        group.close()


async def test_every_consumer_checks_its_commands_and_a_child_workflow_runs_with_enforcement_on(
    secured_broker: SecuredBroker, pg_dsn: str, pg_pool: Pool, tmp_path: Path
) -> None:
    """Every service that consumes commands requires signatures: the orchestrator, the claimer and
    the dlq refuse unsigned ones with the reason (nothing applied), and a workflow started by a
    proven principal sleeps through the ticker and runs a child the orchestrator starts itself,
    each service signing what it sends with its own registered key."""
    namespace = await _namespace(secured_broker)
    async with pg_pool.acquire() as conn:
        await create_tables(conn)
    orchestrator_key, claimer_key, alice = _key("orchestrator"), _key("claimer"), _key("alice")
    await _register_as_the_api(
        secured_broker, namespace, {orchestrator_key: "admin", claimer_key: "admin", alice: "operate"}
    )

    def signing(signer: Signer) -> SignatureSettings:
        return REQUIRED.model_copy(
            update={"signing_key_file": _key_file(signer, tmp_path), "signing_principal": signer.principal}
        )

    registry = HandlerRegistry()
    for name, fn in ACTIVITIES.items():
        registry.register(name, fn)
    ticker = await start_ticker(secured_broker.settings("ticker", namespace), pg_dsn, signatures=REQUIRED)
    orchestrator = await start_orchestrator(
        orchestrator_settings(secured_broker.settings("orchestrator", namespace), pg_dsn).model_copy(
            update={"signatures": signing(orchestrator_key)}
        ),
        load_workflow_code(["tests.integration.orchestrator.saga", "tests.integration.orchestrator.flows"]),
    )
    claimer = ClaimerService(
        claimer_settings(secured_broker.settings("claimer", namespace), pg_dsn).model_copy(
            update={"signatures": signing(claimer_key)}
        ),
        registry=registry,
    )
    await claimer.start()
    dlq = await start_dlq(secured_broker.settings("dlq", namespace), pg_dsn, signatures=REQUIRED)
    admin = secured_broker.settings("admin", namespace)
    try:
        async with TopicTail(
            admin, [WORKFLOW_EVENTS, DOWNSTREAM_EVENTS, DLQ_EVENTS, WORKFLOW_COMMANDS]
        ) as tail:
            cli = secured_broker.settings("cli", namespace)
            async with Producer(cli, client_id="secure-test") as producer:
                forged_start = StartWorkflow(
                    workflow_id="forged", workflow_type="tests.parent", input={"order_id": "f"}
                )
                await _send(producer, cli, forged_start, "u-start", principal="token:ops-admin")
                opened = OpenDownstream(downstream="bank-api", reason="forged")
                await _send(producer, cli, opened, "u-open", principal="token:ops-admin")
                discard = DiscardDeadLetters(
                    selection=DeadLetterFilter(source_service="claimer"), reason="forged"
                )
                await _send(producer, cli, discard, "u-discard", principal="token:ops-admin")
                start = StartWorkflow(
                    workflow_id="signed-parent", workflow_type="tests.parent", input={"order_id": "sp-1"}
                )
                await _send(producer, cli, start, "s-parent", signer=alice)
                nap = StartWorkflow(
                    workflow_id="signed-nap",
                    workflow_type="tests.sleeper",
                    input={"order_id": "n-1", "seconds": 1},
                )
                await _send(producer, cli, nap, "s-nap", signer=alice)

            def rejected(command_id: str) -> Callable[[], CommandRejected | None]:
                def answer() -> CommandRejected | None:
                    for envelope in tail.by_id(f"{command_id}/rejected"):
                        return CommandRejected.model_validate(envelope.data)
                    return None

                return answer

            for command_id in ("u-start", "u-open", "u-discard"):
                refusal = await assert_eventually(
                    rejected(command_id), timeout=60, message=f"{command_id} is rejected"
                )
                assert refusal.reason.startswith("unsigned: this deployment accepts only signed commands"), (
                    refusal
                )
            parent = await wait_history(pg_pool, "signed-parent", "workflow.completed", timeout=90)
            await wait_history(pg_pool, "signed-nap", "workflow.completed", timeout=60)
            # A parked activity's retry is a workflow command like the others: unsigned it is
            # refused for that; signed by an `operate` key it reaches the workflow's decision, which
            # answers for itself (the nap is closed). Its scope comes from the command table.
            async with Producer(cli, client_id="secure-test-retry") as producer:
                retry = RetryActivity(workflow_id="signed-nap", sequence=2, reason="carrier back")
                await _send(producer, cli, retry, "u-retry", principal="token:ops-admin")
                await _send(producer, cli, retry, "s-retry", signer=alice)
            unsigned_retry = await assert_eventually(
                rejected("u-retry"), timeout=60, message="u-retry is rejected"
            )
            assert unsigned_retry.reason.startswith("unsigned: this deployment accepts only signed commands")
            signed_retry = await assert_eventually(
                rejected("s-retry"), timeout=60, message="s-retry is answered"
            )
            assert signed_retry.reason.startswith("workflow signed-nap "), signed_retry
            child_start = [
                s.envelope
                for s in tail.seen
                if s.envelope.id != "s-parent" and s.envelope.type == "workflow.start"
            ]
        done = parent[-1]
        assert isinstance(done, WorkflowCompleted)
        assert done.result["child"]["order_id"] == "sp-1"
        # The orchestrator started the child as itself, signed with its own key.
        [child] = [e for e in child_start if e.data.get("workflow_id") == "signed-parent-child"]
        assert child.principal == "key:orchestrator"
        assert child.proof is not None
        assert child.proof.key_id == orchestrator_key.key_id
        # Nothing of the refused commands was applied.
        assert (
            await pg_pool.fetchval("SELECT count(*) FROM orchestrator.workflows WHERE workflow_id = 'forged'")
            == 0
        )
        assert await pg_pool.fetchval("SELECT count(*) FROM claimer.downstreams WHERE name = 'bank-api'") == 0
        assert (
            await pg_pool.fetchval("SELECT kind FROM dlq.commands WHERE command_id = 'u-discard'")
            == "rejected"
        )
    finally:
        await stop_dlq(dlq)
        await claimer.stop(grace=0.5)
        await orchestrator.stop()
        await stop_ticker(ticker)
