"""``llmgw-register``: publish vLLM servers that something else runs (a Kubernetes pod, a compose service)
into the Redis replica registry, the way the supervisor does for the processes it runs itself.

Each replica is given as its ReplicaRecord in JSON (``--record``). Every heartbeat the process asks the
server's ``/health`` and ``/v1/models``; a server that lists its model is published READY with a TTL, one
that stops answering for a few heartbeats is withdrawn. On SIGTERM (the pod is deleted, the service is
stopped) the replicas are published DRAINING, the process waits until vLLM has nothing running or waiting
(or the grace period ends), then removes them and exits. It serves the supervisor's metrics on
``--metrics-port`` so that Prometheus sees replica states and start-up times as it does under `make run`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass

import httpx
import redis.asyncio as aioredis
from pydantic import ValidationError

from gateway.keys import Keys
from gateway.replica import ReplicaRecord, ReplicaState
from workers.observe import SupervisorMetrics, serve_metrics
from workers.process import listed, running_requests
from workers.registrar import Registrar

log = logging.getLogger("llmgw.register")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


@dataclass(frozen=True, slots=True)
class Options:
    ttl_s: float = 10.0
    interval_s: float = 2.0
    fail_after: int = 3
    drain_grace_s: float = 30.0
    drain_settle_s: float = 2.0


class Watched:
    """One replica as the registrar sees it: its record, its state and how long it took to start."""

    def __init__(self, record: ReplicaRecord) -> None:
        self.base = record
        self.state = ReplicaState.STARTING
        self.since = time.monotonic()
        self.startup_s = 0.0
        self.failures = 0

    def record(self) -> ReplicaRecord:
        return self.base.model_copy(update={"state": self.state})

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
        return self.state is not before


class Register:
    def __init__(
        self,
        watched: list[Watched],
        registrar: Registrar,
        client: httpx.AsyncClient,
        metrics: SupervisorMetrics,
        options: Options,
    ) -> None:
        self.watched, self.registrar, self.client = watched, registrar, client
        self.metrics, self.options = metrics, options
        self.draining = asyncio.Event()

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
                    await self.registrar.remove(w.record())
        if w.state is not ReplicaState.STARTING:
            await self.registrar.publish(w.record())

    async def heartbeat(self) -> None:
        while True:
            await asyncio.gather(*(self.tick(w) for w in self.watched))
            await asyncio.sleep(self.options.interval_s)

    async def drain(self) -> None:
        """Publish DRAINING, then wait until vLLM is idle, within the grace period."""
        self.draining.set()
        live = [w for w in self.watched if w.state is not ReplicaState.STARTING]
        for w in live:
            w.state = ReplicaState.DRAINING
            self.show(w)
            await self.registrar.publish(w.record())
        o = self.options
        log.info("draining %d replicas (grace %.0f s)", len(live), o.drain_grace_s)
        deadline = time.monotonic() + o.drain_grace_s
        await asyncio.sleep(min(o.drain_settle_s, o.drain_grace_s))  # every gateway sees DRAINING
        while time.monotonic() < deadline:
            counts = await asyncio.gather(*(running_requests(self.client, w.base.url) for w in live))
            if not any(counts):
                break
            await asyncio.sleep(0.5)

    async def withdraw(self) -> None:
        for w in self.watched:
            await self.registrar.remove(w.record())
        log.info("replicas withdrawn")


def parse_record(text: str) -> ReplicaRecord:
    try:
        return ReplicaRecord.model_validate_json(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"not a replica record: {exc}") from exc


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-register", description="Publish externally run vLLM servers into the replica registry."
    )
    p.add_argument(
        "--record",
        type=parse_record,
        action="append",
        required=True,
        help='a replica as JSON, e.g. {"id": "m-0", "model": "m", "url": "http://10.0.0.7:8000"} (repeat)',
    )
    p.add_argument("--redis-url", default=os.environ.get("LLMGW_REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--redis-prefix", default=os.environ.get("LLMGW_REDIS_PREFIX", "llmgw"))
    p.add_argument("--ttl", type=float, default=10.0, help="seconds a record lives without a heartbeat")
    p.add_argument("--interval", type=float, default=None, help="seconds between heartbeats (ttl / 3)")
    p.add_argument("--drain-grace", type=float, default=30.0, help="seconds in-flight work may take")
    p.add_argument("--drain-settle", type=float, default=2.0, help="seconds before in-flight work is read")
    p.add_argument("--metrics-host", default="0.0.0.0")
    p.add_argument("--metrics-port", type=int, default=9400, help="0: no metrics endpoint")
    return p.parse_args(argv)


def options_from(args: argparse.Namespace) -> Options:
    interval = args.interval if args.interval is not None else args.ttl / 3
    return Options(args.ttl, interval, 3, args.drain_grace, args.drain_settle)


async def serve(args: argparse.Namespace) -> None:
    redis = aioredis.Redis.from_url(args.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    options = options_from(args)
    metrics = SupervisorMetrics()
    server = await serve_metrics(metrics, args.metrics_host, args.metrics_port) if args.metrics_port else None
    registrar = Registrar(redis, Keys(args.redis_prefix), options.ttl_s)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with httpx.AsyncClient() as client:
        reg = Register([Watched(r) for r in args.record], registrar, client, metrics, options)
        for w in reg.watched:
            reg.show(w)
        beat = asyncio.create_task(reg.heartbeat())
        await stop.wait()
        await reg.drain()
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        await reg.withdraw()
    if server is not None:
        server.close()
    await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
