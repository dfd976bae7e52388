"""Run outcomes are one counter, `slotflow_claimer_run_outcomes_total{outcome,reason}`, so a
dashboard stacks and divides them without a list of names: on the real broker and database, a run
that fails once and completes, one dead-lettered and one skipped by its overlap policy are counted
once each under their outcome, and the old per-outcome counters are gone."""

from datetime import timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slotflow.contracts import RetryPolicy
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import SLOT, job_due, publish, wait_state
from tests.integration.ticker.support import start_ticker, stop_ticker

OUTCOMES = "slotflow_claimer_run_outcomes_total"


async def test_every_outcome_is_one_counter_with_an_outcome_label(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    async def flaky(ctx: RunContext) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("gateway unreachable")
        return "paid"

    async def doomed(ctx: RunContext) -> None:
        raise PermanentError("merchant account closed")

    registry.register("test.flaky", flaky)
    registry.register("test.doomed", doomed)
    claimer = await start_claimer()
    policy = RetryPolicy(base=timedelta(milliseconds=300), cap=timedelta(seconds=1), max_attempts=3)
    flaky_job = job_due("flaky", handler="test.flaky", retry=policy)
    doomed_job = job_due("doomed", handler="test.doomed", retry=policy)
    ticker = await start_ticker(kafka, pg_dsn)  # the retry's durable timer
    try:
        await publish(producer, kafka, [flaky_job, doomed_job])
        await wait_state(db, flaky_job.run_id, "completed")
        await wait_state(db, doomed_job.run_id, "dead_lettered")
    finally:
        await stop_ticker(ticker)

    def counted() -> dict[tuple[str, str], float]:
        return {
            (labels["outcome"], labels["reason"]): value
            for name, labels, value in _samples(claimer.metrics.registry)
            if name == OUTCOMES
        }

    await assert_eventually(lambda: counted().get(("completed", ""), 0) == 1)
    assert counted() == {
        ("completed", ""): 1,
        ("retrying", ""): 1,
        ("dead_lettered", "permanent_error"): 1,
    }
    assert claimer.metrics.outcomes_of("completed") == 1
    names = {name for name, _, _ in _samples(claimer.metrics.registry)}
    for gone in ("completed", "failed", "retried", "dead_lettered", "skipped", "cancelled", "held"):
        assert f"slotflow_claimer_runs_{gone}_total" not in names


async def test_a_run_its_overlap_policy_skips_is_counted_as_skipped(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    release_first = False

    async def slow(ctx: RunContext) -> None:
        await assert_eventually(lambda: release_first, timeout=30)

    registry.register("test.slow", slow)
    claimer = await start_claimer()
    first = job_due("overlapping", handler="test.slow", overlap="skip")
    second = job_due("overlapping", handler="test.slow", overlap="skip", slot=SLOT + timedelta(minutes=1))
    await publish(producer, kafka, [first])
    await wait_state(db, first.run_id, "running")
    await publish(producer, kafka, [second])
    await wait_state(db, second.run_id, "skipped")
    release_first = True
    await wait_state(db, first.run_id, "completed")
    await assert_eventually(lambda: claimer.metrics.outcomes_of("completed") == 1)
    assert claimer.metrics.value(OUTCOMES, {"outcome": "skipped", "reason": "overlap"}) == 1


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    """Every sample the registry exposes, as a scrape reads it."""
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    ]
