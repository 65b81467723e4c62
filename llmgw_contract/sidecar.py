"""``llmgw-register``, the registration sidecar: publish vLLM servers that something else runs (a Kubernetes
pod, a compose service) into the Redis replica registry, the way the supervisor does for the processes it
runs itself.

Each replica is given as its ReplicaRecord in JSON (``--record``). Every heartbeat the process asks the
server's ``/health`` and ``/v1/models``; a server that lists its model is published READY with a TTL, one that
stops answering for a few heartbeats is withdrawn. The time from the sidecar's start (or the server's last
loss) to the server's listing is recorded as the model's cold start on the record's device kind
(:mod:`llmgw_contract.cold_starts`: the ETA of requests held while the model is at zero; it leaves out the
pod's scheduling and image pull). On SIGTERM (the pod is deleted, the service is stopped) the replicas are
published DRAINING, the process waits until vLLM has nothing running or waiting (or the grace period ends),
then removes them and exits; SIGHUP is logged and ignored. It serves the supervisor's metrics on
``--metrics-port`` so that Prometheus sees replica states and start-up times as it does under `make run`. In a
Kubernetes pod it keeps the pod's ``controller.kubernetes.io/pod-deletion-cost`` at the requests its servers
run and queue (:mod:`llmgw_contract.deletion_cost`), so that a scale-down removes the idlest pod first.

The heartbeat is supervised: a Redis outage (any topology) is a failed write that the next beat retries; a
beat that raises is logged, counted (``llmgw_supervisor_actions_total{outcome="failed"}``) and tried again
after the one back-off; a heartbeat task that dies all the same ends the process with ``EXIT_TASK_DIED`` (3),
so that its keeper starts it again.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from llmgw_contract.cold_starts import record_cold_start
from llmgw_contract.deletion_cost import DeletionCost
from llmgw_contract.drain import wait_until_idle
from llmgw_contract.extras import MissingExtra, require_extra
from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.logs import configure_logging
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import (
    RegistryTiming,
    RegistryWriter,
    ReplicaRecord,
    ReplicaState,
    new_instance_id,
)
from llmgw_contract.replica_metrics import SupervisorMetrics, serve_metrics
from llmgw_contract.sidecar_args import parse_args
from llmgw_contract.supervision import EXIT_TASK_DIED, TaskGroup, every
from llmgw_contract.vllm_probe import listed, probe_client, requests_in_engine

if TYPE_CHECKING:  # the KV feeds (the workers extra) are imported only with --kv-events
    from llmgw_contract.kv_feeds import FeedTarget, KvFeeds

log = logging.getLogger("llmgw.register")


@dataclass(frozen=True, slots=True)
class Options:
    timing: RegistryTiming = field(default_factory=RegistryTiming)
    fail_after: int = 3
    kv_events: dict[str, KvEndpoints] = field(default_factory=dict)
    """Replica id -> where its vLLM publishes KV events (``--kv-events``): those feed the index (exact)."""
    model_dir: Path | None = None
    """The models' tokenizer folder (``--kv-model-dir``), needed to map KV events to prefix keys."""
    model_dirs: dict[str, Path] = field(default_factory=dict)
    """Model -> its own tokenizer folder (``--kv-model``), before ``model_dir``."""
    chat_templates: dict[str, str] = field(default_factory=dict)
    """Model -> the chat template vLLM renders with (``--kv-chat-template``; else the folder's)."""

    def folder(self, model: str) -> Path | None:
        return self.model_dirs.get(model, self.model_dir)


