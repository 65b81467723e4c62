"""Readiness by the Kubernetes convention: /ready says whether this gateway can serve, whatever its
models' states (those are in its body and metrics). Every replica stopped: the gateway stays in
service and a request gets the clear 503 ``no_ready_replica`` at once (FAKE ENGINE replica)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from gateway.edge.routes import serving
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import remove
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import start_fake_engine

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def test_every_replica_stopped_ready_stays_200_and_a_chat_gets_503_at_once(
    tmp_path: Path, redis_url: str
) -> None:
    prefix = f"rd{uuid.uuid4().hex[:8]}"
    engine = start_fake_engine(tmp_path)
    try:
        record = await register(redis_url, prefix, "m", engine.url, "m-0")
        fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}}])
        async with serve_gateway(tmp_path, fleet, redis_url, prefix) as gw, httpx.AsyncClient() as c:
            assert (await c.post(f"{gw}/v1/chat/completions", json=CHAT, timeout=10)).status_code == 200
            engine.stop()  # the supervisor stops the replica and takes it out of the registry
            r = aioredis.Redis.from_url(redis_url)
            await remove(r, RedisKeys(prefix), record)
            await r.aclose()

            async def unavailable() -> bool:
                body = (await c.get(f"{gw}/ready")).json()
                return bool(body["models"]["m"]["state"] == "unavailable")

            await until(unavailable, 10, "the model to be unavailable")
            ready = await c.get(f"{gw}/ready")
            chat = await c.post(f"{gw}/v1/chat/completions", json=CHAT, timeout=1.0)
            metrics = (await c.get(f"{gw}/metrics")).text
    finally:
        engine.stop()
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert ready.json()["models"]["m"] == {
        "ready_replicas": 0,
        "replicas": 0,
        "state": "unavailable",
        "kv_index": {"exact": 0, "approximate": 0},
    }
    assert chat.status_code == 503
    assert chat.json()["error"]["code"] == "no_ready_replica"
    assert chat.headers["x-should-retry"] == "true"
    assert 'llmgw_model_state{model="m",state="unavailable"} 1.0' in metrics


async def test_ready_says_only_ready_to_a_caller_without_the_admin_key_unless_straight_from_loopback(
    tmp_path: Path, redis_url: str
) -> None:
    """Through nginx (which sets X-Forwarded-For and X-Real-IP) an unauthenticated /ready is a bare status:
    its models, states and Redis are for the operator, with the admin key or on this host directly."""
    prefix = f"rd{uuid.uuid4().hex[:8]}"
    fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}}])
    proxied = {"x-forwarded-for": "203.0.113.9", "x-real-ip": "203.0.113.9"}
    async with (
        serve_gateway(tmp_path, fleet, redis_url, prefix, admin_key="adm-" + "k" * 20) as gw,
        httpx.AsyncClient() as c,
    ):
        bare = await c.get(f"{gw}/ready", headers=proxied)
        wrong = await c.get(f"{gw}/ready", headers={**proxied, "authorization": "Bearer nope"})
        admin = await c.get(f"{gw}/ready", headers={**proxied, "authorization": "Bearer adm-" + "k" * 20})
        local = await c.get(f"{gw}/ready")
    assert (bare.status_code, bare.json()) == (200, {"ready": True})
    assert (wrong.status_code, wrong.json()) == (200, {"ready": True})
    assert admin.status_code == 200 and admin.json()["models"]["m"]["state"] == "unavailable"
    assert local.status_code == 200 and set(local.json()) > {"ready", "models", "redis"}


def test_serving_depends_on_redis_only_where_degraded_mode_is_not_allowed() -> None:
    assert serving(redis_ok=True, degraded_ready=False)
    assert serving(redis_ok=False, degraded_ready=True)
    assert not serving(redis_ok=False, degraded_ready=False)
