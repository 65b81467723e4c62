"""Models on demand, the supervisor's side: wake a model when a gateway asks, put it to sleep when idle
or to make room.

Every ``tick_s`` the activator reads, per on-demand model, the wake request the gateways set
(:meth:`RedisKeys.wake_request`) and the model's demand in the shared queue (leases running, tickets
waiting). An asleep model that is asked for is woken: the :mod:`workers.ledger` says which idle models
must sleep first for it to fit (a model with requests in flight or queued never does); then the replica
is published WAKING, started, made to decode one token, published READY and announced on
:attr:`RedisKeys.state_channel`, so gateways route to it at once. An awake on-demand model with nothing
in flight or queued for ``idle_timeout_s`` is drained and put to sleep. How is one strategy of
:mod:`workers.sleepers`: on a CPU sleeping stops the process and waking starts it (vLLM's CPU build has no
sleep mode); on a GPU a replica launched with ``--enable-sleep-mode`` sleeps in place at the level
:func:`workers.sleepers.level.choose_level` picks, and one that keeps half or more of its memory asleep is
stopped instead from then on. On a GPU the ledger is :class:`workers.gpu_ledger.DeviceBook`: every wake
and sleep is measured with nvidia-smi (per process) and logged beside the ledger's prediction of the card.
Each wake and sleep is one log line and one count; wake latency is a histogram.
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
from workers.gpu import GpuReader, GpuReading, nvidia_smi_reading
from workers.gpu_ledger import DeviceBook, Holding, Slot
from workers.ledger import Resident, Room, idle_expired, make_room
from workers.process import StartFailed
from workers.reconcile import device_key
from workers.rss import tree_pids, tree_rss_bytes
from workers.sleepers import Sleeper
from workers.sleepers.level import SleepLevel, choose_level, keeps_most
from workers.sleepers.process_stop import ProcessStop
from workers.sleepers.vllm_sleep import VllmSleep
from workers.supervisor import Replica, Supervisor

log = logging.getLogger("llmgw.ondemand")
REDIS_ERRORS = (RedisError, OSError, TimeoutError)
WARMUP_PROMPT = "Hello"
SLEEP_MODE_FLAG = "--enable-sleep-mode"
AWOKEN = "awoken"
"""The wake request's value for a while after the wake: the model is awake, nobody asks."""
AWOKEN_MS = 3000
"""How long the marker stays: the gateways' ready notice and registry re-read happen well within it."""
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class ActivatorOptions:
    tick_s: float = 0.1
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
        gpu_reading: GpuReader = nvidia_smi_reading,
        weights: Callable[[Replica], int] = lambda r: 0,
    ) -> None:
        self.measure, self.gpu_reading, self.weights = measure, gpu_reading, weights
        self.sup, self.keys, self.fleet, self.estimate = sup, keys, fleet, estimate
        self.free_bytes, self.metrics, self.options = free_bytes, metrics, options
        self.last_used: dict[str, float] = {}
        self.measured: dict[str, int] = {}
        """Bytes each model's replica took when last awake (its process tree's resident memory)."""
        self.wakes: dict[str, asyncio.Task[None]] = {}
        self.sleeping: dict[str, asyncio.Task[None]] = {}
        """Idle sleeps in progress (a level-1 sleep copies the weights out for seconds): the tick goes on."""
        self.retry_at: dict[str, float] = {}
        self.closing = asyncio.Event()
        """Set by :meth:`close`: the loop ends by it even if a Redis call swallowed a cancellation."""
        self.room = asyncio.Lock()
        self.busy_models: set[str] = set()
        self.unmeasured: dict[str, str] = {}
        """Woken GPU replicas to measure once announced: replica id -> the step."""
        """On-demand models with requests in flight or queued, read at the last GPU room decision."""
        self.levels: dict[str, SleepLevel] = {}
        """Replica id -> the level it sleeps at now (0: its process is stopped or was never started)."""
        self.stop_instead: set[str] = set()
        """Models whose sleep in place kept half or more of their memory: they are stopped instead."""
        self.books: dict[int, DeviceBook] = {}
        """GPU index -> its ledger."""
        deadline = sup.options.ready_deadline_s
        self.stopper = ProcessStop(sup.client, deadline)
        self.vllm = VllmSleep(sup.client, deadline)

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
            tasks = [*self.wakes.values(), *self.sleeping.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

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
        pipe.get(k.wake_request(model))
        leases, queued, asked = await pipe.execute()
        return bool(leases or queued or is_wake_request(asked))

    async def tick(self) -> None:
        now = time.monotonic()
        for name, replicas in self.groups().items():
            if name in self.wakes or name in self.sleeping:
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
            asked = is_wake_request(await self.redis.get(self.keys.wake_request(name)))
            if asleep and asked:
                if now >= self.retry_at.get(name, 0.0):
                    self.spawn_wake(name, asleep, "a request waits")
            elif awake and asked:  # asked by a gateway that had not heard yet: already awake
                await self.redis.delete(self.keys.wake_request(name))
                await self.announce(name)
            elif awake and idle_expired(busy, self.last_used[name], now, model.idle_timeout_s):
                self.spawn_sleep(name, awake, f"idle for {now - self.last_used[name]:.0f} s")

    def spawn_sleep(self, model: str, replicas: list[Replica], why: str) -> None:
        """Put the model's awake replicas to sleep in a task of its own (the tick keeps serving wakes)."""

        async def sleep_all() -> None:
            for r in replicas:
                await self.sleep(r, why)

        task = asyncio.create_task(sleep_all())
        self.sleeping[model] = task
        task.add_done_callback(lambda _: self.sleeping.pop(model, None))

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
        try:  # a gateway that has not heard yet would ask again: the marker makes its SET NX fail
            await self.redis.set(self.keys.wake_request(model), AWOKEN, px=AWOKEN_MS)
        except REDIS_ERRORS as exc:
            log.warning("model=%s wake request not cleared (%s): it expires by itself", model, exc)
        log.info("model=%s awake in %.2f s (%s)", model, took, why)
        for r in replicas:  # measured once the gateways were told: off the waiting requests' path
            if r.spec.id in self.unmeasured:
                await self.measure_gpu(r, "awake", self.unmeasured.pop(r.spec.id))

    async def announce(self, model: str) -> None:
        """Tell every gateway the model's state changed, so none waits for its next registry poll."""
        await self.sup.registry.announce(model)

    async def wake_replica(self, r: Replica, why: str) -> bool:
        async with self.room:
            room = await self.make_room(r)
            if not room.fits and self.sleeping:  # memory on its way back: wait for it, then look again
                await asyncio.gather(*self.sleeping.values(), return_exceptions=True)
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
        if r.on_gpu:
            return await self.gpu_room(r)
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
        sup = self.sup
        r.instance = new_instance_id()
        await sup.set_state(r, ReplicaState.WAKING)
        log.info("replica=%s waking (%s)", r.spec.id, why)
        level = self.levels.get(r.spec.id, 0)
        try:
            await self.sleeper(r, level).wake(r, level)
            await self.warm_up(r)
        except (StartFailed, httpx.HTTPError) as exc:
            log.error("replica=%s wake failed: %s", r.spec.id, exc)
            await r.process.stop(1.0)
            self.levels[r.spec.id] = 0
            await sup.set_state(r, ReplicaState.ASLEEP)
            return False
        self.levels.pop(r.spec.id, None)
        r.started_at = time.monotonic()
        if r.on_gpu:
            self.unmeasured[r.spec.id] = f"wake from level {level}"
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
        level = await self.put_to_sleep(r)
        await sup.set_state(r, ReplicaState.ASLEEP)
        await self.announce(r.spec.model.name)
        self.metrics.sleeps.labels(r.spec.model.name, reason).inc()
        log.info("replica=%s asleep (%s)", r.spec.id, f"level {level}" if level else "process stopped")

    async def put_to_sleep(self, r: Replica, level: SleepLevel | None = None) -> SleepLevel:
        """The drained replica asleep by its strategy, measured on a GPU; returns the level it sleeps at.
        A failed sleep in place stops the process; one that keeps most of its memory is stopped too."""
        level = self.level_for(r) if level is None else level
        try:
            await self.sleeper(r, level).sleep(r, level)
        except (StartFailed, httpx.HTTPError) as exc:
            log.error("replica=%s sleep at level %d failed (%s): stopping its process", r.spec.id, level, exc)
            await r.process.stop()
            level = 0
        self.levels[r.spec.id] = level
        if not r.on_gpu:
            return level
        holding: Holding = "asleep" if level else "stopped"
        held = await self.measure_gpu(r, holding, f"sleep at level {level}")
        awake = self.book(r).awake.get(r.spec.id, 0)
        if level and held is not None and keeps_most(held, awake):
            log.warning("replica=%s keeps %d of %d MiB asleep: stopped instead, from now on",
                        r.spec.id, held >> 20, awake >> 20)  # fmt: skip
            self.stop_instead.add(r.spec.model.name)
            return await self.put_to_sleep(r, 0)
        return level

    def sleep_mode(self, r: Replica) -> bool:
        """True when the replica sleeps in place (a GPU replica launched with vLLM's sleep mode)."""
        return r.on_gpu and SLEEP_MODE_FLAG in r.process.argv and r.spec.model.name not in self.stop_instead

    def sleeper(self, r: Replica, level: SleepLevel) -> Sleeper:
        """The strategy that puts ``r`` to sleep at, or wakes it from, ``level``."""
        return self.vllm if level or self.sleep_mode(r) else self.stopper

    def level_for(self, r: Replica) -> SleepLevel:
        """The level ``r`` goes to sleep at now (0: its process stops)."""
        if not self.sleep_mode(r):
            return 0
        model = self.model(r)
        fleet = self.fleet()
        budget = int((fleet.defaults.sleep_host_ram_gib if fleet is not None else 0) * GIB)
        held = sum(
            self.weights(x) for x in self.sup.replicas
            if x is not r and self.levels.get(x.spec.id) == 1 and x.process.alive
        )  # fmt: skip
        return choose_level(
            model.sleep.level, self.weights(r), budget, held, model.engine.load_format != "dummy"
        )

    def book(self, r: Replica) -> DeviceBook:
        return self.books.setdefault(r.spec.device, DeviceBook())

    def slots(self, r: Replica) -> list[Slot]:
        """Every live-or-asleep replica on ``r``'s GPU as the ledger sees it."""
        out = []
        for x in self.sup.replicas:
            if x.retired or not x.on_gpu or x.spec.device != r.spec.device:
                continue
            holding: Holding = "stopped"
            if x.process.alive:
                holding = "asleep" if x.state is ReplicaState.ASLEEP else "awake"
            m = self.model(x)
            out.append(Slot(
                x.spec.id, m.name, holding, self.estimate(x), m.priority, self.last_used.get(m.name, 0.0),
                busy=not m.on_demand or m.name in self.busy_models or m.name in self.sleeping,
                sleeps_in_place=self.sleep_mode(x),
            ))  # fmt: skip
        return out

    async def read_gpu(self, r: Replica) -> GpuReading | None:
        """nvidia-smi for ``r``'s GPU; refreshes the ledger's baseline (the card beyond our processes)."""
        reading = await asyncio.to_thread(self.gpu_reading, r.spec.device)
        if reading is not None:
            ours = await asyncio.to_thread(self.our_pids)
            self.book(r).baseline = max(0, reading.card.used_bytes - reading.held_by(ours))
        return reading

    def our_pids(self) -> set[int]:
        """The processes of every supervised GPU replica (servers and engine cores)."""
        return set().union(*(self.pids(x) for x in self.sup.replicas if x.on_gpu))

    @staticmethod
    def pids(r: Replica) -> set[int]:
        pid = r.process.pid
        return tree_pids(pid) if pid is not None and r.process.alive else set()

    async def measure_gpu(self, r: Replica, holding: Holding, step: str) -> int | None:
        """Measure what ``r`` holds now (nvidia-smi, its process tree) and record it in the ledger; log the
        ledger's prediction of the card at that moment (every replica at what it last measured in its
        holding, ``r`` too, or the estimate before its first measurement) beside the card's reading, and
        which other models were changing then (waking or going to sleep: not settled). Returns the bytes
        (None: no reading)."""
        predicted = self.book(r).predicted_used(self.slots(r), {r.spec.id: holding})
        changing = sorted({*self.wakes, *self.sleeping} - {r.spec.model.name})
        reading = await asyncio.to_thread(self.gpu_reading, r.spec.device)
        if reading is None:
            log.warning("replica=%s %s: nvidia-smi did not answer, ledger not updated", r.spec.id, step)
            return None
        held = reading.held_by(await asyncio.to_thread(self.pids, r))
        ours = await asyncio.to_thread(self.our_pids)
        self.book(r).record(r.spec.id, holding, held, reading.card.used_bytes, reading.held_by(ours))
        self.metrics.resident.labels(r.spec.model.name, r.spec.id).set(held)
        card = reading.card.used_bytes
        off = f"{(predicted - card) / reading.card.total_bytes * 100:+.2f} %"
        log.info(
            "ledger gpu:%d after %s of replica=%s: it holds %d MiB; predicted %d MiB, card %d MiB "
            "(%s of %d MiB); changing: %s", r.spec.device, step, r.spec.id, held >> 20, predicted >> 20,
            card >> 20, off, reading.card.total_bytes >> 20, ",".join(changing) or "none",
        )  # fmt: skip
        return held

    async def gpu_room(self, r: Replica) -> Room:
        """The GPU ledger's answer for waking ``r``: room on the card (``defaults.memory_budget_gib`` when
        set, else the card's total), what the others hold, what each idle one gives back asleep."""
        reading = await self.read_gpu(r)
        if reading is None:
            return Room()  # no reading: vLLM's own start-up check decides
        self.busy_models = {m for m in {x.spec.model.name for x in self.sup.replicas} if await self.busy(m)}
        capacity = self.budget() or reading.card.total_bytes
        slots = self.slots(r)
        waking = next(s for s in slots if s.replica == r.spec.id)
        return self.book(r).room(slots, waking, capacity)


def is_wake_request(value: bytes | str | None) -> bool:
    """A gateway's wake request: the key is set and is not the supervisor's just-awoken marker."""
    if isinstance(value, bytes):
        value = value.decode()
    return value is not None and value != AWOKEN
