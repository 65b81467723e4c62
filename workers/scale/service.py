"""KEDA's external scaler (``externalscaler.proto``) served from the shared queue's demand.

Each ScaledObject names its model in the trigger's metadata (``model: <fleet name>``). ``IsActive``: the
model has anything queued or in flight; ``StreamIsActive`` reads the demand every ``poll_s`` and pushes
at once when activity changes (and the first answer as soon as the stream opens), so a request waiting for
a model at zero reaches KEDA within one poll; ``GetMetricSpec``: the rule's ``target_per_replica``;
``GetMetrics``: the demand (queued + in flight, summed over every gateway: :mod:`llmgw_contract.demand`),
which the HPA divides by the target. Nothing is kept beyond Redis: any replica of the scaler answers alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc  # type: ignore[import-untyped]
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from llmgw_contract.demand import Demand, read_demand
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.scaling import ScalingRule
from workers.scale.proto import externalscaler_pb2 as pb
from workers.scale.proto import externalscaler_pb2_grpc as stubs

log = logging.getLogger("llmgw.scaler")
MODEL_KEY = "model"
"""The trigger metadata key that names the model (``scalerMetadata`` in the protocol)."""
DEFAULT_POLL_S = 0.1
METRIC = "demand"

Context = Any
"""``grpc.aio.ServicerContext`` (grpc ships no types)."""
Rules = Callable[[], Mapping[str, ScalingRule]]


class DemandScaler:
    """The ExternalScaler service: ``rules()`` gives each model's rule by its fleet name (re-read by the
    caller as the fleet file changes)."""

    def __init__(
        self, redis: aioredis.Redis, keys: RedisKeys, rules: Rules, poll_s: float = DEFAULT_POLL_S
    ) -> None:
        self.redis, self.keys, self.rules, self.poll_s = redis, keys, rules, poll_s

    async def _model(self, ref: pb.ScaledObjectRef, context: Context) -> tuple[str, ScalingRule]:
        name = ref.scalerMetadata.get(MODEL_KEY, "")
        rule = self.rules().get(name)
        if rule is None:
            known = ", ".join(sorted(self.rules()))
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"ScaledObject {ref.namespace}/{ref.name}: metadata {MODEL_KEY}={name!r} is no model of the "
                f"fleet (known: {known})",
            )
        assert rule is not None
        return name, rule

    async def _demand(self, model: str, context: Context) -> Demand:
        try:
            return await read_demand(self.redis, self.keys, model)
        except (RedisError, OSError) as exc:
            log.warning("model=%s demand unreadable: %s", model, exc)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"redis unreachable: {exc}")
            raise  # abort raises; this line is for the type checker

    async def IsActive(self, request: pb.ScaledObjectRef, context: Context) -> pb.IsActiveResponse:
        model, _ = await self._model(request, context)
        return pb.IsActiveResponse(result=(await self._demand(model, context)).total > 0)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: Context
    ) -> AsyncIterator[pb.IsActiveResponse]:
        model, _ = await self._model(request, context)
        last: bool | None = None
        failing = False
        while True:
            try:
                demand = await read_demand(self.redis, self.keys, model)
            except (RedisError, OSError) as exc:
                if not failing:
                    log.warning("model=%s demand unreadable, the stream keeps trying: %s", model, exc)
                failing = True
            else:
                failing = False
                active = demand.total > 0
                if active != last:
                    log.info(
                        "model=%s active=%s pushed (demand %d%s)", model, active, demand.total, waited(demand)
                    )
                    yield pb.IsActiveResponse(result=active)
                    last = active
            await asyncio.sleep(self.poll_s)

    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Context) -> pb.GetMetricSpecResponse:
        _, rule = await self._model(request, context)
        target = rule.target_per_replica
        spec = pb.MetricSpec(metricName=METRIC, targetSize=target, targetSizeFloat=float(target))
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: Context) -> pb.GetMetricsResponse:
        model, _ = await self._model(request.scaledObjectRef, context)
        total = (await self._demand(model, context)).total
        value = pb.MetricValue(
            metricName=request.metricName or METRIC, metricValue=total, metricValueFloat=float(total)
        )
        return pb.GetMetricsResponse(metricValues=[value])

    async def StreamMetricSpec(
        self, request: pb.ScaledObjectRef, context: Context
    ) -> AsyncIterator[pb.GetMetricSpecResponse]:
        """Optional in the protocol: not served (KEDA then polls ``GetMetricSpec``)."""
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "StreamMetricSpec: use GetMetricSpec")
        yield pb.GetMetricSpecResponse()  # pragma: no cover (abort raises)


def waited(demand: Demand) -> str:
    """For the log: how long the first request has waited for a model at zero, if one does."""
    if not demand.waiting_at_zero:
        return ""
    return f", first wait at zero {demand.now_ms - demand.waiting_since_ms} ms ago"


def add_to_server(scaler: DemandScaler, server: Any) -> None:
    """Register the service on ``server`` (a ``grpc.aio.Server``), by the generated stubs."""
    stubs.add_ExternalScalerServicer_to_server(scaler, server)
