"""Background health checks and load scraping, never on the request path.

Every interval each replica's ``/health`` is checked: a failing one is ejected (out of new picks);
one that fails ``lost_after_probes`` in a row is taken for lost (the requests in flight there are
told: gateway/replicas/ejection.py). An ejected replica whose back-off has run out gets a half-open
probe that brings it back.  Each
replica's ``/metrics`` gives ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``: what every
gateway together sent there, and ``vllm:cache_config_info``: the KV cache's size (the prefix index's
LRU bound). Recorded with them is this gateway's own in-flight count at that moment, so
that the load of an endpoint can tell the other gateways' requests from its own (see ``Endpoint.load``).
Each scrape's progress mark and each failed probe or scrape go to the endpoint's ``progress``: the
evidence a stalled stream moves on (gateway/replicas/progress.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx

from gateway.metrics import GatewayMetrics
from gateway.replicas.ejection import Ejection
from gateway.replicas.table import Endpoint, ReplicaTable
from llmgw_contract.vllm_metrics import kv_cache_tokens, progress_mark, running_and_waiting

log = logging.getLogger("llmgw.monitor")


class Monitor:
    def __init__(
        self,
        client: httpx.AsyncClient,
        table: ReplicaTable,
        ejection: Ejection,
        metrics: GatewayMetrics,
        timeout_s: float = 2.0,
        headers: Callable[[Endpoint], dict[str, str]] = lambda ep: {},
    ) -> None:
        self.client, self.table, self.ejection, self.metrics = client, table, ejection, metrics
        self.timeout_s, self.headers = timeout_s, headers

    async def healthy(self, ep: Endpoint) -> bool:
        try:
            r = await self.client.get(f"{ep.url}/health", headers=self.headers(ep), timeout=self.timeout_s)
        except (httpx.HTTPError, OSError):
            return False
        return r.status_code == 200

    async def check(self, ep: Endpoint) -> None:
        now = time.monotonic()
        if ep.failures and not Ejection.probe_due(ep, now):
            return
        ok = await self.healthy(ep)
        if ok and ep.failures:
            log.info("replica=%s model=%s back after a half-open probe", ep.id, ep.record.model)
            self.ejection.succeed(ep)
        elif not ok:
            ep.progress.failed(time.perf_counter())
            newly, lost = self.ejection.probe_failed(ep, time.monotonic())
            if newly:
                self.metrics.ejections.labels(ep.record.model, ep.id).inc()
                log.warning("replica=%s model=%s ejected: /health failed", ep.id, ep.record.model)
            if lost:
                log.warning(
                    "replica=%s model=%s lost: /health failed %d times in a row; its requests in flight"
                    " are moved or ended", ep.id, ep.record.model, ep.probe_failures,
                )  # fmt: skip

    async def scrape(self, ep: Endpoint) -> None:
        try:
            r = await self.client.get(f"{ep.url}/metrics", headers=self.headers(ep), timeout=self.timeout_s)
        except (httpx.HTTPError, OSError):
            ep.progress.failed(time.perf_counter())
            return
        if r.status_code == 200:
            ep.running, ep.waiting = running_and_waiting(r.content)
            ep.inflight_at_scrape = ep.inflight
            ep.kv_tokens = kv_cache_tokens(r.content) or ep.kv_tokens
            ep.progress.scraped(progress_mark(r.content), time.perf_counter())

    def export(self) -> None:
        for ep in self.table.endpoints():
            self.metrics.inflight.labels(ep.record.model, ep.id).set(ep.inflight)

    async def health_tick(self) -> None:
        """Check the replicas that take requests (an asleep or starting one has no server to ask)."""
        await asyncio.gather(*(self.check(ep) for ep in self.table.endpoints() if ep.record.routable))

    async def load_tick(self) -> None:
        """Scrape the replicas that take requests, and any other that still has ours in flight (a
        draining one: its scrapes are its streams' stall evidence)."""
        scraped = [ep for ep in self.table.endpoints() if ep.record.routable or ep.inflight > 0]
        await asyncio.gather(*(self.scrape(ep) for ep in scraped))
        self.export()
