"""Simulation of the shared prefix index at 32 replicas and 8 gateways (``python -m bench.routing
--simulate``); no vLLM. Two parts:

1. Replay (the index alone, on a Redis of its own). One request sequence (conversations whose turns grow,
   template questions over shared documents, sessions for half the users) is picked by 8 gateway clients
   of :class:`gateway.routing.prefix.shared_index.SharedIndex` in turn (request *i* by gateway *i* mod 8, as
   nginx's round robin sends them), then again on a fresh index by one gateway alone, and by the pure
   reference :class:`gateway.routing.prefix.index.PrefixIndex`: agreement is the share of identical
   decisions. Loads are simulated: a request occupies its replica for the next ``concurrency`` arrivals.
   Measured from Redis' own ``INFO``: commands per pick (the script's calls included), bytes in and out
   per pick, and memory per cached token (``used_memory`` growth over the tokens the LRUs cover, at 4
   bytes a token). The same sequence also runs through the stateless policies with per-replica caches
   of unbounded size, for a simulated prefix hit rate (matched chunks over all chunks) against one cache
   that sees everything.
2. Live (the FAKE ENGINE, testing/fake_engine.py, standing in for 32 replicas in one process; 8 real gateway
   processes; the registry in Redis): the same requests, ``concurrency`` at a time, to gateway *i* mod 8.
   Reported: errors, each replica's share and the hot-spot factor, the pick outcomes from the gateways'
   metrics, and every Redis command and byte per request (admission, in-flight share, registry included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import yaml

from bench.routing_workloads import chat_messages, conversations, templates
from gateway.replicas.table import Endpoint
from gateway.routing.prefix.chain import request_chain
from gateway.routing.prefix.index import (
    BYTES_PER_TOKEN,
    Decision,
    PickInput,
    PrefixIndex,
    ReplicaView,
    bound_ratio,
    capacity_keys,
    share_window,
)
from gateway.routing.prefix.key import chat_prefix_key
from gateway.routing.prefix.shared_index import SharedIndex
from gateway.routing.rendezvous import rank
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, publish
from llmgw_tools.stack.stack import script
from testing.poll import wait_until
from testing.procs import REPO, Proc, free_port, free_port_run, http_ok, spawn, start_redis

MODEL = "sim-model"
CHUNK, MAX_CHUNKS = 512, 64


@dataclass(frozen=True, kw_only=True)
class SimOptions:
    replicas: int = 32
    gateways: int = 8
    users: int = 96
    turns: int = 4
    docs: int = 16
    questions: int = 16
    concurrency: int = 64
    kv_tokens: int = 65536
    epsilon: float = 0.25
    inflight_epsilon: float = 1.0
    window: int = 32
    """Picks per replica that the share bound counts (the gateway's ``LLMGW_PREFIX_SHARE_WINDOW``)."""
    seed: int = 1
    live: bool = True
    out: Path = REPO / "bench/results/routing-sim.json"


@dataclass(frozen=True)
class Req:
    payload: dict[str, Any]
    chain: tuple[str, ...]
    session: str | None


def say(msg: str) -> None:
    print(f"[sim] {msg}", flush=True)


def requests(o: SimOptions) -> list[Req]:
    """Conversation turns (answers stand in as fixed text) interleaved with template questions."""
    rng = random.Random(f"sim/{o.seed}")
    convs = conversations(o.seed, o.users, o.turns)
    rounds: list[list[Req]] = []
    for t in range(o.turns):
        batch = []
        for u, c in enumerate(convs):
            history = [(turn.question, "tok0 tok1 tok2 tok3 ") for turn in c.turns[:t]]
            payload = {"model": MODEL, "messages": chat_messages(c.system, history, c.turns[t].question)}
            session = c.id if u % 2 else None
            if session:
                payload["user"] = session
            batch.append(Req(payload, request_chain(payload, CHUNK, MAX_CHUNKS), session))
        rounds.append(batch)
    tpl = [
        {"model": MODEL, "messages": chat_messages(r.system, [], r.question)}
        for r in templates(o.seed, o.docs, o.questions)
    ]
    tpl_reqs = [Req(p, request_chain(p, CHUNK, MAX_CHUNKS), None) for p in tpl]
    out: list[Req] = []
    per_round = len(tpl_reqs) // max(1, o.turns) + 1
    for t, batch in enumerate(rounds):
        mixed = batch + tpl_reqs[t * per_round : (t + 1) * per_round]
        rng.shuffle(mixed)
        out += mixed
    return out


# -- part 1: the replay --------------------------------------------------------------------------------


class Loads:
    """Simulated load: each request holds its replica for the next ``hold`` arrivals."""

    def __init__(self, ids: Sequence[str], hold: int) -> None:
        self.load = dict.fromkeys(ids, 0)
        self.window: list[str] = []
        self.hold = hold

    def place(self, rid: str) -> None:
        self.load[rid] += 1
        self.window.append(rid)
        if len(self.window) > self.hold:
            self.load[self.window.pop(0)] -= 1


def views(ids: Sequence[str], loads: Loads, cap: int) -> tuple[ReplicaView, ...]:
    return tuple(ReplicaView(i, "i0", loads.load[i], cap) for i in ids)


def index_input(req: Req, reps: tuple[ReplicaView, ...], o: SimOptions) -> PickInput:
    """The pick the gateway sends the index: in-flight bound ``o.inflight_epsilon``, share bound
    ``o.epsilon`` over the last :func:`share_window` picks."""
    share, window = bound_ratio(o.epsilon), share_window(o.window, len(reps))
    return PickInput(req.chain, reps, bound_ratio(o.inflight_epsilon), req.session, share, window)


async def info(r: aioredis.Redis) -> tuple[Counter[str], int, int, int]:
    """Commands run so far (by name), bytes in, bytes out, memory used."""
    stats = await r.info("commandstats")
    calls: Counter[str] = Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})
    s = await r.info("stats")
    m = await r.info("memory")
    return calls, int(s["total_net_input_bytes"]), int(s["total_net_output_bytes"]), int(m["used_memory"])