class Watched:
    """One replica as the registrar sees it: its record, its state and how long it took to start."""

    def __init__(self, record: ReplicaRecord) -> None:
        self.base = record
        self.state = ReplicaState.STARTING
        self.since = time.monotonic()
        self.startup_s = 0.0
        self.failures = 0
        self.instance = new_instance_id()
        self.announced: ReplicaState | None = None
        """The state last announced on the model state channel (each new state is announced once)."""

    def record(self, kv_index: str = "approximate") -> ReplicaRecord:
        update = {"state": self.state, "instance": self.instance, "kv_index": kv_index}
        return self.base.model_copy(update=update)

    def observe(self, ok: bool, fail_after: int) -> bool:
        """Fold one probe result into the state; True when the state changed."""
        before = self.state
        if ok:
            self.failures = 0
            if self.state is ReplicaState.STARTING:
                self.state = ReplicaState.READY
                self.startup_s = time.monotonic() - self.since
        elif self.state is ReplicaState.READY:
            self.failures += 1
            if self.failures >= fail_after:
                self.state, self.since = ReplicaState.STARTING, time.monotonic()
                self.instance = new_instance_id()  # whatever answers next is a new start
        return self.state is not before


def device_kind(record: ReplicaRecord) -> str:
    """The kind of the record's ``device`` (``gpu:0`` -> ``gpu``; none given: ``gpu``, a pod's usual)."""
    return record.device.split(":", 1)[0] or "gpu"


class Sidecar:
    """Heartbeats the watched replicas into the registry; drains and withdraws them on SIGTERM."""

    def __init__(
        self,
        watched: list[Watched],
        registry: RegistryWriter,
        client: httpx.AsyncClient,
        metrics: SupervisorMetrics,
        options: Options,
    ) -> None:
        self.watched, self.registry, self.client = watched, registry, client
        self.metrics, self.options = metrics, options
        self.draining = asyncio.Event()
        self.feeds: KvFeeds | None = None
        """Set by :func:`serve` when some replica publishes KV events."""
        self.deletion_cost: DeletionCost | None = None
        """Set by :func:`serve` in a Kubernetes pod: the pod's deletion cost follows its load."""

    def kv_targets(self) -> list[FeedTarget]:
        """The feeds of the answering replicas with a ``--kv-events`` endpoint (a new start: a new feed)."""
        from llmgw_contract.kv_feeds import FeedTarget

        o = self.options
        return [
            FeedTarget(
                w.base.id, w.base.model, w.instance, o.kv_events[w.base.id], folder,
                o.chat_templates.get(w.base.model),
            )
            for w in self.watched
            if w.base.id in o.kv_events and w.state is not ReplicaState.STARTING
            and (folder := o.folder(w.base.model)) is not None
        ]  # fmt: skip

    def kv_index(self, w: Watched) -> str:
        return self.feeds.mode(w.base.id) if self.feeds is not None else "approximate"

    def show(self, w: Watched) -> None:
        self.metrics.set_state(w.base.model, w.base.id, w.state)
        self.metrics.startup.labels(w.base.model, w.base.id).set(w.startup_s)

    async def tick(self, w: Watched) -> None:
        if not self.draining.is_set():
            ok = await listed(self.client, w.base.url, w.base.upstream_model)
            if w.observe(ok, self.options.fail_after):
                log.info("replica=%s url=%s %s", w.base.id, w.base.url, w.state.value)
                self.show(w)
                if w.state is ReplicaState.STARTING:
                    await self.registry.remove(w.record())
                else:  # listed after a start from nothing: the model's next ETA at zero
                    r = self.registry
                    await record_cold_start(r.redis, r.keys, w.base.model, device_kind(w.base), w.startup_s)
        if w.state is not ReplicaState.STARTING:
            changed = await self.registry.publish(w.record(self.kv_index(w))) and w.announced is not w.state
            if changed and await self.registry.announce(w.base.model):  # e.g. scaled up from zero by KEDA
                w.announced = w.state

    async def heartbeat(self) -> None:
        """:meth:`beat` every heartbeat until cancelled, supervised
        (:func:`llmgw_contract.supervision.every`): a beat that raises is logged, counted and tried again
        after the one back-off."""
        beat_s, forever = self.options.timing.heartbeat_s, asyncio.Event()
        await every("registry_heartbeat", beat_s, self.beat, forever, self.metrics.failed)

    async def beat(self) -> None:
        """Probe and publish every watched replica (a Redis outage: a failed write, the next beat retries)."""
        await self.registry.follow_master()  # after a Sentinel failover: the new master, not the old one
        if self.feeds is not None:
            self.feeds.sync(self.kv_targets())
            self.feeds.show(self.metrics)
        await asyncio.gather(*(self.tick(w) for w in self.watched))
        if self.deletion_cost is not None and not self.draining.is_set():
            await self.follow_load(self.deletion_cost)

    async def follow_load(self, cost: DeletionCost) -> None:
        """The pod's deletion cost = requests its vLLM servers run and queue (unknown: left as it is); a
        failed patch is counted (``deletion_cost``) and retried next beat."""
        loads = await asyncio.gather(*(requests_in_engine(self.client, w.base.url) for w in self.watched))
        if any(n is None for n in loads):
            return
        await cost.follow(sum(n for n in loads if n is not None))
        if cost.failing:
            self.metrics.failed("deletion_cost", cost.pod)

    async def drain(self) -> None:
        """Publish DRAINING, then wait until vLLM is idle, within the grace period."""
        self.draining.set()
        live = [w for w in self.watched if w.state is not ReplicaState.STARTING]
        for w in live:
            w.state = ReplicaState.DRAINING
            self.show(w)
            await self.registry.publish(w.record())
        log.info("draining %d replicas (grace %.0f s)", len(live), self.options.timing.drain_grace_s)
        await wait_until_idle(self.client, [w.base.url for w in live], self.options.timing)

    async def withdraw(self) -> None:
        for w in self.watched:
            await self.registry.remove(w.record())
        log.info("replicas withdrawn")


