"""A replica's KV events into the shared prefix index: the managing agent's side of the exact mode.

One :class:`KvFeed` per replica (the supervisor runs one for each replica it starts, the registration
sidecar one for each replica it registers): a ZMQ subscriber on the replica's ``--kv-events-config``
endpoint, a :class:`llmgw_contract.kv_events.BlockMirror` that turns each batch into prefix keys, and
:class:`KvIndexWriter`, one Lua script per batch (``llmgw_contract/lua/kv_apply.lua``) that adds and removes
those keys for the replica in its model's index.

When the index is right: the feed is *exact* while it is connected and has every batch. Losses reset the
replica's entries and ask vLLM's replay endpoint for the batches it still buffers: on start (from 0), on a
sequence gap (from the first missing one; what the buffer no longer has is lost, and the replica's entries
are reset), on a publisher restart (sequence 0 again), on a disconnect (the ZMQ monitor; reconnecting
replays from 0), and on ``AllBlocksCleared``. A stream that stops without a disconnect (the process frozen,
the socket black-holed, the publisher stuck) is found by a replay probe after a second without a batch
(:mod:`llmgw_contract.kv_trust`): unanswered, the replica's entries are reset and it is approximate; answered
again, the replay refills them and a new subscription follows. ``mode`` says which applies now (``exact``
or ``approximate``); the agent publishes it in the replica's record, where the gateways read it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources

import redis.asyncio as aioredis
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.kv_events import ANY, BlockKeyer, BlockMirror, Delta, Order, decode_batch
from llmgw_contract.kv_trust import APPROXIMATE, FeedTiming, StreamTrust
from llmgw_contract.redis_keys import RedisKeys

log = logging.getLogger("llmgw.kv_feed")

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class KvIndexWriter:
    """One replica's entries in its model's index, written in one atomic script per batch."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, model: str) -> None:
        lua = resources.files("llmgw_contract") / "lua"
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


class Replayed(StrEnum):
    """How a replay request ended."""

    DONE = "done"  # answered to its end
    GAP = "gap"  # answered, but the buffer no longer holds the first batch asked for
    SILENT = "silent"  # no answer within the timeout: the publisher is frozen, stuck or cut off