async def replay_shared(
    clients: Sequence[SharedIndex], prefix_model: str, reqs: Sequence[Req], ids: Sequence[str], o: SimOptions
) -> list[Decision]:
    loads, cap = Loads(ids, o.concurrency), capacity_keys(o.kv_tokens, CHUNK)
    out = []
    for i, req in enumerate(reqs):
        d = await clients[i % len(clients)].pick(prefix_model, index_input(req, views(ids, loads, cap), o))
        assert d is not None, "Redis unreachable during the replay"
        loads.place(d.replica)
        out.append(d)
    return out


def replay_reference(reqs: Sequence[Req], ids: Sequence[str], o: SimOptions) -> list[Decision]:
    loads, cap = Loads(ids, o.concurrency), capacity_keys(o.kv_tokens, CHUNK)
    ref, out = PrefixIndex(), []
    for req in reqs:
        d = ref.pick(index_input(req, views(ids, loads, cap), o))
        loads.place(d.replica)
        out.append(d)
    return out


def stateless(policy: str, reqs: Sequence[Req], ids: Sequence[str], o: SimOptions) -> list[str]:
    """Round robin, least loaded, or the rendezvous ranking with today's bound (the degraded mode)."""
    loads, out = Loads(ids, o.concurrency), []
    p, q = bound_ratio(o.epsilon)
    for i, req in enumerate(reqs):
        if policy == "round_robin":
            rid = ids[i % len(ids)]
        elif policy == "least_loaded":
            rid = min(ids, key=lambda x: (loads.load[x], x))
        else:
            total, n = sum(loads.load.values()), len(ids)
            key = chat_prefix_key(req.payload["messages"], 1024)
            ranked = rank(key, _eps(ids))
            rid = next((e.id for e in ranked if loads.load[e.id] * q * n < p * (total + 1)), ranked[0].id)
        loads.place(rid)
        out.append(rid)
    return out


def _eps(ids: Sequence[str]) -> list[Endpoint]:
    return [Endpoint(ReplicaRecord(id=i, model=MODEL, url="http://sim")) for i in ids]


def hit_rate(reqs: Sequence[Req], placed: Sequence[str]) -> float:
    """Matched prefix chunks over all chunks, each replica caching every chain it served (unbounded)."""
    cached: dict[str, set[str]] = {}
    hits = total = 0
    for req, rid in zip(reqs, placed, strict=True):
        seen = cached.setdefault(rid, set())
        for depth in range(len(req.chain), 0, -1):
            if req.chain[depth - 1] in seen:
                hits += depth
                break
        total += len(req.chain)
        seen.update(req.chain)
    return hits / total if total else 0.0


def balance(placed: Sequence[str], ids: Sequence[str]) -> tuple[list[float], float]:
    counts = Counter(placed)
    shares = [counts[i] / len(placed) for i in ids]
    return shares, len(ids) * max(shares)


