"""A replica's KV events into the shared prefix index: the managing agent's side of the exact mode.

One :class:`KvFeed` per replica (the supervisor runs one for each replica it starts, the registration
sidecar one for each replica it registers): a ZMQ subscriber on the replica's ``--kv-events-config``
endpoint, a :class:`contract.kv_events.BlockMirror` that turns each batch into prefix keys, and
:class:`KvIndexWriter`, one Lua script per batch (``contract/lua/kv_apply.lua``) that adds and removes
those keys for the replica in its model's index.

When the index is right: the feed is *exact* while it is connected and has every batch. Losses reset the
replica's entries and ask vLLM's replay endpoint for the batches it still buffers: on start (from 0), on a
sequence gap (from the first missing one; what the buffer no longer has is lost, and the replica's entries
are reset), on a publisher restart (sequence 0 again), on a disconnect (the ZMQ monitor; reconnecting
replays from 0), and on ``AllBlocksCleared``. ``mode`` says which applies now (``exact`` or
``approximate``); the agent publishes it in the replica's record, where the gateways read it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from contract.chat_frames import Frames, jinja_render
from contract.kv_events import ANY, BlockKeyer, BlockMirror, Delta, Order, decode_batch
from contract.redis_keys import RedisKeys
from contract.replica_metrics import SupervisorMetrics

log = logging.getLogger("llmgw.kv_feed")

EXACT, APPROXIMATE = "exact", "approximate"
END_SEQ = (-1).to_bytes(8, "big", signed=True)
KV_EVENTS_PORT, KV_REPLAY_PORT = 5557, 5558
"""The ports of a containerised replica's KV events and their replay (vLLM's default event port)."""


@dataclass(frozen=True, slots=True)
class KvEndpoints:
    """Where a replica publishes its events and serves their replay (vLLM binds both: ipc paths)."""

    events: str
    replay: str

    @classmethod
    def for_port(cls, port: int, run_dir: str = "/tmp") -> KvEndpoints:
        """The supervisor's endpoints for the replica serving ``port`` (unique per host)."""
        return cls(f"ipc://{run_dir}/llmgw-kv-{port}.pub", f"ipc://{run_dir}/llmgw-kv-{port}.replay")

    @classmethod
    def tcp(cls, host: str) -> KvEndpoints:
        """A container's endpoints: vLLM binds ``tcp("*")`` (every interface: vLLM connects, instead of
        binding, a PUB endpoint that names a host), its agent connects to ``tcp(host)``, where ``host``
        is the pod's loopback (Kubernetes: same pod) or the vLLM service's name (compose)."""
        return cls(f"tcp://{host}:{KV_EVENTS_PORT}", f"tcp://{host}:{KV_REPLAY_PORT}")

    def engine_config(self) -> str:
        """vLLM's ``--kv-events-config`` value."""
        conf = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": self.events}
        return json.dumps({**conf, "replay_endpoint": self.replay})


def special_tokens(conf: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in conf.items():
        if k.endswith("_token"):
            v = v.get("content") if isinstance(v, dict) else v
            if isinstance(v, str):
                out[k] = v
    return out


def load_keyer(
    model_dir: Path, chat_template: str | None, chunk_bytes: int, max_chunks: int
) -> BlockKeyer | None:
    """The model's :class:`BlockKeyer` from its weights folder (``tokenizer.json``, the chat template of the
    fleet file or the folder); None when it has no such tokenizer or its template cannot be read back."""
    from tokenizers import Tokenizer

    tok_file = model_dir / "tokenizer.json"
    if not tok_file.is_file():
        return None
    tokenizer = Tokenizer.from_file(str(tok_file))
    conf_file = model_dir / "tokenizer_config.json"
    conf = json.loads(conf_file.read_text()) if conf_file.is_file() else {}
    template = chat_template
    if template and "{" not in template and Path(template).is_file():
        template = Path(template).read_text()
    if not template and (model_dir / "chat_template.jinja").is_file():
        template = (model_dir / "chat_template.jinja").read_text()
    template = template or conf.get("chat_template")
    frames = Frames.learn(jinja_render(template, special_tokens(conf))) if isinstance(template, str) else None
    if isinstance(template, str) and frames is None:
        return None

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=False))

    return BlockKeyer(decode, frames, chunk_bytes, max_chunks)