def options_from(args: argparse.Namespace) -> Options:
    timing = RegistryTiming(args.ttl, args.drain_settle, args.drain_grace)
    return Options(
        timing,
        kv_events=dict(args.kv_events),
        model_dir=args.kv_model_dir,
        model_dirs={m: Path(d) for m, d in args.kv_model},
        chat_templates=dict(args.kv_chat_template),
    )


async def serve(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT (drain, withdraw: 0) or until the heartbeat task dies (logged and counted:
    :data:`llmgw_contract.supervision.EXIT_TASK_DIED`, so that the pod or service is restarted)."""
    redis = connect(args.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    options = options_from(args)
    metrics = SupervisorMetrics()
    server = await serve_metrics(metrics, args.metrics_host, args.metrics_port) if args.metrics_port else None
    registry = RegistryWriter(redis, RedisKeys(args.redis_prefix), options.timing)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(  # its default action would kill it: no drain, the record left to expire
        signal.SIGHUP, lambda: log.warning("SIGHUP ignored: SIGTERM drains and withdraws the replicas")
    )
    async with probe_client() as client:
        reg = Sidecar([Watched(r) for r in args.record], registry, client, metrics, options)
        if options.kv_events:
            from llmgw_contract.kv_feeds import KvFeeds

            reg.feeds = KvFeeds.from_env(redis, registry.keys)
        reg.deletion_cost = DeletionCost.from_env()
        for w in reg.watched:
            reg.show(w)
        tasks = TaskGroup(metrics.failed)
        tasks.spawn("registry_heartbeat", reg.heartbeat())
        died = await tasks.wait_died_or(stop)
        if not died:
            await reg.drain()
        await tasks.close()
        if not died:
            await reg.withdraw()
        if reg.feeds is not None:
            await reg.feeds.aclose()
    if server is not None:
        server.close()
    await redis.aclose()
    return EXIT_TASK_DIED if died else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.kv_events:
        try:
            require_extra("workers", "--kv-events (the exact prefix index)")
        except MissingExtra as exc:
            print(f"llmgw-register: {exc}", file=sys.stderr)
            return 2
    configure_logging(logging.INFO)  # text, or JSON lines with LLMGW_LOG_FORMAT=json
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