@dataclass
class FeedStats:
    batches: int = 0
    gaps: int = 0
    resets: int = 0
    shown_resets: int = 0
    replays: int = 0
    silences: int = 0
    """Times the stream went silent (a replay unanswered: llmgw_contract/kv_trust.py)."""
    shown_silences: int = 0
    missed: int = 0
    """Batches that came by a probe's replay, not by the subscription."""
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
        timing: FeedTiming | None = None,
        on_mode: Callable[[str], None] | None = None,
    ) -> None:
        self.replica, self.instance, self.endpoints, self.writer = replica, instance, endpoints, writer
        self.mirror = BlockMirror(keyer)
        self.trust = StreamTrust(timing or FeedTiming())
        self.on_mode = on_mode
        self.shown_mode = APPROXIMATE
        self.stats = FeedStats()
        self.ctx = zmq.asyncio.Context.instance()

    @property
    def mode(self) -> str:
        """``exact`` while the stream is connected, caught up and not silent, else ``approximate``."""
        return self.trust.mode

    def show_mode(self) -> None:
        if self.mode != self.shown_mode:
            self.shown_mode = self.mode
            log.info("replica=%s instance=%s kv index %s", self.replica, self.instance, self.mode)
            if self.on_mode is not None:
                self.on_mode(self.mode)

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

    async def replay(self, start: int) -> Replayed:
        """Ask the replay endpoint for every batch from ``start`` and take them."""
        self.stats.replays += 1
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoints.replay)
        try:
            await sock.send_multipart([b"", max(0, start).to_bytes(8, "big")])
            while True:
                if not await sock.poll(self.trust.timing.silent_s * 1000):
                    return Replayed.SILENT
                frames = await sock.recv_multipart()
                seq_bytes, payload = frames[-2], frames[-1]
                if seq_bytes == END_SEQ:
                    return Replayed.DONE
                if not await self.take(int.from_bytes(seq_bytes, "big"), payload):
                    return Replayed.GAP
        finally:
            sock.close(linger=0)

    async def catch_up(self, start: int, why: str) -> bool:
        """Replay from ``start``; if vLLM no longer buffers it all, reset and take what it has. False when
        the replay endpoint did not answer (the stream is silent: reset, approximate)."""
        got = await self.replay(start)
        if got is Replayed.GAP:
            self.stats.gaps += 1
            await self.reset(f"{why}: replay incomplete", ANY)
            got = await self.replay(0)
        if got is Replayed.SILENT:
            await self.silenced(why)
            return False
        if self.trust.caught_up(time.monotonic()):
            log.warning("replica=%s kv events answer again (%s): caught up by replay", self.replica, why)
        self.show_mode()
        return True

    async def silenced(self, why: str) -> None:
        if self.trust.unanswered():
            self.stats.silences += 1
            log.warning(
                "replica=%s instance=%s kv events silent (%s: replay unanswered within %g s): entries reset, "
                "approximate until it answers",
                self.replica, self.instance, why, self.trust.timing.silent_s,
            )  # fmt: skip
            self.show_mode()
            await self.reset("events silent", ANY)

    async def probe(self) -> bool:
        """Ask the replay endpoint for what follows the last batch (llmgw_contract/kv_trust.py); False:
        silent."""
        before = self.stats.batches
        answered = await self.catch_up(self.mirror.last_seq + 1, "probe")
        if self.stats.batches > before:
            self.stats.missed += self.stats.batches - before
            log.warning(
                "replica=%s %d kv event batches came by replay, not the subscription",
                self.replica, self.stats.batches - before,
            )  # fmt: skip
        return answered

    async def run(self) -> None:
        """Subscribe, catch up, follow; when the stream goes silent, probe until it answers, then subscribe
        again (a new connection: a black-holed one is not reused; also when a probe found batches the
        subscription had missed); never returns (cancel it)."""
        await self.reset("feed started")
        while True:
            await self.follow()
            while self.trust.silent:
                await asyncio.sleep(self.trust.timing.probe_s)
                await self.catch_up(self.mirror.last_seq + 1, "silent")

    async def follow(self) -> None:
        """One subscription, followed until the stream goes silent or a probe finds it missed batches."""
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.LINGER, 0)
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sub.connect(self.endpoints.events)
        poller = zmq.asyncio.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        try:
            while True:
                ready = dict(await poller.poll(self.trust.timing.probe_s * 1000))
                if monitor in ready:
                    event = parse_monitor_message(await monitor.recv_multipart())["event"]
                    if not await self.connection(event):
                        return
                if sub in ready:
                    _topic, seq_bytes, payload = await sub.recv_multipart()
                    self.trust.batch(time.monotonic())
                    seq = int.from_bytes(seq_bytes, "big")
                    if not await self.take(seq, payload):
                        self.stats.gaps += 1
                        if not await self.catch_up(self.mirror.last_seq + 1, f"gap before {seq}"):
                            return
                        await self.take(seq, payload)
                if self.trust.probe_due(time.monotonic()):
                    missed = self.stats.missed
                    if not await self.probe() or self.stats.missed > missed:
                        return
        finally:  # the trust stays: a silent stream is approximate already, a resubscribed one caught up
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)

    async def connection(self, event: int) -> bool:
        """The subscription connected (catch up: False when the replay is unanswered) or dropped."""
        if event == zmq.EVENT_CONNECTED:
            return await self.catch_up(self.mirror.last_seq + 1, "connected")
        if event == zmq.EVENT_DISCONNECTED:
            self.trust.disconnected()
            self.show_mode()
            await self.reset("publisher disconnected")
        return True
