"""The supervisor as the scaler on one host: each model with a scaling rule (min below max) runs as many
replicas as its demand needs, the same rule and signal as KEDA's scaler in a cluster.

Every ``every_s`` :class:`Autoscaler` reads, per such model, the demand summed over every gateway
(:func:`llmgw_contract.demand.read_demand`) and the gateways' in-flight counts per replica
(:meth:`RedisKeys.inflight`), and lets :class:`workers.autoscale.decide.ModelScaler` decide:

* up: the reconciler converges the model to the new count (:meth:`Reconciler.scale_to`: the same plan,
  placement, ports and start as a fleet change; an on-demand model's replicas start at once). The next
  replica must fit the host's memory as the reconciler's headroom probe reads it; when it does not, the
  start is not made, the reason logged once (until it fits again) and counted
  (``llmgw_supervisor_scale_refused_total``). A start from zero replicas is a cold start: its duration
  (from the decision to READY) is observed and folded into the model's estimate in Redis
  (:func:`llmgw_contract.cold_starts.record_cold_start`), which the gateways' ETA reads, marked
  unprepared when the page-cache warm-up (:mod:`workers.autoscale.warmup`) had not read the model's start
  ahead at the decision;
* down: the idlest replica is drained and retired through the owner's one drain
  (:meth:`Reconciler.scale_down`), so what runs on it finishes. Where sleep exists (a GPU replica
  launched with vLLM's sleep mode, given the activator), it is drained and put to sleep in place instead
  (:meth:`Activator.sleep`, the same drain) and stays listed ASLEEP for one more ``scale_down_delay_s``
  (:mod:`workers.autoscale.parked`), then is retired; demand that returns meanwhile wakes it through the
  activator's one wake (:meth:`Activator.wake_now`) instead of starting a new replica.

The loop is supervised (:func:`llmgw_contract.supervision.every`): a failed tick, a Redis outage included
(:data:`llmgw_contract.redis_url.REDIS_DOWN`), is logged and counted and the next one comes after the one
back-off; the replicas stay as they are meanwhile. A tick waits for the starts and drains it asks for.

Every managed model's desired and listed counts are exported each tick (``llmgw_supervisor_replicas_*``;
a fixed model's desired count is its ``replicas``), so the Scaling row and ``LLMGWScaleShort`` read every
model, not only the scaled ones.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

import redis.asyncio as aioredis

from llmgw_contract.cold_starts import record_cold_start
from llmgw_contract.demand import read_demand
from llmgw_contract.fleet import Model
from llmgw_contract.inflight_share import fresh_counts
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.scaling import ScalingRule, scaling_rule
from llmgw_contract.supervision import every
from workers.autoscale.decide import ModelScaler
from workers.autoscale.parked import Parked
from workers.converge.actions import Start, plan
from workers.converge.loop import Reconciler
from workers.life.owner import Replica
from workers.replica.launch import ReplicaSpec

log = logging.getLogger("llmgw.autoscale")


async def replica_inflight(redis: aioredis.Redis, keys: RedisKeys, model: str) -> Counter[str]:
    """Requests in flight per replica id, summed over the gateways' fresh shares."""
    pipe = redis.pipeline(transaction=False)
    pipe.hvals(keys.inflight(model))
    pipe.time()
    shares, (seconds, micros) = await pipe.execute()
    return fresh_counts(shares, int(seconds) * 1000 + int(micros) // 1000)


def next_start(rec: Reconciler, model: str, count: int) -> ReplicaSpec | None:
    """The replica the reconciler's plan would start first for ``model`` at ``count`` replicas."""
    fleet = rec.fleet
    if fleet is None:
        return None
    counts = {**rec.counts, model: count}
    running = rec.running()
    actions = plan(fleet, running, rec.n_devices, rec.refused, rec.port_free(fleet), rec.retired_ids, counts)
    return next((a.spec for a in actions if isinstance(a, Start) and a.spec.model.name == model), None)


class Sleeps(Protocol):
    """What the scaler asks of the activator where sleep exists (the ``Activator`` of workers.ondemand)."""

    def sleep_mode(self, r: Replica) -> bool:
        """Whether ``r`` sleeps in place (a GPU replica launched with vLLM's sleep mode)."""
        ...

    async def sleep(self, r: Replica, why: str, reason: str = "idle") -> None:
        """Drain ``r`` (the one drain) and put it to sleep, published ASLEEP."""
        ...

    async def wake_now(self, model: str, replicas: list[Replica], why: str) -> None:
        """Wake ``replicas`` through the model's one wake, and wait for it."""
        ...


class Autoscaler:
    """The supervised scaling loop (see the module doc)."""

    def __init__(
        self,
        rec: Reconciler,
        redis: aioredis.Redis,
        keys: RedisKeys,
        metrics: SupervisorMetrics,
        every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        act: Sleeps | None = None,
        prepared: Callable[[str], bool] = lambda model: True,
    ) -> None:
        self.rec, self.redis, self.keys, self.metrics = rec, redis, keys, metrics
        self.every_s, self.clock, self.act = every_s, clock, act
        self.prepared = prepared
        """Whether a model's start was read ahead into the page cache (:meth:`Warmup.warm`)."""
        self.parked = Parked()
        """Replicas a scale-down put to sleep (where sleep exists), stopped after one more delay."""
        self.scalers: dict[str, ModelScaler] = {}
        self.refusing: set[str] = set()
        """Models whose next replica did not fit (logged once until it fits again)."""

    async def run(self) -> None:
        await every("autoscale", self.every_s, self.tick, self.rec.sup.stopping, self.metrics.failed)

    async def tick(self) -> None:
        """One decision per model with a scaling rule, acted on."""
        fleet = self.rec.fleet
        models = fleet.models if fleet is not None else []
        scaled = {m.name: rule for m in models if m.managed and not (rule := scaling_rule(m)).fixed}
        for name in [n for n in self.rec.counts if n not in scaled]:  # its rule is gone: the fleet's count
            del self.rec.counts[name]
        for m in models:
            if m.name in scaled:
                await self.model(m, scaled[m.name])
            elif m.managed:
                self.report(m.name, m.replicas)

    def report(self, name: str, desired: int) -> None:
        """The model's desired and listed replica counts, and its refusal and cold-start series at zero
        until they happen (a fixed model too: desired is the fleet's ``replicas``)."""
        self.metrics.replicas_desired.labels(name).set(desired)
        self.metrics.replicas_actual.labels(name).set(len(self.listed(name)))
        self.metrics.scale_refused.labels(name)

    def scaler(self, name: str, rule: ScalingRule) -> ModelScaler:
        """The model's scaler; a new one when its rule changed."""
        held = self.scalers.get(name)
        if held is None or held.rule != rule:
            held = self.scalers[name] = ModelScaler(rule)
        return held

    def listed(self, name: str) -> list[Replica]:
        mine = [r for r in self.rec.sup.replicas if r.spec.model.name == name and not r.retired]
        return sorted(mine, key=lambda r: r.spec.index)

    async def model(self, m: Model, rule: ScalingRule) -> None:
        """Read the model's demand, decide, act; nothing while the reconciler converges (a fleet change
        or a start under way: the count is not settled)."""
        demand = await read_demand(self.redis, self.keys, m.name)
        inflight = await replica_inflight(self.redis, self.keys, m.name)
        if self.rec.lock.locked():
            return
        listed = self.listed(m.name)
        self.parked.keep_only([r.spec.id for r in listed if r.state is ReplicaState.ASLEEP])
        ids = [r.spec.id for r in listed if r.spec.id not in self.parked]
        scaler = self.scaler(m.name, rule)
        total = max(demand.total, 1 if demand.waiting_at_zero else 0)
        fits = scaler.auto.needed(total) <= len(listed) or await self.fits(m.name, len(listed) + 1)
        d = scaler.decide(demand.total, demand.waiting_at_zero, ids, inflight, self.clock(), fits)
        self.report(m.name, d.desired)
        if d.remove is not None:
            await self.remove(self.rec.sup.find(d.remove), len(listed) - 1)
        elif d.start:
            await self.add(m.name, [r.spec.id for r in listed], d.start)
        await self.stop_parked(m.name, rule)
        self.metrics.replicas_actual.labels(m.name).set(len(self.listed(m.name)))

    def sleeps_first(self, r: Replica) -> bool:
        """Whether ``r`` sleeps before it goes: a READY GPU replica with vLLM's sleep mode."""
        return self.act is not None and r.state is ReplicaState.READY and self.act.sleep_mode(r)

    async def remove(self, r: Replica, left: int) -> None:
        """Scale ``r``'s model down by ``r``: asleep (parked) where sleep exists, else drained and retired."""
        if self.act is not None and self.sleeps_first(r):
            delay = scaling_rule(r.spec.model).scale_down_delay_s
            log.info("autoscale model=%s replica=%s sleeps before it goes (stopped in %g s unless demand "
                     "returns)", r.spec.model.name, r.spec.id, delay)  # fmt: skip
            await self.act.sleep(r, "scale down", reason="scale_down")
            if r.state is ReplicaState.ASLEEP:
                self.parked.park(r.spec.id, self.clock())
                return
        await self.rec.scale_down(r, left)

    async def add(self, name: str, listed: list[str], start: int) -> None:
        """``start`` more serving replicas: the parked ones woken first, the rest started."""
        wake = self.parked.to_wake(listed, start) if self.act is not None else []
        if self.act is not None and wake:
            for rid in wake:
                self.parked.take(rid)
            log.info("autoscale model=%s wakes %s: demand returned within the delay", name, ", ".join(wake))
            await self.act.wake_now(name, [self.rec.sup.find(rid) for rid in wake], "demand returned")
        if start > len(wake):
            await self.grow(name, len(listed), len(listed) + start - len(wake))

    async def stop_parked(self, name: str, rule: ScalingRule) -> None:
        """Retire the parked replicas asleep for ``scale_down_delay_s`` (drained before they slept)."""
        listed = [r.spec.id for r in self.listed(name)]
        for rid in self.parked.due(listed, self.clock(), rule.scale_down_delay_s):
            self.parked.take(rid)
            log.info("autoscale model=%s replica=%s asleep for the delay: stopped", name, rid)
            await self.rec.scale_down(self.rec.sup.find(rid), len(self.listed(name)) - 1)

    async def fits(self, name: str, count: int) -> bool:
        """Whether the next replica of ``name`` fits the host's memory (the reconciler's headroom probe);
        a refusal is logged once until it fits again, and counted."""
        spec = next_start(self.rec, name, count)
        if spec is None:
            return True
        room = await self.rec.headroom(spec)
        if room.fits:
            self.refusing.discard(name)
            return True
        if name not in self.refusing:
            self.refusing.add(name)
            self.metrics.scale_refused.labels(name).inc()
            log.warning("autoscale model=%s wants replica %d, which does not fit: %s", name, count,
                        room.describe())  # fmt: skip
        return False

    async def grow(self, name: str, before: int, count: int) -> None:
        """Converge ``name`` to ``count`` replicas; from zero, record the cold start once one is READY."""
        log.info("autoscale model=%s replicas %d -> %d", name, before, count)
        started, prepared = self.clock(), self.prepared(name)
        await self.rec.scale_to(name, count)
        ready = [r for r in self.listed(name) if r.state is ReplicaState.READY]
        if before == 0 and ready:
            seconds = self.clock() - started
            self.metrics.cold_starts.labels(name).observe(seconds)
            kind = ready[0].spec.device_kind
            mean = await record_cold_start(self.redis, self.keys, name, kind, seconds, prepared)
            log.info("autoscale model=%s cold start %.2f s%s (estimate %s s)", name, seconds,
                     "" if prepared else ", unprepared", mean)  # fmt: skip