async def replay(o: SimOptions, tmp: Path) -> dict[str, Any]:
    reqs = requests(o)
    ids = [f"sim-{i:02d}" for i in range(o.replicas)]
    proc = start_redis(tmp / "replay-redis")
    url = f"redis://127.0.0.1:{proc.port}/0"
    conns = [aioredis.Redis.from_url(url) for _ in range(o.gateways)]
    probe = aioredis.Redis.from_url(url)
    try:
        keys_a, keys_b = RedisKeys("sim-a"), RedisKeys("sim-b")
        gws = [SharedIndex(c, keys_a) for c in conns]
        # load the script, on a model of its own: every pick enters its model's recent picks
        await gws[0].pick("warm-up", PickInput((), views(ids, Loads(ids, 1), 1), (1, 0)))
        before = await info(probe)
        started = time.perf_counter()
        shared = await replay_shared(gws, MODEL, reqs, ids, o)
        wall = time.perf_counter() - started
        after = await info(probe)
        lru_keys = sum([await probe.zcard(keys_a.prefix_lru(MODEL, i)) for i in ids])
        alone = await replay_shared([SharedIndex(conns[0], keys_b)], MODEL, reqs, ids, o)
    finally:
        for c in [*conns, probe]:
            await c.aclose()
        proc.stop()
    reference = replay_reference(reqs, ids, o)
    n = len(reqs)
    calls = after[0] - before[0]
    calls.pop("info", None)  # the measurement's own (the LRU sizes are read after the snapshot)
    placed = [d.replica for d in shared]
    tokens = lru_keys * CHUNK // BYTES_PER_TOKEN
    shares, hot = balance(placed, ids)
    policies = {"prefix index": hit_rate(reqs, placed)}
    rows = {}
    for policy in ("round_robin", "least_loaded", "rendezvous"):
        got = stateless(policy, reqs, ids, o)
        rows[policy] = {"hit_rate": hit_rate(reqs, got), "hotspot": balance(got, ids)[1]}
    ideal = hit_rate(reqs, ["one"] * n)
    return {
        "requests": n,
        "agreement_8_gateways_vs_1": sum(a == b for a, b in zip(shared, alone, strict=True)) / n,
        "agreement_with_reference": sum(a == b for a, b in zip(shared, reference, strict=True)) / n,
        "redis_commands_per_pick": sum(calls.values()) / n,
        "commands": dict(calls.most_common()),
        "bytes_in_per_pick": (after[1] - before[1]) / n,
        "bytes_out_per_pick": (after[2] - before[2]) / n,
        "index_memory_bytes": after[3] - before[3],
        "cached_tokens": tokens,
        "bytes_per_cached_token": (after[3] - before[3]) / tokens if tokens else None,
        "ms_per_pick_client_side": wall / n * 1000,
        "outcomes": dict(Counter(d.outcome for d in shared)),
        "shares_min_max": [min(shares), max(shares)],
        "hotspot": hot,
        "simulated_hit_rate": {
            "ideal (one cache)": ideal,
            **policies,
            **{k: v["hit_rate"] for k, v in rows.items()},
        },
        "simulated_hotspot": {"prefix index": hot, **{k: v["hotspot"] for k, v in rows.items()}},
    }


# -- part 2: live, 8 gateways in front of 32 FAKE ENGINE replicas -----------------------------------------


