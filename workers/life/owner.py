"""The owner of the supervised replicas: their list, processes, watches and published states.

Everything else (the reconcile loop, the activator, the CLI's shutdown, adoption) acts on a replica
through the owner's verbs, never through its fields:

* :meth:`Supervisor.start` (list it and start it; watched from then on, or left FAILED),
  :meth:`~Supervisor.park` (list an on-demand replica ASLEEP), :meth:`~Supervisor.adopt`;
* :meth:`~Supervisor.retire` (drain if routable, stop, withdraw: for good),
  :meth:`~Supervisor.replace` (the new replica ready beside the old one, then the old one retired);
* :meth:`~Supervisor.sleep` and :meth:`~Supervisor.wake` (on-demand models; how is the caller's);
* :meth:`~Supervisor.drain` (shutdown: all of them drain, then stop).

Actions on one replica are serialized by its lock: a retire waits for a wake in progress, and a wake
of a replica retired meanwhile does nothing. Every state change goes through :meth:`Supervisor.move`,
which checks it against the table of :mod:`llmgw_contract.replica_states` and publishes it; the instance id
is given in one place, :meth:`Supervisor.launched`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import httpx

from llmgw_contract.drain import wait_until_idle
from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.kv_feeds import FeedTarget, KvFeeds
from llmgw_contract.registry import ROUTABLE, RegistryWriter, ReplicaState, new_instance_id
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.replica_states import check_move
from llmgw_contract.supervision import every
from workers.host.gpu import MemoryProbe, nvidia_smi_probe
from workers.life.adopt import AdoptedProcess
from workers.life.process import StartFailed
from workers.life.publish import Publisher
from workers.life.replica import Replica, RestartBackoff, SupervisorOptions
from workers.life.restart import Restarts
from workers.life.starting import Starter

log = logging.getLogger("llmgw.workers")
Step = Callable[[Replica], Awaitable[None]]

__all__ = ["Replica", "RestartBackoff", "Supervisor", "SupervisorOptions", "start_groups"]


class Supervisor:
    """The one owner of the supervised replicas (see the module doc)."""

    def __init__(
        self,
        replicas: list[Replica],
        registry: RegistryWriter,
        client: httpx.AsyncClient,
        options: SupervisorOptions,
        on_change: Callable[[Replica], None] = lambda r: None,
        memory_probe: MemoryProbe = nvidia_smi_probe,
        metrics: SupervisorMetrics | None = None,
        kv_feeds: KvFeeds | None = None,
    ) -> None:
        self._replicas = list(replicas)
        self.kv_feeds = kv_feeds
        """Follows the KV events of the replicas of models whose ``kv_index`` is exact (None: none)."""
        self.registry, self.client, self.options = registry, client, options
        self.metrics = metrics or SupervisorMetrics()
        self.on_change = on_change
        self.stopping = asyncio.Event()
        self.starter = Starter(options, client, memory_probe, self.move, self.launched, self.stopping)
        self.restarts = Restarts(options.backoff, self.move, self.starter.start, self.ended, self.metrics)
        self.publisher = Publisher(lambda: self._replicas, registry, options, self.metrics, self.stopping)

    @property
    def replicas(self) -> tuple[Replica, ...]:
        """The replicas owned now (a copy: changed only through the verbs)."""
        return tuple(self._replicas)

    @property
    def republished(self) -> int:
        return self.publisher.republished

    def find(self, replica_id: str) -> Replica:
        return next(r for r in self._replicas if r.spec.id == replica_id)

    # --- the one state change, the one instance id -------------------------------------------------

    async def move(self, r: Replica, state: ReplicaState, why: str = "") -> None:
        """Change ``r``'s state (checked against the table), tell the observers, publish it (a STARTING
        replica is withdrawn: nothing routes to or wakes it). ``why``: what a FAILED replica failed of,
        published with it (the gateways name it in their 503)."""
        check_move(r.spec.id, r.state, state)
        r.state, r.detail = state, why if state is ReplicaState.FAILED else ""
        self.on_change(r)
        if state is ReplicaState.STARTING:
            await self.registry.remove(r.record())
        else:
            await self.registry.publish(r.record())

    def launched(self, r: Replica) -> None:
        """A new process is being started for ``r``: a new instance id."""
        r.instance = new_instance_id()

    # --- verbs ---------------------------------------------------------------------------------------

    def ended(self, r: Replica) -> bool:
        return self.stopping.is_set() or r.retired

    def list(self, r: Replica) -> None:
        """Own ``r``: every process spawned for it is told to the observers (the state file) at once."""
        r.process.spawned = lambda: self.on_change(r)
        if r not in self._replicas:
            self._replicas.append(r)

    async def start(self, r: Replica) -> bool:
        """List ``r`` and start it; ready: watched from now on; not: left FAILED (no restart storm)."""
        self.list(r)
        async with r.lock:
            if await self.starter.start(r):
                self.watch(r)
                return True
            await r.process.stop(1.0)
            if not self.ended(r):
                why = r.failure.message() if r.failure is not None else "its start failed (see its log)"
                await self.move(r, ReplicaState.FAILED, why)
            return False

    async def start_with_retries(self, r: Replica) -> bool:
        """Start ``r`` (:meth:`Starter.start`) without watching it; True when it became ready."""
        return await self.starter.start(r)

    async def park(self, r: Replica) -> None:
        """List an on-demand replica ASLEEP: the activator starts it when a request asks."""
        self.list(r)
        await self.move(r, ReplicaState.ASLEEP)

    async def adopt(self, r: Replica, pid: int, instance: str) -> None:
        """Take over ``r``'s process ``pid`` left by a previous supervisor (verified by the caller)."""
        r.process = AdoptedProcess(r.process.launch, r.process.log_file, pid)
        r.instance, r.started_at = instance, time.monotonic()
        self.list(r)
        await self.move(r, ReplicaState.READY)
        self.watch(r)

    async def fail(self, r: Replica) -> None:
        """Leave ``r`` FAILED, its process stopped (after an unexpected error in an action on it)."""
        await self.unwatch(r)
        async with r.lock:
            await r.process.stop(1.0)
            if r.state is not ReplicaState.FAILED:
                await self.move(r, ReplicaState.FAILED, "an action on it failed (see the supervisor's log)")

    def watch(self, r: Replica) -> None:
        """Restart ``r`` each time it dies, from now on until it is retired or the owner stops."""
        r.watcher = asyncio.create_task(self.guarded_watch(r), name=f"watch {r.spec.id}")

    async def guarded_watch(self, r: Replica) -> None:
        """The watch; an unexpected error is logged, counted and leaves the replica FAILED."""
        try:
            await self.restarts.watch(r)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("replica=%s watch failed: the replica is left failed", r.spec.id)
            self.metrics.actions.labels("restart", r.spec.model.name, "failed").inc()
            await r.process.stop(1.0)
            await self.move(r, ReplicaState.FAILED, "its watch failed (see the supervisor's log)")

    async def unwatch(self, r: Replica) -> None:
        if r.watcher is not None:
            r.watcher.cancel()
            await asyncio.gather(r.watcher, return_exceptions=True)
            r.watcher = None

    async def drain_one(self, r: Replica, announce: Step | None = None) -> None:
        """Publish DRAINING (and ``announce`` it), then let what runs finish (the one drain:
        :func:`wait_until_idle`)."""
        await self.move(r, ReplicaState.DRAINING)
        if announce is not None:
            await announce(r)
        await wait_until_idle(self.client, [r.spec.url], self.options.timing)

    async def retire(self, r: Replica) -> None:
        """Take ``r`` out for good: drain it if routable, stop it, withdraw it. Waits for an action in
        progress on it (a wake, a sleep) to end first."""
        r.retired = True
        await self.unwatch(r)
        async with r.lock:
            await self.unwatch(r)
            if r.process.alive and r.state in ROUTABLE:
                await self.drain_one(r)
            await r.process.stop()
            await self.registry.remove(r.record())
            if r in self._replicas:
                self._replicas.remove(r)
            self.on_change(r)

    async def replace(self, old: Replica, new: Replica) -> bool:
        """``new`` started beside ``old`` (published REPLACING, still routable); once ``new`` is ready
        ``old`` is retired, else ``new`` is and ``old`` serves on. True when ``new`` serves."""
        serving = old.process.alive and old.state is ReplicaState.READY
        if serving:
            async with old.lock:
                await self.move(old, ReplicaState.REPLACING)
        if await self.start(new):
            await self.retire(old)
            return True
        await self.retire(new)
        if serving and old.process.alive and not old.retired:
            async with old.lock:
                await self.move(old, ReplicaState.READY)
        return False

    async def sleep(self, r: Replica, put_to_sleep: Step, announce: Step) -> bool:
        """Drain ``r`` (DRAINING, announced), ``put_to_sleep`` it, publish ASLEEP (announced). False,
        doing nothing, when it was retired meanwhile or is asleep already (a second sleep: no drain)."""
        async with r.lock:
            if r.retired or r.state is ReplicaState.ASLEEP:
                return False
            await self.unwatch(r)
            await self.drain_one(r, announce)
            await put_to_sleep(r)
            await self.move(r, ReplicaState.ASLEEP)
            await announce(r)
            return True

    async def wake(self, r: Replica, bring_up: Step) -> bool:
        """WAKING with a new instance, ``bring_up`` (start or resume it, warm it up), READY and watched.
        A failed bring-up stops the process and leaves it ASLEEP. False when it did not wake (or was
        retired meanwhile); a replica awake already (another wake came first) is left as it is: True
        when it serves."""
        async with r.lock:
            if r.retired or self.stopping.is_set():
                return False
            if r.state is not ReplicaState.ASLEEP:
                return r.state in ROUTABLE
            self.launched(r)
            await self.move(r, ReplicaState.WAKING)
            try:
                await bring_up(r)
            except (StartFailed, httpx.HTTPError) as exc:
                log.error("replica=%s wake failed: %s", r.spec.id, exc)
                await r.process.stop(1.0)
                await self.move(r, ReplicaState.ASLEEP)
                return False
            except Exception:
                log.exception("replica=%s wake failed unexpectedly", r.spec.id)
                await r.process.stop(1.0)
                await self.move(r, ReplicaState.ASLEEP)
                return False
            r.started_at = time.monotonic()
            await self.move(r, ReplicaState.READY)
            self.watch(r)
            return True

    # --- the owner's own life ------------------------------------------------------------------------

    async def start_group(self, group: Sequence[Replica]) -> None:
        for r in group:
            if self.stopping.is_set():
                return
            await self.start(r)

    async def run(self) -> None:
        """Start the replicas it was made with (one after another on each device; devices side by side),
        publish them every heartbeat, until :meth:`drain`."""
        loops = [
            asyncio.create_task(self.publisher.heartbeat()),
            asyncio.create_task(self.publisher.follow_redis()),
        ]
        if self.kv_feeds is not None:
            loops.append(asyncio.create_task(self.follow_kv_events(self.kv_feeds)))
        idle = [r for r in self._replicas if r.watcher is None and not r.process.alive]  # not adopted ones
        await asyncio.gather(*(self.start_group(g) for g in start_groups(idle)))
        await self.stopping.wait()
        for t in loops:
            t.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        if self.kv_feeds is not None:
            await self.kv_feeds.aclose()

    async def follow_kv_events(self, feeds: KvFeeds, every_s: float = 0.25) -> None:
        """Keep one KV-event feed per running start of an exact replica; publish each one's mode (a
        supervised loop: :func:`llmgw_contract.supervision.every`)."""

        async def step() -> None:
            feeds.sync([t for r in self._replicas if (t := kv_target(r)) is not None])
            for r in self._replicas:
                r.kv_index = feeds.mode(r.spec.id)
            feeds.show(self.metrics)

        await every("kv_feeds", every_s, step, self.stopping, self.metrics.failed)

    async def drain(self) -> None:
        """Shutdown: every live replica drains (within the grace period, all together), then all stop."""
        self.stopping.set()
        for r in self._replicas:
            await self.unwatch(r)
        live = [r for r in self._replicas if r.process.alive]
        log.info("draining %d replicas (grace %.0f s)", len(live), self.options.timing.drain_grace_s)
        await asyncio.gather(*(self.drain_one(r) for r in live))
        await asyncio.gather(*(r.process.stop() for r in self._replicas))
        for r in self._replicas:
            await self.registry.remove(r.record())
        log.info("all replicas stopped")


def kv_target(r: Replica) -> FeedTarget | None:
    """The feed of a running replica of an exact model (its weights folder from its ``--model``)."""
    argv = r.process.launch.argv
    if r.spec.model.kv_index != "exact" or not r.process.alive or not r.instance or "--model" not in argv:
        return None
    weights = Path(argv[argv.index("--model") + 1])
    endpoints = KvEndpoints.for_port(r.spec.port)
    return FeedTarget(
        r.spec.id, r.spec.model.name, r.instance, endpoints, weights, r.spec.model.engine.chat_template
    )


def start_groups(replicas: Sequence[Replica]) -> list[list[Replica]]:
    """Replicas that start one after another: those of each GPU, in fleet order; all CPU replicas as one."""
    groups: dict[tuple[str, int], list[Replica]] = {}
    for r in replicas:
        key = ("gpu", r.spec.device) if r.on_gpu else ("cpu", 0)
        groups.setdefault(key, []).append(r)
    return list(groups.values())
