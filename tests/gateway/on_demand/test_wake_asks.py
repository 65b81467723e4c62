"""The gateway's wake requests: however many requests wait for one asleep model, a gateway asks Redis at
most once per look (each waiting request looks again every RECHECK_S and at every registry change: with
hundreds waiting, one SET each exhausted the client's connection pool, 'Too many connections')."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
import redis.asyncio as aioredis

from gateway.metrics import GatewayMetrics
from gateway.on_demand.wake import Wakes
from llmgw_contract.fleet import parse_fleet
from llmgw_contract.redis_keys import RedisKeys

MODEL = parse_fleet("models:\n - {name: sleepy, source: {path: /none}, activation: on_demand}\n").models[0]


async def test_hundreds_of_waiting_requests_ask_for_one_models_wake_with_one_call(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    redis = aioredis.Redis.from_url(redis_url, max_connections=4)
    keys = RedisKeys(f"wk{uuid.uuid4().hex[:6]}")
    wakes = Wakes(redis, keys, "gw-1", GatewayMetrics())
    try:
        asked = await asyncio.gather(*(wakes.request(MODEL, f"r{i}") for i in range(200)))
        assert sum(asked) == 1 and await redis.get(keys.wake_request("sleepy")) == b"gw-1"
        assert "wake request failed" not in caplog.text
    finally:
        await redis.aclose()
