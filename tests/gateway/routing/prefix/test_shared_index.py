"""The shared index on a real Redis: the Lua script agrees with the pure reference, step by step, and
two gateways (two clients) make the same decisions for an interleaved sequence."""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.replicas.table import Endpoint
from gateway.routing.base import PolicyOptions, RouteRequest
from gateway.routing.prefix.affinity import PrefixAffinity
from gateway.routing.prefix.index import PickInput, PrefixIndex, ReplicaView, bound_ratio
from gateway.routing.prefix.shared_index import DEGRADED, SHARED, SharedIndex
from llmgw_contract.kv_events import Delta
from llmgw_contract.kv_feed import KvIndexWriter
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord
from testing.procs import free_port

MODEL = "m"


@pytest.fixture
def keys() -> RedisKeys:
    return RedisKeys(f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[list[aioredis.Redis]]:
    made = [aioredis.Redis.from_url(redis_url) for _ in range(2)]
    yield made
    for c in made:
        await c.aclose()


async def redis_state(r: aioredis.Redis, keys: RedisKeys) -> PrefixIndex:
    """The Redis side of one model's index, as a PrefixIndex (sessions and clock left out)."""
    raw = await r.hgetall(keys.prefix_holders(MODEL))
    holders = {k.decode(): v.decode().split(" ") for k, v in raw.items()}
    inst = {k.decode(): v.decode() for k, v in (await r.hgetall(keys.prefix_instances(MODEL))).items()}
    lru: dict[str, dict[str, int]] = {}
    for rid in inst:
        members = await r.zrange(keys.prefix_lru(MODEL, rid), 0, -1, withscores=True)
        if members:
            lru[rid] = {m.decode(): int(s) for m, s in members}
    recent = [x.decode() for x in await r.lrange(keys.prefix_recent(MODEL), 0, -1)]
    kv: dict[str, set[str]] = {}
    for rid in inst:
        held = {m.decode() for m in await r.smembers(keys.prefix_kv(MODEL, rid))}
        if held:
            kv[rid] = held
    return PrefixIndex(holders=holders, lru=lru, instances=inst, recent=recent, kv=kv)


def random_input(
    rng: random.Random, instances: dict[str, str], window: int = 8, exact: frozenset[str] = frozenset()
) -> PickInput:
    """A pick over a random subset of 5 replicas, a chain from a small tree of prefixes, maybe a session,
    random in-flight and share bounds over a window of ``window`` picks; one pick in 5 a detour."""
    ids = sorted(rng.sample(sorted(instances), rng.randint(1, 5)))
    reps = tuple(
        ReplicaView(i, instances[i], rng.randint(0, 6), rng.choice([2, 4, 50]), i in exact) for i in ids
    )
    root = rng.choice(["s0", "s1", "s2"])
    chain = tuple(f"{root}-{'-'.join(map(str, range(d)))}" for d in range(rng.randint(0, 5)))
    session = rng.choice([None, None, "alice", "bob"])
    ratio = bound_ratio(rng.choice([0.0, 0.25, 1.0, math.inf]))
    share = bound_ratio(rng.choice([0.0, 0.25, 1.0, math.inf]))
    return PickInput(chain, reps, ratio, session, share, window, rng.random() < 0.2)


@pytest.mark.parametrize("seed", range(6))
async def test_lua_agrees_with_the_reference(
    seed: int, keys: RedisKeys, clients: list[aioredis.Redis]
) -> None:
    rng = random.Random(seed)
    ref = PrefixIndex()
    gateways = [SharedIndex(c, keys) for c in clients]
    instances = {f"r{i}": "i0" for i in range(5)}
    for step in range(150):
        roll = rng.random()
        if roll < 0.05:
            instances[rng.choice(sorted(instances))] = f"i{step}"  # a restart
        elif roll < 0.08:
            present = sorted(rng.sample(sorted(instances), 4))
            assert await gateways[0].forget_absent(MODEL, present) == ref.forget_absent(present)
        inp = random_input(rng, instances)
        got = await gateways[step % 2].pick(MODEL, inp)
        assert got == ref.pick(inp), f"step {step}"
        state = await redis_state(clients[0], keys)
        assert state.holders == ref.holders, f"step {step}"
        assert state.lru == {r: used for r, used in ref.lru.items() if used}, f"step {step}"
        assert state.instances == ref.instances
        assert state.recent == ref.recent, f"step {step}"
    assert all(g.mode == SHARED for g in gateways)


@pytest.mark.parametrize("seed", range(4))
async def test_lua_agrees_with_the_reference_with_exact_replicas(
    seed: int, keys: RedisKeys, clients: list[aioredis.Redis]
) -> None:
    """Two replicas fed by their agents (KV events: keys added, removed, resets, restarts) among three
    approximate ones: picks, the agents' writes (llmgw_contract/lua/kv_apply.lua) and the reference agree."""
    rng = random.Random(100 + seed)
    ref = PrefixIndex()
    gateway = SharedIndex(clients[0], keys)
    writer = KvIndexWriter(clients[1], keys, MODEL)
    instances = {f"r{i}": "i0" for i in range(5)}
    exact = frozenset({"r0", "r1"})
    for step in range(150):
        if rng.random() < 0.4:
            rid = rng.choice(sorted(exact))
            if rng.random() < 0.05:
                instances[rid] = f"i{step}"
            inp = random_input(rng, instances)
            added = tuple(rng.sample(inp.chain, rng.randint(0, len(inp.chain))))
            removed = tuple(k for k in (ref.kv.get(rid, set()) | {"s0-"}) if rng.random() < 0.2)
            delta = Delta(added, tuple(sorted(removed)), rng.random() < 0.03)
            await writer.apply(rid, instances[rid], delta)
            ref.apply_events(rid, instances[rid], delta.added, delta.removed, delta.reset)
        else:
            inp = random_input(rng, instances, exact=exact)
            assert await gateway.pick(MODEL, inp) == ref.pick(inp), f"step {step}"
        state = await redis_state(clients[0], keys)
        assert state.holders == ref.holders, f"step {step}"
        assert state.lru == {r: used for r, used in ref.lru.items() if used}, f"step {step}"
        assert state.kv == {r: held for r, held in ref.kv.items() if held}, f"step {step}"
        assert state.instances == ref.instances


async def test_two_gateways_decide_alike_for_an_interleaved_sequence(
    keys: RedisKeys, clients: list[aioredis.Redis]
) -> None:
    """The same sequence through one gateway, then interleaved over two (on a fresh index): the same
    decisions, since a decision depends only on the shared state and the request."""
    rng = random.Random(7)
    instances = {f"r{i}": "i0" for i in range(5)}
    inputs = [random_input(rng, instances) for _ in range(200)]
    alone = SharedIndex(clients[0], keys)
    first = [await alone.pick(MODEL, inp) for inp in inputs]
    other = RedisKeys(keys.prefix + "b")
    pair = [SharedIndex(c, other) for c in clients]
    order = [pair[i % 2] if i % 3 else pair[(i + 1) % 2] for i in range(len(inputs))]
    second = [await g.pick(MODEL, inp) for g, inp in zip(order, inputs, strict=True)]
    assert first == second
    assert {d.outcome for d in first if d} >= {"hit", "cold", "session"}


async def test_redis_gone_is_degraded_then_retried(keys: RedisKeys) -> None:
    now = [0.0]
    dead = aioredis.Redis(port=free_port(), socket_connect_timeout=0.5)
    index = SharedIndex(dead, keys, retry_s=1.0, clock=lambda: now[0])
    inp = PickInput(("k",), (ReplicaView("a", "", 0, 10),), bound_ratio(0.25))
    assert await index.pick(MODEL, inp) is None and index.mode == DEGRADED
    assert index.retry_at == 1.0
    assert await index.pick(MODEL, inp) is None  # within retry_s: no attempt
    assert index.retry_at == 1.0
    now[0] = 1.5
    assert await index.pick(MODEL, inp) is None and index.retry_at == 2.5
    await dead.aclose()


async def test_the_policy_counts_a_window_of_picks_per_candidate(
    keys: RedisKeys, clients: list[aioredis.Redis]
) -> None:
    """``share_window`` picks per candidate: with 3 candidates and 2 per candidate, the 6 latest picks."""
    index = SharedIndex(clients[0], keys)
    policy = PrefixAffinity(PolicyOptions(model=MODEL, index=index, share_window=2))
    cands = [Endpoint(ReplicaRecord(id=f"r{i}", model=MODEL, url="http://x")) for i in range(3)]
    for i in range(10):
        await policy.route(cands, RouteRequest(chain=(f"k{i}",)))
    assert await clients[0].llen(keys.prefix_recent(MODEL)) == 6


async def test_a_detour_through_the_policy_leaves_the_placement(
    keys: RedisKeys, clients: list[aioredis.Redis]
) -> None:
    """A retry or a migration (``RouteRequest.detour``, set by the forwarding step when it excludes the
    replicas tried) goes to the other replica, but the prefix keeps its one holder."""
    index = SharedIndex(clients[0], keys)
    policy = PrefixAffinity(PolicyOptions(model=MODEL, index=index))
    a, b = (Endpoint(ReplicaRecord(id=rid, model=MODEL, url="http://x")) for rid in ("a", "b"))
    first = await policy.route([a, b], RouteRequest(chain=("doc", "q1")))
    other = b if first is a else a
    assert await policy.route([other], RouteRequest(chain=("doc", "q2"), detour=True)) is other
    state = await redis_state(clients[0], keys)
    assert state.holders == {"doc": [first.id], "q1": [first.id]}
    assert other.id not in state.lru
    assert await policy.route([a, b], RouteRequest(chain=("doc", "q3"))) is first
