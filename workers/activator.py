"""Models on demand, the supervisor's side: wake a model when a gateway asks, put it to sleep when idle
or to make room.

Every ``tick_s`` the activator reads, per on-demand model, the wake request the gateways set
(:meth:`RedisKeys.wake_request`) and the model's demand in the shared queue (leases running, tickets
waiting). An asleep model that is asked for is woken: the :mod:`workers.ledger` says which idle models
must sleep first for it to fit (a model with requests in flight or queued never does); then the replica
is published WAKING, started, made to decode one token, published READY and announced on
:attr:`RedisKeys.state_channel`, so gateways route to it at once. An awake on-demand model with nothing
in flight or queued for ``idle_timeout_s`` is drained and put to sleep. On a CPU sleeping stops the
process and waking starts it (vLLM's CPU build has no sleep mode). Each wake and sleep is one log line
and one count; wake latency is a histogram.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contract.drain import wait_until_idle
from contract.fleet import Fleet, Model
from contract.redis_keys import RedisKeys
from contract.registry import ROUTABLE, ReplicaState, new_instance_id
from contract.replica_metrics import SupervisorMetrics
from workers.ledger import Resident, Room, idle_expired, make_room
from workers.process import StartFailed
from workers.reconcile import device_key
from workers.rss import tree_rss_bytes
from workers.supervisor import Replica, Supervisor

log = logging.getLogger("llmgw.ondemand")
REDIS_ERRORS = (RedisError, OSError, TimeoutError)
WARMUP_PROMPT = "Hello"


@dataclass(frozen=True, slots=True)
class ActivatorOptions:
    tick_s: float = 0.25
    retry_wake_s: float = 5.0
    """After a failed wake, the model's wake request is dropped and a new one waits this long."""
    warmup_timeout_s: float = 120.0