async def live(o: SimOptions, tmp: Path) -> dict[str, Any]:
    reqs = requests(o)
    redis_proc = start_redis(tmp / "live-redis")
    url = f"redis://127.0.0.1:{redis_proc.port}/0"
    base = free_port_run(o.replicas)
    engine = spawn(
        [sys.executable, "-m", "testing.fake_engine", "--port", str(base), "--ports", str(o.replicas),
         "--model", MODEL, "--tokens", "4", "--delay-ms", "10", "--kv-blocks", str(o.kv_tokens // 16)],
        base, tmp / "fake-engine.log",
    )  # fmt: skip
    gateways: list[Proc] = []
    r = aioredis.Redis.from_url(url)
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{base + o.replicas - 1}/health"), 60, "fake engines")
        keys = RedisKeys("llmgw")
        for i in range(o.replicas):
            rec = ReplicaRecord(id=f"sim-{i:02d}", model=MODEL, url=f"http://127.0.0.1:{base + i}",
                                concurrency=8, instance="i0")  # fmt: skip
            await publish(r, keys, rec, ttl_s=3600)
        fleet = tmp / "fleet.yaml"
        model = {"name": MODEL, "source": {"path": "/nonexistent"}, "policy": "prefix_affinity",
                 "max_queue": 4096, "max_queue_wait_s": 120}  # fmt: skip
        fleet.write_text(yaml.safe_dump({"models": [model]}))
        for g in range(o.gateways):
            port = free_port()
            env = {"LLMGW_FLEET_FILE": str(fleet), "LLMGW_REDIS_URL": url, "LLMGW_GATEWAY_ID": f"sim-gw-{g}",
                   "LLMGW_PREFIX_EPSILON": repr(o.epsilon), "LLMGW_HEALTH_INTERVAL_S": "5",
                   "LLMGW_LOG_LEVEL": "WARNING"}  # fmt: skip
            argv = [script("llmgw-gateway"), "--port", str(port)]
            gateways.append(spawn(argv, port, tmp / f"gateway-{g}.log", env))
        for gw in gateways:
            wait_until(lambda gw=gw: ready(gw.url, o.replicas), 60, f"gateway {gw.url}")  # type: ignore[misc]
        say(f"live: {o.gateways} gateways see {o.replicas} replicas; sending {len(reqs)} requests")
        before = await info(r)
        statuses = await send_all([gw.url for gw in gateways], reqs, o.concurrency)
        after = await info(r)
        async with httpx.AsyncClient() as http:
            served = [int((await http.get(f"http://127.0.0.1:{base + i}/stats")).json()["served"])
                      for i in range(o.replicas)]  # fmt: skip
            outcomes: Counter[str] = Counter()
            for gw in gateways:
                outcomes += pick_outcomes((await http.get(f"{gw.url}/metrics")).text)
    finally:
        await r.aclose()
        for gw in gateways:
            gw.stop()
        engine.stop()
        redis_proc.stop()
    n = len(reqs)
    calls = after[0] - before[0]
    calls.pop("info", None)
    shares = [s / max(1, sum(served)) for s in served]
    return {
        "requests": n,
        "statuses": {str(k): v for k, v in statuses.items()},
        "shares_min_max": [min(shares), max(shares)],
        "hotspot": o.replicas * max(shares),
        "outcomes": dict(outcomes),
        "redis_commands_per_request_all": sum(calls.values()) / n,
        "commands": dict(calls.most_common(12)),
        "bytes_in_per_request_all": (after[1] - before[1]) / n,
        "bytes_out_per_request_all": (after[2] - before[2]) / n,
    }


def ready(url: str, want: int, model: str = MODEL) -> bool:
    """True once the gateway at ``url`` sees ``want`` ready replicas of ``model``."""
    try:
        detail = httpx.get(f"{url}/ready", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return False
    return bool(detail.get("models", {}).get(model, {}).get("ready_replicas", 0) >= want)


def pick_outcomes(text: str, metric: str = "llmgw_prefix_index_picks_total{") -> Counter[str]:
    """A gateway's ``metric`` (the prefix index's picks by default), summed by its ``outcome`` label."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith(metric):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            out[outcome] += int(float(line.rsplit(" ", 1)[1]))
    return out


async def send_all(urls: Sequence[str], reqs: Sequence[Req], concurrency: int) -> Counter[int]:
    statuses: Counter[int] = Counter()
    queue: asyncio.Queue[tuple[int, Req]] = asyncio.Queue()
    for item in enumerate(reqs):
        queue.put_nowait(item)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:

        async def worker() -> None:
            while not queue.empty():
                i, req = queue.get_nowait()
                body = {**req.payload, "max_tokens": 4, "stream": True}
                try:
                    async with http.stream(
                        "POST", f"{urls[i % len(urls)]}/v1/chat/completions", json=body
                    ) as resp:
                        await resp.aread()
                        statuses[resp.status_code] += 1
                except httpx.HTTPError:
                    statuses[0] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def parse(argv: list[str]) -> SimOptions:
    d = SimOptions()
    p = argparse.ArgumentParser(
        prog="bench.routing --simulate", description=__doc__.split("\n")[0] if __doc__ else ""
    )
    p.add_argument("--replicas", type=int, default=d.replicas)
    p.add_argument("--sim-gateways", type=int, default=d.gateways)
    p.add_argument("--users", type=int, default=d.users)
    p.add_argument("--turns", type=int, default=d.turns)
    p.add_argument("--docs", type=int, default=d.docs)
    p.add_argument("--questions", type=int, default=d.questions)
    p.add_argument("--concurrency", type=int, default=d.concurrency)
    p.add_argument("--kv-tokens", type=int, default=d.kv_tokens)
    p.add_argument("--no-live", action="store_true", help="the replay only")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out", type=Path, default=d.out)
    a = p.parse_args(argv)
    return SimOptions(
        replicas=a.replicas,
        gateways=a.sim_gateways,
        users=a.users,
        turns=a.turns,
        docs=a.docs,
        questions=a.questions,
        concurrency=a.concurrency,
        kv_tokens=a.kv_tokens,
        seed=a.seed,
        live=not a.no_live,
        out=a.out,
    )


async def simulate(o: SimOptions) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="llmgw-sim-") as d:
        tmp = Path(d)
        say(f"replay: {o.replicas} replicas, {o.gateways} gateways")
        result: dict[str, Any] = {
            "setup": {k: str(v) for k, v in vars(o).items()},
            "replay": await replay(o, tmp),
        }
        if o.live:
            result["live"] = await live(o, tmp)
    return result


def main(argv: list[str] | None = None) -> int:
    o = parse(sys.argv[1:] if argv is None else argv)
    result = asyncio.run(simulate(o))
    print(json.dumps(result, indent=2))
    o.out.parent.mkdir(parents=True, exist_ok=True)
    o.out.write_text(json.dumps(result, indent=2) + "\n")
    say(f"written to {o.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
