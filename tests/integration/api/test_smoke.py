import httpx

from slotflow.testing import assert_eventually


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"kafka": "ok", "postgres": "ok", "loops": "ok"}
    metrics = await client.get("/metrics")
    assert "slotflow_api_requests" in metrics.text

    async def listed() -> bool:
        return bool((await client.get("/v1/schedules")).json() == {"items": [], "next_cursor": None})

    await assert_eventually(listed)
