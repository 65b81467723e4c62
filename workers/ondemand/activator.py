"""Models on demand, the supervisor's side: wake a model when a gateway asks, put it to sleep by policy.

Every ``tick_s`` the activator reads, per on-demand model, the wake request and the demand the gateways
leave in Redis (:mod:`workers.ondemand.demand`). The residency autopilot (:mod:`workers.ondemand.steering`)
decides the rest: which idle models sleep first for an asked one to fit, the idle timeout, headroom and
wakes ahead; with ``defaults.autopilot: false``, the previous policy (the room's ledger,
:mod:`workers.ondemand.room` / :mod:`workers.ondemand.gpu_room`, and the idle timeout). The owner wakes a
replica (:meth:`workers.life.owner.Supervisor.wake`: WAKING, started or resumed, one token, READY) and the
model is announced on :attr:`RedisKeys.state_channel`; a sleep drains it, by a strategy of
:mod:`workers.ondemand.sleepers` (CPU: the process stops; GPU with sleep mode: level 1 or 2 in place,
stopped instead once it keeps half its memory asleep). Each wake and sleep: one log line, one count."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import redis.asyncio as aioredis

from llmgw_contract.fleet import Fleet, Model
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import REDIS_DOWN
from llmgw_contract.registry import ROUTABLE, ReplicaState
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.supervision import cancelled, guarded
from workers.converge.actions import device_key
from workers.host.gpu import GpuReader, nvidia_smi_reading
from workers.host.rss import tree_rss_bytes
from workers.life.owner import Replica, Supervisor
from workers.life.process import StartFailed
from workers.ondemand.asleep_reading import measure_asleep
from workers.ondemand.autopilot.moves import Move
from workers.ondemand.demand import clear_awoken, in_engine, is_wake_request, mark_awoken, requested, warm_up
from workers.ondemand.gpu_room import GpuRoom
from workers.ondemand.room import Resident, Room, idle_expired, make_room
from workers.ondemand.sleepers.level import SleepLevel
from workers.ondemand.sleepers.process_stop import ProcessStop
from workers.ondemand.sleepers.vllm_sleep import VllmSleep
from workers.ondemand.sleeping import SleepChoice, model_of
from workers.ondemand.steering import Reading, Steering

log = logging.getLogger("llmgw.ondemand")
Level = SleepLevel | None


@dataclass(frozen=True, slots=True)
class ActivatorOptions:
    tick_s: float = 0.1
    retry_wake_s: float = 5.0
    """After a failed wake, the model's wake request is dropped and a new one waits this long."""
    warmup_timeout_s: float = 120.0
    gpu_settle_s: float = 2.0
    """A GPU reading is booked once every other replica of the card has been still this long."""
    gpu_settle_deadline_s: float = 30.0


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
        gpu_reading: GpuReader = nvidia_smi_reading,
        weights: Callable[[Replica], int] = lambda r: 0,
    ) -> None:
        self.measure, self.gpu_reading, self.weights = measure, gpu_reading, weights
        self.sup, self.keys, self.fleet, self.estimate = sup, keys, fleet, estimate
        self.free_bytes, self.metrics, self.options = free_bytes, metrics, options
        self.last_used: dict[str, float] = {}
        self.measured: dict[str, int] = {}
        """Bytes each model's replica took when last awake (its process tree's resident memory)."""
        self.wakes: dict[str, asyncio.Task[bool]] = {}
        self.sleeping: dict[str, asyncio.Task[bool]] = {}
        """Idle sleeps in progress (a level-1 sleep copies the weights out for seconds): the tick goes on."""
        self.measuring: set[asyncio.Task[bool]] = set()  # readings of replicas just put to sleep
        self.retry_at: dict[str, float] = {}
        self.closing = asyncio.Event()
        """Set by :meth:`close`: the loop ends by it even if a Redis call swallowed a cancellation."""
        self.room = asyncio.Lock()
        self.unmeasured: dict[str, str] = {}
        """Woken GPU replicas to measure once announced: replica id -> the step."""
        self.gpu = GpuRoom(self)
        """The GPU ledgers and their measurements."""
        deadline = sup.options.ready_deadline_s
        stop, sleep = ProcessStop(sup.client, deadline), VllmSleep(sup.client, deadline)
        self.choice = SleepChoice(stop, sleep, weights, fleet, lambda: sup.replicas)
        self.levels, self.stop_instead = self.choice.levels, self.choice.stop_instead
        self.steer = Steering(self)
        """The residency autopilot (on unless the fleet's ``defaults.autopilot`` is false)."""

    @property
    def redis(self) -> aioredis.Redis:
        return self.sup.registry.redis

    def model(self, r: Replica) -> Model:
        return model_of(self.fleet(), r)

    def budget(self) -> int | None:
        """The fleet's ``defaults.memory_budget_gib`` in bytes; None: the host's available memory decides."""
        gib = fleet.defaults.memory_budget_gib if (fleet := self.fleet()) is not None else None
        return None if gib is None else int(gib * (1 << 30))

    def close(self) -> None:
        """End :meth:`run` (call it before cancelling the task)."""
        self.closing.set()

    async def run(self) -> None:
        """Tick until the supervisor stops or :meth:`close`; wakes in flight are cancelled at the end."""
        try:
            while not (self.sup.stopping.is_set() or self.closing.is_set()):
                try:
                    await guarded("tick", self.tick(), self.failed)
                except REDIS_DOWN as exc:
                    log.warning("on-demand tick skipped: redis unreachable (%s)", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.closing.wait(), self.options.tick_s)
        finally:
            await cancelled([*self.wakes.values(), *self.sleeping.values(), *self.measuring])

    def failed(self, action: str, model: str) -> None:
        self.metrics.actions.labels(action, model, "failed").inc()

    def groups(self) -> dict[str, list[Replica]]:
        out: dict[str, list[Replica]] = {}
        for r in self.sup.replicas:
            if not r.retired:
                out.setdefault(r.spec.model.name, []).append(r)
        return out

    async def busy(self, model: str) -> bool:
        """Anything running or waiting for the model, or a wake asked for (:mod:`workers.ondemand.demand`)."""
        return await self.load(model) > 0

    async def load(self, model: str) -> int:
        """How many requests run or wait for the model (:func:`requested`; 1 when only vLLM reports one)."""
        mine = [r for r in self.sup.replicas if r.spec.model.name == model and not r.retired]
        if count := await requested(self.redis, self.keys, model, [r.spec.id for r in mine]):
            return count
        return int(await in_engine(self.sup.client, [r.spec.url for r in mine if r.state in ROUTABLE]))

    async def tick(self) -> None:
        now = time.monotonic()
        steered = self.steer.on()
        readings: dict[str, Reading] = {}
        for name, replicas in self.groups().items():
            model = self.model(replicas[0])
            load = await self.load(name) if model.on_demand else 0
            self.steer.pilot.busyness.record(name, now, load)  # arrivals, whatever its state
            if name in self.wakes or name in self.sleeping:
                continue
            idle_s = model.idle_timeout_s
            asleep = [r for r in replicas if r.state is ReplicaState.ASLEEP]
            awake = [r for r in replicas if r.state in ROUTABLE]
            if not model.on_demand:
                if asleep:  # the fleet made it an always model: wake it for good
                    self.spawn_wake(name, asleep, "activation is always")
                continue
            self.metrics.show_on_demand(name)
            busy = load > 0
            if busy or name not in self.last_used:
                self.last_used[name] = now
            asked = is_wake_request(await self.redis.get(self.keys.wake_request(name)))
            readings[name] = (busy, asked)
            if asleep and asked:
                if now >= self.retry_at.get(name, 0.0):
                    self.spawn_wake(name, asleep, "a request waits")
            elif awake and asked:  # asked by a gateway that had not heard yet: already awake
                await self.redis.delete(self.keys.wake_request(name))
                await self.announce(name)
            elif not steered and awake and idle_expired(busy, self.last_used[name], now, idle_s):
                self.spawn_sleep(name, awake, f"idle for {now - self.last_used[name]:.0f} s")
        if steered:  # the idle timeout, headroom and wakes ahead: the autopilot's background moves
            await guarded("autopilot", self.steer.step(now, readings), self.failed)

    def spawn_sleep(
        self, model: str, replicas: list[Replica], why: str, reason: str = "idle", move: Move | None = None
    ) -> None:
        """Put the model's awake replicas to sleep in a task of its own (the tick keeps serving wakes), at
        the level of the autopilot's ``move`` when given."""

        async def sleep_all() -> None:
            for r in replicas:
                await self.sleep(r, why, reason, None if move is None else self.steer.level(r, move))

        task = asyncio.create_task(guarded("sleep", sleep_all(), self.failed, model))
        self.sleeping[model] = task
        task.add_done_callback(lambda _: self.sleeping.pop(model, None))

    def spawn_wake(self, model: str, replicas: list[Replica], why: str) -> asyncio.Task[bool]:
        """Wake the model's ``replicas`` in a task of its own; one wake per model at a time: while one is
        under way, that one is the answer."""
        held = self.wakes.get(model)
        if held is not None:
            return held
        task = asyncio.create_task(guarded("wake", self.wake(model, replicas, why), self.failed, model))
        self.wakes[model] = task
        task.add_done_callback(lambda _: self.wakes.pop(model, None))
        return task

    def sleep_mode(self, r: Replica) -> bool:
        """Whether ``r`` sleeps in place (a GPU replica launched with vLLM's sleep mode)."""
        return self.choice.sleep_mode(r)

    async def wake_now(self, model: str, replicas: list[Replica], why: str) -> None:
        """Wake ``replicas`` (the scaler's: demand came back for replicas it put to sleep) through the one
        wake of the model, and wait for it; a wake already under way is waited for instead."""
        await asyncio.shield(self.spawn_wake(model, replicas, why))

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
            with contextlib.suppress(*REDIS_DOWN):
                await self.redis.delete(self.keys.wake_request(model))  # the next request asks again
            log.error("model=%s wake failed after %.2f s; next attempt on demand in %.0f s or more",
                      model, took, self.options.retry_wake_s)  # fmt: skip
            return
        self.last_used[model] = time.monotonic()
        await self.announce(model)
        await mark_awoken(self.redis, self.keys, model)  # a late gateway's ask now fails (SET NX)
        log.info("model=%s awake in %.2f s (%s)", model, took, why)
        for r in replicas:  # measured once the gateways were told: off the waiting requests' path
            if r.spec.id in self.unmeasured:
                await self.gpu.measure_gpu(r, "awake", self.unmeasured.pop(r.spec.id))

    async def announce(self, model: str) -> None:
        """Tell every gateway the model's state changed, so none waits for its next registry poll."""
        await self.sup.registry.announce(model)

    async def wake_replica(self, r: Replica, why: str) -> bool:
        if self.steer.on():  # it takes the room lock itself
            return await self.steer.wake(r, why)
        async with self.room:
            room = await self.make_room(r)
            if not room.fits and self.sleeping:  # memory on its way back: wait for it, then look again
                await asyncio.gather(*self.sleeping.values(), return_exceptions=True)
                room = await self.make_room(r)
            if not room.fits:
                log.error("replica=%s cannot wake: %s", r.spec.id, room.refused)
                return False
            for victim in room.evict:
                v = self.sup.find(victim)
                await self.sleep(v, f"room for {r.spec.id}", reason="room")
            return await self.start(r, why)

    async def make_room(self, r: Replica) -> Room:
        """The ledger's answer for waking ``r`` on its device."""
        if r.on_gpu:
            return await self.gpu.gpu_room(r)
        lane = device_key(r.spec.device_kind, r.spec.device)
        residents = []
        for x in self.sup.replicas:
            same = device_key(x.spec.device_kind, x.spec.device) == lane
            if x is r or not same or not x.process.alive:
                continue
            m = self.model(x)
            busy = not m.on_demand or m.name in self.sleeping or await self.busy(m.name)
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
        log.info("replica=%s waking (%s)", r.spec.id, why)
        level = self.levels.get(r.spec.id, 0)
        alive, began = r.process.alive, time.monotonic()

        async def bring_up(r: Replica) -> None:
            await self.choice.sleeper(r, level).wake(r, level)
            await warm_up(self.sup.client, r, self.options.warmup_timeout_s)

        if not await self.sup.wake(r, bring_up):
            self.levels[r.spec.id] = 0
            return False
        self.levels.pop(r.spec.id, None)
        self.steer.woke(r.spec.model.name, level, alive, time.monotonic() - began)
        if r.on_gpu:
            self.unmeasured[r.spec.id] = f"wake from level {level}"
        if r.spec.device_kind == "cpu" and r.process.pid is not None:
            size = self.measured[r.spec.model.name] = await asyncio.to_thread(self.measure, r.process.pid)
            self.metrics.resident.labels(r.spec.model.name, r.spec.id).set(size)
        return True

    async def sleep(self, r: Replica, why: str, reason: str = "idle", level: Level = None) -> None:
        """Drain (DRAINING: gateways stop sending, what runs finishes), put it to sleep (at ``level``; its
        strategy's choice by default), publish ASLEEP."""
        log.info("replica=%s going to sleep: %s", r.spec.id, why)
        await clear_awoken(self.redis, self.keys, r.spec.model.name)  # the next ask is asked at once
        levels: list[SleepLevel] = []

        async def put_to_sleep(r: Replica) -> None:
            began = time.monotonic()
            levels.append(await self.put_to_sleep(r, level))
            self.steer.slept(r.spec.model.name, levels[0], time.monotonic() - began, reason)

        if not await self.sup.sleep(r, put_to_sleep, lambda r: self.announce(r.spec.model.name)):
            return
        self.metrics.sleeps.labels(r.spec.model.name, reason).inc()
        log.info("replica=%s asleep (%s)", r.spec.id, f"level {levels[0]}" if levels[0] else "stopped")
        if r.on_gpu:  # measured once the card is still: off the path of a wake waiting for this room
            measure = guarded("measure", measure_asleep(self, r), self.failed, r.spec.model.name)
            task = asyncio.create_task(measure)
            self.measuring.add(task)
            task.add_done_callback(self.measuring.discard)

    async def put_to_sleep(self, r: Replica, level: SleepLevel | None = None) -> SleepLevel:
        """The drained replica asleep by its strategy; returns the level it sleeps at. A failed sleep in
        place stops the process."""
        level = self.choice.level_for(r) if level is None else level
        try:
            await self.choice.sleeper(r, level).sleep(r, level)
        except (StartFailed, httpx.HTTPError) as exc:
            log.error("replica=%s sleep at level %d failed (%s): stopping its process", r.spec.id, level, exc)
            await r.process.stop()
            level = 0
        self.levels[r.spec.id] = level
        return level