class KvIndexWriter:
    """One replica's entries in its model's index, written in one atomic script per batch."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, model: str) -> None:
        lua = resources.files("contract") / "lua"
        body = (lua / "prefix_common.lua").read_text() + "\n" + (lua / "kv_apply.lua").read_text()
        self.script = redis.register_script(body)
        self.keys, self.model = keys, model

    async def apply(self, replica: str, instance: str, delta: Delta) -> int:
        """Write ``delta`` for ``replica``; returns how many keys its engine holds now."""
        k, m = self.keys, self.model
        names = [
            k.prefix_holders(m),
            k.prefix_instances(m),
            k.prefix_lru(m, replica),
            k.prefix_kv(m, replica),
        ]
        args = [
            replica,
            instance,
            "1" if delta.reset else "0",
            str(len(delta.added)),
            *delta.added,
            *delta.removed,
        ]
        return int(await self.script(keys=names, args=args))


@dataclass
class FeedStats:
    batches: int = 0
    gaps: int = 0
    resets: int = 0
    shown_resets: int = 0
    replays: int = 0
    held_keys: int = 0
    last_event: float = 0.0
    map_s: float = 0.0
    """Seconds spent turning events into keys (decode, read back, hash)."""
    since: dict[str, float] = field(default_factory=dict)


class KvFeed:
    """Follows one replica's KV events into the index (see the module's docstring)."""

    def __init__(
        self,
        replica: str,
        instance: str,
        endpoints: KvEndpoints,
        keyer: BlockKeyer,
        writer: KvIndexWriter,
        replay_timeout_s: float = 2.0,
        on_mode: Callable[[str], None] | None = None,
    ) -> None:
        self.replica, self.instance, self.endpoints, self.writer = replica, instance, endpoints, writer
        self.mirror = BlockMirror(keyer)
        self.replay_timeout_s = replay_timeout_s
        self.on_mode = on_mode
        self.mode = APPROXIMATE
        self.stats = FeedStats()
        self.ctx = zmq.asyncio.Context.instance()

    def set_mode(self, mode: str) -> None:
        if mode != self.mode:
            log.info("replica=%s instance=%s kv index %s", self.replica, self.instance, mode)
            self.mode = mode
            if self.on_mode is not None:
                self.on_mode(mode)

    async def write(self, delta: Delta) -> None:
        if delta:
            self.stats.held_keys = await self.writer.apply(self.replica, self.instance, delta)

    async def reset(self, why: str, last_seq: int = -1) -> None:
        self.stats.resets += 1
        log.info("replica=%s kv index reset (%s)", self.replica, why)
        await self.write(self.mirror.reset(last_seq))

    async def take(self, seq: int, payload: bytes) -> bool:
        """One batch; False on a gap (the caller replays or resets)."""
        order = self.mirror.order(seq)
        if order is Order.OLD:
            return True
        if order is Order.GAP:
            return False
        if order is Order.RESTART:
            await self.reset("publisher restarted")
        t0 = time.perf_counter()
        delta = self.mirror.apply(seq, decode_batch(payload))
        self.stats.map_s += time.perf_counter() - t0
        self.stats.batches += 1
        self.stats.last_event = time.monotonic()
        await self.write(delta)
        return True

    async def replay(self, start: int) -> bool:
        """Ask the replay endpoint for every batch from ``start``; True when it answered to its end."""
        self.stats.replays += 1
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoints.replay)
        try:
            await sock.send_multipart([b"", start.to_bytes(8, "big")])
            while True:
                if not await sock.poll(self.replay_timeout_s * 1000):
                    return False
                frames = await sock.recv_multipart()
                seq_bytes, payload = frames[-2], frames[-1]
                if seq_bytes == END_SEQ:
                    return True
                if not await self.take(int.from_bytes(seq_bytes, "big"), payload):
                    return False
        finally:
            sock.close(linger=0)

    async def catch_up(self, start: int, why: str) -> None:
        """Replay from ``start``; if vLLM no longer buffers it all, reset and take what it has."""
        if await self.replay(start):
            return
        self.stats.gaps += 1
        await self.reset(f"{why}: replay incomplete", ANY)
        await self.replay(0)

    async def run(self) -> None:
        """Subscribe, catch up, follow; never returns (cancel it)."""
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.LINGER, 0)
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sub.connect(self.endpoints.events)
        await self.reset("feed started")
        poller = zmq.asyncio.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        try:
            while True:
                ready = dict(await poller.poll())
                if monitor in ready:
                    await self.connection(parse_monitor_message(await monitor.recv_multipart())["event"])
                if sub in ready:
                    _topic, seq_bytes, payload = await sub.recv_multipart()
                    seq = int.from_bytes(seq_bytes, "big")
                    if not await self.take(seq, payload):
                        self.stats.gaps += 1
                        await self.catch_up(self.mirror.last_seq + 1, f"gap before {seq}")
                        await self.take(seq, payload)
        finally:
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)

    async def connection(self, event: int) -> None:
        if event == zmq.EVENT_CONNECTED:
            await self.catch_up(self.mirror.last_seq + 1, "connected")
            self.set_mode(EXACT)
        elif event == zmq.EVENT_DISCONNECTED:
            self.set_mode(APPROXIMATE)
            await self.reset("publisher disconnected")


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
            feed.stats.shown_resets = feed.stats.resets

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
        tasks = [task for _t, _f, task in self.feeds.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.feeds.clear()
