"""The pipeline on a SASL_SSL broker with one principal per service holding only its ACLs.

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
import shutil
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from slotflow.commands import build_command, publish_command
from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    CreateSchedule,
    DeadLetterFilter,
    DeleteSchedule,
    FireJobDue,
    FireTimerFired,
    JobDue,
    OnceSpec,
    RedriveDeadLetters,
    ScheduleDefinition,
    StartTimer,
    StartWorkflow,
    TimerStarted,
    WorkflowCompleted,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.contracts.timers import retry_timer_id, sleep_timer_id
from slotflow.contracts.topics import (
    DLQ_EVENTS,
    DLQ_MESSAGES,
    DLQ_REDRIVES,
    JOBS_DUE,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    TIMER_COMMANDS,
)
from slotflow.core.identity import run_id
from slotflow.errors import KafkaAccessDenied, KafkaAuthenticationFailed
from slotflow.kafka.acls import AclBinding, Operation, ResourceType, create_acls, service_acls
from slotflow.kafka.admin import ensure_topics, warm_coordinators
from slotflow.kafka.producer import Producer
from slotflow.kafka.security import KafkaSecurity
from slotflow.pg.pool import Pool, create_pool
from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.processes import ProcessGroup, ServiceProcess, free_port, stack_env
from slotflow.testing.topics import TopicTail
from slotflow_claimer.app import ClaimerService
from slotflow_orchestrator.runtime import load_decider
from tests.integration.api.stats_support import StatsProcess, past_minute, stored_counts, workload
from tests.integration.claimer.support import REPO, wait_state
from tests.integration.claimer.support import settings_for as claimer_settings
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


def _ticker(kafka: KafkaSettings, pg_dsn: str, log_dir: Path) -> ServiceProcess:
    port = free_port()
    env = stack_env(
        kafka, pg_dsn, "SLOTFLOW_TICKER_", metrics_port=port, ticker_id=unique_name("tk"), backlog_seconds=0.5
    )
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
        load_decider(["tests.integration.orchestrator.flows"]),
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
