"""The lean pipelined client against a Redis Cluster: one :class:`PipelinedRedis` per node, a call routed
by its first key's slot, MOVED and ASK followed.

The slot map is learned from the replies: a call goes to the node the slot was last seen on (any node
before that); ``MOVED slot host:port`` records the slot's new owner and sends the call there; ``ASK`` (a
slot being migrated) sends ``ASKING`` and the call together to the named node once (its connection opened
first when none is), without recording it. Every
script of the project touches the keys of one slot (llmgw_contract/redis_keys.py), so one node answers it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from gateway.admission.redis_wire import Endpoint, PipelinedRedis, RedisReplyError, Reply, tls_context
from gateway.admission.resp import Part, Word, words

MAX_REDIRECTS = 5
SCRIPT_CALLS = frozenset({"EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO"})


def first_key(command: list[Part]) -> bytes | None:
    """The key a command is routed by: a script's first key, or a plain command's first argument."""
    parts = words(command)
    name = str(parts[0]).upper()
    if name in SCRIPT_CALLS:
        return encode_key(parts[3]) if len(parts) > 3 and int(parts[2]) > 0 else None
    return encode_key(parts[1]) if len(parts) > 1 and name not in ("PING", "ASKING") else None


def encode_key(part: Word) -> bytes:
    return part if isinstance(part, bytes) else str(part).encode()


def redirect(exc: RedisReplyError) -> tuple[str, int, str] | None:
    """(kind, slot, "host:port") of a MOVED or ASK reply, else None."""
    words = str(exc).split()
    if len(words) == 3 and words[0] in ("MOVED", "ASK"):
        return words[0], int(words[1]), words[2]
    return None


class ClusterPipelined(PipelinedRedis):
    """A :class:`PipelinedRedis` per cluster node, with the slot map learned from MOVED replies."""

    def __init__(self, seeds: list[Endpoint], timeout_s: float) -> None:
        super().__init__(seeds[0], timeout_s)
        self.seeds = seeds
        self.links: dict[str, PipelinedRedis] = {}
        self.slots: dict[int, str] = {}
        self.down: set[str] = set()  # nodes whose last call failed: asked last

    @classmethod
    def of_cluster(cls, client: RedisCluster, timeout_s: float) -> ClusterPipelined:
        kw = client.nodes_manager.connection_kwargs
        tls = tls_context(kw.get("connection_class"), kw)
        seeds = [
            Endpoint(n.host, int(n.port), 0, kw.get("username"), kw.get("password"), tls)
            for n in client.nodes_manager.startup_nodes.values()
        ]
        return cls(seeds, timeout_s)

    def link(self, addr: str) -> PipelinedRedis:
        if addr not in self.links:
            host, _, port = addr.rpartition(":")
            endpoint = dataclasses.replace(self.seeds[0], host=host, port=int(port))
            self.links[addr] = PipelinedRedis(endpoint, self.timeout_s, self.max_pending)
        return self.links[addr]

    def route(self, parts: list[Part]) -> PipelinedRedis:
        key = first_key(parts)
        addr = self.slots.get(key_slot(key)) if key is not None else None
        if addr is None:
            live = next((a for a, link in self.links.items() if link.healthy and a not in self.down), None)
            seeds = [f"{e.host}:{e.port}" for e in self.seeds]
            addr = live or next((a for a in seeds if a not in self.down), None) or seeds[0]
        return self.link(addr)

    def failed(self, addr: str) -> None:
        """A node did not answer: forget the slots seen on it (their next call asks another node, whose
        MOVED names the promoted replica) and ask it last."""
        self.slots = {slot: a for slot, a in self.slots.items() if a != addr}
        self.down.add(addr)
        if len(self.down) >= len(self.seeds):
            self.down.clear()

    async def connect(self) -> None:
        await self.route(["PING"]).connect()

    async def call(self, *parts: Part) -> Reply:
        link, asking = self.route(list(parts)), False
        for _ in range(MAX_REDIRECTS):
            addr = f"{link.endpoint.host}:{link.endpoint.port}"
            try:
                reply = await (link.call_asking(*parts) if asking else link.call(*parts))
            except OSError:
                self.failed(addr)
                raise
            except RedisReplyError as exc:
                if str(exc).startswith("CLUSTERDOWN"):
                    self.failed(addr)
                moved = redirect(exc)
                if moved is None:
                    raise
                kind, slot, addr = moved
                if kind == "MOVED":
                    self.slots[slot] = addr
                link, asking = self.link(addr), kind == "ASK"
                continue
            self.down.discard(addr)
            return reply
        raise RedisReplyError(f"more than {MAX_REDIRECTS} cluster redirects for {parts[0]!r}")

    def call_nowait(self, parts: list[Part], timeout_s: float | None = None) -> asyncio.Future[Reply] | None:
        """Sent at once only where the slot's node is known and its connection open; a MOVED reply in
        the future means: make the awaited call, which follows it (as for NOSCRIPT)."""
        key = first_key(parts)
        if key is None or key_slot(key) not in self.slots:
            return None
        return self.route(parts).call_nowait(parts, timeout_s)

    @property
    def healthy(self) -> bool:
        return any(link.healthy for link in self.links.values())

    def socket(self) -> socket.socket | None:
        return next((s for link in self.links.values() if (s := link.socket()) is not None), None)

    def close(self) -> None:
        for link in self.links.values():
            link.close()


def socket_timeout(client: aioredis.Redis, default: float) -> float:
    """The socket timeout a redis-py client (one server, Sentinel or cluster) was built with."""
    if isinstance(client, RedisCluster):
        kwargs = client.nodes_manager.connection_kwargs
    else:
        kwargs = client.connection_pool.connection_kwargs
    return float(kwargs.get("socket_timeout") or default)


def lean_client(client: aioredis.Redis, timeout_s: float) -> PipelinedRedis:
    """The lean pipelined client to wherever a redis-py client points: one server, the Sentinels' master,
    or a cluster."""
    if isinstance(client, RedisCluster):
        return ClusterPipelined.of_cluster(client, timeout_s)
    return PipelinedRedis.like(client, timeout_s)
