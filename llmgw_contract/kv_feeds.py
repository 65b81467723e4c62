"""An agent's KV-event feeds, one per replica it manages (:class:`llmgw_contract.kv_feed.KvFeed`): the
supervisor and the registration sidecar keep them in step with the replicas they run or watch, and show each
one's mode, blocks, keys, resets and silences in their metrics."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis

from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.kv_events import BlockKeyer
from llmgw_contract.kv_feed import KvFeed, KvIndexWriter
from llmgw_contract.kv_keyer import load_keyer
from llmgw_contract.kv_trust import APPROXIMATE, EXACT
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.supervision import cancelled

log = logging.getLogger("llmgw.kv_feed")


@dataclass(frozen=True, slots=True)
class FeedTarget:
    """A replica whose events an agent follows: which start of it, where it publishes, its weights."""

    replica: str
    model: str
    instance: str
    endpoints: KvEndpoints
    model_dir: Path
    chat_template: str | None = None


class KvFeeds:
    """An agent's feeds, one per replica it manages (:meth:`sync` each heartbeat): a new start gets a new
    feed (which resets the replica's entries); a feed that failed is logged, counted and started again."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, chunk_bytes: int, max_chunks: int) -> None:
        self.redis, self.keys, self.chunk_bytes, self.max_chunks = redis, keys, chunk_bytes, max_chunks
        self.feeds: dict[str, tuple[FeedTarget, KvFeed, asyncio.Task[None]]] = {}
        self.keyers: dict[str, BlockKeyer | None] = {}
        self.failures = 0

    @classmethod
    def from_env(cls, redis: aioredis.Redis, keys: RedisKeys) -> KvFeeds:
        """The gateways' chunking (``LLMGW_PREFIX_CHUNK_BYTES``, ``LLMGW_PREFIX_MAX_CHUNKS``)."""
        chunk = int(os.environ.get("LLMGW_PREFIX_CHUNK_BYTES", "512"))
        return cls(redis, keys, chunk, int(os.environ.get("LLMGW_PREFIX_MAX_CHUNKS", "64")))

    def mode(self, replica: str) -> str:
        got = self.feeds.get(replica)
        return got[1].mode if got is not None else APPROXIMATE

    def show(self, metrics: SupervisorMetrics) -> None:
        """Each feed's mode, the blocks and keys its replica holds, and its new resets."""
        for rid, (t, feed, _task) in self.feeds.items():
            metrics.kv_exact.labels(t.model, rid).set(1 if feed.mode == EXACT else 0)
            metrics.kv_blocks.labels(t.model, rid, "blocks").set(len(feed.mirror.blocks))
            metrics.kv_blocks.labels(t.model, rid, "keys").set(len(feed.mirror.held))
            metrics.kv_resets.labels(t.model, rid).inc(feed.stats.resets - feed.stats.shown_resets)
            metrics.kv_silences.labels(t.model, rid).inc(feed.stats.silences - feed.stats.shown_silences)
            feed.stats.shown_resets, feed.stats.shown_silences = feed.stats.resets, feed.stats.silences

    def keyer(self, t: FeedTarget) -> BlockKeyer | None:
        if t.model not in self.keyers:
            keyer = load_keyer(t.model_dir, t.chat_template, self.chunk_bytes, self.max_chunks)
            if keyer is None:
                log.warning(
                    "model=%s: no tokenizer.json, or a chat template not read back: approximate", t.model
                )
            self.keyers[t.model] = keyer
        return self.keyers[t.model]

    def sync(self, targets: list[FeedTarget]) -> None:
        wanted = {t.replica: t for t in targets}
        for rid, (target, _feed, task) in list(self.feeds.items()):
            if task.done() and not task.cancelled() and task.exception() is not None:
                self.failures += 1
                log.error("replica=%s kv feed failed: %r (started again)", rid, task.exception())
            if wanted.get(rid) != target or task.done():
                task.cancel()
                del self.feeds[rid]
        for rid, t in wanted.items():
            keyer = self.keyer(t) if rid not in self.feeds else None
            if keyer is not None:
                feed = KvFeed(
                    rid, t.instance, t.endpoints, keyer, KvIndexWriter(self.redis, self.keys, t.model)
                )
                self.feeds[rid] = (t, feed, asyncio.create_task(feed.run(), name=f"kv feed {rid}"))

    async def aclose(self) -> None:
        await cancelled([task for _t, _f, task in self.feeds.values()])
        self.feeds.clear()
