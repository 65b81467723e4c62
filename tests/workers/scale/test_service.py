"""KEDA's external scaler protocol against the real server in-process, through the stubs generated from
KEDA's own ``externalscaler.proto``, on a real Redis whose queue entries the real admission scripts wrote."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
import redis.asyncio as aioredis

from gateway.admission.base import Ticket
from gateway.admission.queue_scripts import Acquired, QueueScripts, ticket_id
from gateway.admission.redis_wire import PipelinedRedis
from llmgw_contract.redis_keys import RedisKeys
from workers.scale.cli import main
from workers.scale.proto import externalscaler_pb2 as pb
from workers.scale.proto import externalscaler_pb2_grpc as stubs
from workers.scale.rules import FleetRules
from workers.scale.service import DemandScaler, add_to_server

FLEET = """models:
 - name: cold
   source: {package: x}
   activation: on_demand
   scaling: {min_replicas: 0, max_replicas: 3, target_per_replica: 4, scale_down_delay_s: 30}
 - name: warm
   source: {package: x}
   concurrency: 6
"""


@dataclass
class Scaler:
    stub: Any
    redis: aioredis.Redis
    keys: RedisKeys

    def gateway(self) -> QueueScripts:
        return QueueScripts(PipelinedRedis.like(self.redis, 2.0), self.keys, ttl_ms=30_000)


@pytest.fixture
async def scaler(redis_url: str, tmp_path: Path) -> AsyncIterator[Scaler]:
    (tmp_path / "fleet.yaml").write_text(FLEET)
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys(f"sc{uuid.uuid4().hex[:10]}")
    server = grpc.aio.server()
    add_to_server(DemandScaler(redis, keys, FleetRules(tmp_path / "fleet.yaml"), poll_s=0.05), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Scaler(stubs.ExternalScalerStub(channel), redis, keys)
    finally:
        await channel.close()
        await server.stop(0)
        await redis.aclose()


def ref(model: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=f"vllm-{model}", namespace="llmgw", scalerMetadata={"model": model})


def ticket(rid: str, model: str = "cold") -> Ticket:
    return Ticket(rid, model, "t", 0, 10, 30.0, 100)


async def test_a_request_waiting_for_a_model_at_zero_is_pushed_active_within_a_second(scaler: Scaler) -> None:
    stream = scaler.stub.StreamIsActive(ref("cold"))
    first = await asyncio.wait_for(stream.read(), 5)
    assert first.result is False  # the state is pushed as soon as the stream opens
    started = time.monotonic()
    status, _ = await scaler.gateway().acquire(ticket("r1"), ticket_id("gw-a", "1"), 0)
    assert status is Acquired.QUEUED
    pushed = await asyncio.wait_for(stream.read(), 5)
    assert pushed.result is True
    assert time.monotonic() - started < 1.0
    assert (await scaler.stub.IsActive(ref("cold"))).result is True
    stream.cancel()


async def test_metrics_are_the_demand_summed_over_gateways_and_the_rules_target(scaler: Scaler) -> None:
    for gw in ("gw-a", "gw-b"):
        scripts = scaler.gateway()
        for i in range(3):  # capacity 2 over both: 2 running, 4 queued
            await scripts.acquire(ticket(f"{gw}{i}"), ticket_id(gw, str(i)), 2)
    got = await scaler.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref("cold"), metricName="s0-demand")
    )
    [value] = got.metricValues
    assert (value.metricName, value.metricValue, value.metricValueFloat) == ("s0-demand", 6, 6.0)
    [spec] = (await scaler.stub.GetMetricSpec(ref("cold"))).metricSpecs
    assert (spec.targetSize, spec.targetSizeFloat) == (4, 4.0)
    [spec] = (await scaler.stub.GetMetricSpec(ref("warm"))).metricSpecs
    assert spec.targetSize == 6  # no rule: the concurrency
    assert (await scaler.stub.IsActive(ref("warm"))).result is False


async def test_a_model_the_fleet_does_not_have_is_refused_by_name(scaler: Scaler) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await scaler.stub.IsActive(ref("nope"))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    assert "metadata model='nope' is no model of the fleet (known: cold, warm)" in str(err.value.details())


def test_the_cli_refuses_an_unusable_fleet_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text(FLEET.replace("   activation: on_demand\n", ""))
    assert main(["--fleet", str(bad)]) == 2
    assert (
        "models.0.scaling: Value error, min_replicas 0 needs activation: on_demand" in capsys.readouterr().err
    )