class Activator:
    """Wakes and puts to sleep the supervisor's on-demand replicas."""

    def __init__(
        self,
        sup: Supervisor,
        keys: RedisKeys,
        fleet: Callable[[], Fleet | None],
        estimate: Callable[[Replica], int],
        free_bytes: Callable[[], int | None],
        metrics: SupervisorMetrics,
        options: ActivatorOptions = ActivatorOptions(),
        measure: Callable[[int], int] = tree_rss_bytes,
    ) -> None:
        self.measure = measure
        self.sup, self.keys, self.fleet, self.estimate = sup, keys, fleet, estimate
        self.free_bytes, self.metrics, self.options = free_bytes, metrics, options
        self.last_used: dict[str, float] = {}
        self.measured: dict[str, int] = {}
        """Bytes each model's replica took when last awake (its process tree's resident memory)."""
        self.wakes: dict[str, asyncio.Task[None]] = {}
        self.retry_at: dict[str, float] = {}
        self.closing = asyncio.Event()
        """Set by :meth:`close`: the loop ends by it even if a Redis call swallowed a cancellation."""
        self.room = asyncio.Lock()

    @property
    def redis(self) -> aioredis.Redis:
        return self.sup.registry.redis

    def model(self, r: Replica) -> Model:
        """The model as the fleet file says now (activation may change without a restart)."""
        fleet = self.fleet()
        if fleet is not None:
            for m in fleet.models:
                if m.name == r.spec.model.name:
                    return m
        return r.spec.model

    def budget(self) -> int | None:
        """The fleet's ``defaults.memory_budget_gib`` in bytes; None: the host's available memory decides."""
        fleet = self.fleet()
        gib = fleet.defaults.memory_budget_gib if fleet is not None else None
        return None if gib is None else int(gib * (1 << 30))

    def close(self) -> None:
        """End :meth:`run` (call it before cancelling the task)."""
        self.closing.set()

    async def run(self) -> None:
        """Tick until the supervisor stops or :meth:`close`; wakes in flight are cancelled at the end."""
        try:
            while not (self.sup.stopping.is_set() or self.closing.is_set()):
                try:
                    await self.tick()
                except REDIS_ERRORS as exc:
                    log.warning("on-demand tick skipped: redis unreachable (%s)", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.closing.wait(), self.options.tick_s)
        finally:
            for task in self.wakes.values():
                task.cancel()
            await asyncio.gather(*self.wakes.values(), return_exceptions=True)

    def groups(self) -> dict[str, list[Replica]]:
        out: dict[str, list[Replica]] = {}
        for r in self.sup.replicas:
            if not r.retired:
                out.setdefault(r.spec.model.name, []).append(r)
        return out

    async def busy(self, model: str) -> bool:
        """Requests running or waiting for the model in the shared queue, or a wake asked for."""
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(k.leases(model))
        pipe.zcard(k.queue(model))
        pipe.exists(k.wake_request(model))
        leases, queued, asked = await pipe.execute()
        return bool(leases or queued or asked)

    async def tick(self) -> None:
        now = time.monotonic()
        for name, replicas in self.groups().items():
            if name in self.wakes:
                continue
            model = self.model(replicas[0])
            asleep = [r for r in replicas if r.state is ReplicaState.ASLEEP]
            awake = [r for r in replicas if r.state in ROUTABLE]
            if not model.on_demand:
                if asleep:  # the fleet made it an always model: wake it for good
                    self.spawn_wake(name, asleep, "activation is always")
                continue
            self.metrics.show_on_demand(name)
            busy = await self.busy(name)
            if busy or name not in self.last_used:
                self.last_used[name] = now
            asked = bool(await self.redis.exists(self.keys.wake_request(name)))
            if asleep and asked:
                if now >= self.retry_at.get(name, 0.0):
                    self.spawn_wake(name, asleep, "a request waits")
            elif awake and asked:  # asked by a gateway that had not heard yet: already awake
                await self.redis.delete(self.keys.wake_request(name))
                await self.announce(name)
            elif awake and idle_expired(busy, self.last_used[name], now, model.idle_timeout_s):
                idle = now - self.last_used[name]
                for r in awake:
                    await self.sleep(r, f"idle for {idle:.0f} s")

    def spawn_wake(self, model: str, replicas: list[Replica], why: str) -> None:
        task = asyncio.create_task(self.wake(model, replicas, why))
        self.wakes[model] = task
        task.add_done_callback(lambda _: self.wakes.pop(model, None))

    async def wake(self, model: str, replicas: list[Replica], why: str) -> None:
        """Make room, start each replica, warm it up, publish it READY and announce the model ready."""
        started = time.monotonic()
        ok = True
        for r in replicas:
            ok = await self.wake_replica(r, why) and ok
        took = time.monotonic() - started
        outcome = "ok" if ok else "failed"
        self.metrics.wakes.labels(model, outcome).inc()
        self.metrics.wake_seconds.labels(model).observe(took)
        if not ok:
            self.retry_at[model] = time.monotonic() + self.options.retry_wake_s
            with contextlib.suppress(*REDIS_ERRORS):
                await self.redis.delete(self.keys.wake_request(model))  # the next request asks again
            log.error("model=%s wake failed after %.2f s; next attempt on demand in %.0f s or more",
                      model, took, self.options.retry_wake_s)  # fmt: skip
            return
        self.last_used[model] = time.monotonic()
        await self.announce(model)
        try:
            await self.redis.delete(self.keys.wake_request(model))
        except REDIS_ERRORS as exc:
            log.warning("model=%s wake request not cleared (%s): it expires by itself", model, exc)
        log.info("model=%s awake in %.2f s (%s)", model, took, why)

    async def announce(self, model: str) -> None:
        """Tell every gateway the model's state changed, so none waits for its next registry poll."""
        await self.sup.registry.announce(model)

    async def wake_replica(self, r: Replica, why: str) -> bool:
        async with self.room:
            room = await self.make_room(r)
            if not room.fits:
                log.error("replica=%s cannot wake: %s", r.spec.id, room.refused)
                return False
            for victim in room.evict:
                v = next(x for x in self.sup.replicas if x.spec.id == victim)
                await self.sleep(v, f"room for {r.spec.id}", reason="room")
            return await self.start(r, why)

    async def make_room(self, r: Replica) -> Room:
        """The ledger's answer for waking ``r`` on its device."""
        lane = device_key(r.spec.device_kind, r.spec.device)
        residents = []
        for x in self.sup.replicas:
            same = device_key(x.spec.device_kind, x.spec.device) == lane
            if x is r or not same or not x.process.alive:
                continue
            m = self.model(x)
            busy = not m.on_demand or await self.busy(m.name)
            size = self.measured.get(m.name) or self.estimate(x)
            residents.append(
                Resident(x.spec.id, m.name, size, m.priority, self.last_used.get(m.name, 0), busy)
            )
        need = self.measured.get(r.spec.model.name) or self.estimate(r)
        budget = self.budget()
        if budget is not None:
            free = budget - sum(x.bytes for x in residents)
        else:
            host = self.free_bytes()
            if host is None:
                return Room()
            free = host
        return make_room(residents, need, free, self.model(r).priority)

    async def start(self, r: Replica, why: str) -> bool:
        """WAKING, the process, its first token, then READY (and watched for crashes from then on)."""
        sup = self.sup
        r.instance = new_instance_id()
        await sup.set_state(r, ReplicaState.WAKING)
        log.info("replica=%s waking (%s)", r.spec.id, why)
        try:
            await r.process.start()
            r.startup_s = await r.process.wait_until_listed(
                r.spec.url, r.spec.model.name, sup.options.ready_deadline_s, sup.client
            )
            await self.warm_up(r)
        except (StartFailed, httpx.HTTPError) as exc:
            log.error("replica=%s wake failed: %s", r.spec.id, exc)
            await r.process.stop(1.0)
            await sup.set_state(r, ReplicaState.ASLEEP)
            return False
        r.started_at = time.monotonic()
        if r.spec.device_kind == "cpu" and r.process.pid is not None:
            size = await asyncio.to_thread(self.measure, r.process.pid)
            self.measured[r.spec.model.name] = size
            self.metrics.resident.labels(r.spec.model.name, r.spec.id).set(size)
        await sup.set_state(r, ReplicaState.READY)
        sup.begin_watch(r)
        return True

    async def warm_up(self, r: Replica) -> None:
        """One token decoded (or one embedding) before the replica takes traffic: /health answering does
        not prove the engine decodes."""
        name = r.spec.model.name
        body: dict[str, str | int] = {"model": name}
        if r.spec.model.kind == "embedding":
            path, body["input"] = "/v1/embeddings", WARMUP_PROMPT
        else:
            path, body["prompt"], body["max_tokens"] = "/v1/completions", WARMUP_PROMPT, 1
        resp = await self.sup.client.post(r.spec.url + path, json=body, timeout=self.options.warmup_timeout_s)
        if resp.status_code != 200:
            raise StartFailed(f"warm-up request answered {resp.status_code}: {resp.text[:200]}")

    async def sleep(self, r: Replica, why: str, reason: str = "idle") -> None:
        """Drain (DRAINING: gateways stop sending, what runs finishes), stop the process, publish ASLEEP."""
        sup = self.sup
        if r.watcher is not None:
            r.watcher.cancel()
            await asyncio.gather(r.watcher, return_exceptions=True)
            if r.watcher in sup.watchers:
                sup.watchers.remove(r.watcher)
            r.watcher = None
        log.info("replica=%s going to sleep: %s", r.spec.id, why)
        await sup.set_state(r, ReplicaState.DRAINING)
        await self.announce(r.spec.model.name)
        await wait_until_idle(sup.client, [r.spec.url], sup.options.timing)
        await r.process.stop()
        await sup.set_state(r, ReplicaState.ASLEEP)
        await self.announce(r.spec.model.name)
        self.metrics.sleeps.labels(r.spec.model.name, reason).inc()
        log.info("replica=%s asleep", r.spec.id)
