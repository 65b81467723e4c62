"""What a stream with an ``Idempotency-Key`` costs beside one without (issue 46: "a keyed stream's Redis cost
per event is measured and bounded (batched writes)").

One ``llmgw-gateway`` process (admission on, its defaults) on a private one-server Redis, in front of one
FAKE ENGINE replica (testing/fake_engine.py, not a model) that streams ``--tokens`` chunks per answer
``--chunk-ms`` apart. ``--streams`` streamed chat completions run ``--concurrency`` at a time, first
without a key, then each with its own ``Idempotency-Key``, then without a key again (the gateway warmed
the same way for both). Per row: Redis commands, top-level script calls, bytes in and Redis CPU per
stream and per relayed SSE event (read from INFO before and after, net of nothing: the gateway's periodic
beats are in both rows alike), and the gateway process's CPU per stream. The keyed row's Redis
figures minus the plain row's are what the key costs; ratios are to the plain rows' mean.

    .venv/bin/python -m bench.keyed_stream_cost                   # 200 streams of 64 events, 8 at a time
    .venv/bin/python -m bench.keyed_stream_cost --streams 20      # the short form's size

tests/bench/test_keyed_stream_cost.py runs a short form and checks that every stream ended with
``[DONE]`` and that a keyed stream's Redis commands stay bounded by its batches, not its events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import yaml

from bench.hotpath import tree_cpu_s
from bench.redis_capacity import Sample, sample
from bench.redis_capacity_http import answers
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import ReplicaRecord, publish
from llmgw_tools.stack.ports import free_port
from llmgw_tools.stack.redis_topology import Topology, start
from testing.poll import wait_until
from testing.procs import Proc, spawn

MODEL = "cap-model-0"
GATEWAY_BIN = str(Path(sys.executable).parent / "llmgw-gateway")


@dataclass(frozen=True)
class Row:
    """One load's figures, per stream and per relayed event."""

    name: str
    streams: int
    events: int
    incomplete: int
    redis: Sample
    gateway_cpu_s: float
    seconds: float

    def per_stream(self, value: float) -> float:
        return value / max(1, self.streams)

    def per_event(self, value: float) -> float:
        return value / max(1, self.events)


def start_engine(tmp: Path, tokens: int, chunk_ms: float) -> Proc:
    port = free_port()
    argv = [sys.executable, "-m", "testing.fake_engine", "--port", str(port), "--model", MODEL]
    proc = spawn([*argv, "--tokens", str(tokens), "--delay-ms", str(chunk_ms)], port, tmp / "engine.log")
    wait_until(answers(f"{proc.url}/health"), 20, "the FAKE ENGINE")
    return proc


def start_gateway(tmp: Path, topo: Topology) -> Proc:
    fleet = tmp / "fleet.yaml"
    model = {"name": MODEL, "source": {"path": "/nonexistent"}, "concurrency": 256, "max_queue": 4096}
    fleet.write_text(yaml.safe_dump({"models": [model]}))
    env = {
        "LLMGW_FLEET_FILE": str(fleet),
        "LLMGW_REDIS_URL": topo.url,
        "LLMGW_REDIS_PREFIX": "cap",
        "LLMGW_LOG_LEVEL": "WARNING",
    }
    port = free_port()
    gw = spawn([GATEWAY_BIN, "--port", str(port), "--gateway-id", "keyed-g0"], port, tmp / "gateway.log", env)
    wait_until(answers(f"{gw.url}/ready"), 60, "the gateway")
    return gw


async def one_stream(client: httpx.AsyncClient, url: str, keyed: bool, tokens: int) -> tuple[int, bool]:
    """One streamed chat completion: the SSE events it got, and whether it ended with ``[DONE]``."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "count"}], "max_tokens": tokens,
            "stream": True}  # fmt: skip
    headers = {"Idempotency-Key": uuid.uuid4().hex} if keyed else {}
    events, done = 0, False
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                events += 1
                done = line == "data: [DONE]"
    return events, done


async def load(url: str, streams: int, concurrency: int, keyed: bool, tokens: int) -> tuple[int, int]:
    """``streams`` streams, ``concurrency`` at a time: the events relayed, and the streams not ended."""
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=60.0) as client:

        async def limited() -> tuple[int, bool]:
            async with gate:
                return await one_stream(client, url, keyed, tokens)

        got = await asyncio.gather(*(limited() for _ in range(streams)))
    return sum(e for e, _ in got), sum(1 for _, done in got if not done)


async def measured(name: str, topo: Topology, gw: Proc, args: argparse.Namespace, keyed: bool) -> Row:
    before, cpu, began = await sample(topo.data_ports), tree_cpu_s(gw.popen.pid), time.monotonic()
    events, incomplete = await load(gw.url, args.streams, args.concurrency, keyed, args.tokens)
    took = time.monotonic() - began
    spent = (await sample(topo.data_ports)).minus(before)
    return Row(name, args.streams, events, incomplete, spent, tree_cpu_s(gw.popen.pid) - cpu, took)


async def bench(args: argparse.Namespace, tmp: Path) -> list[Row]:
    topo = start("single", tmp / "redis")
    engine = gw = None
    try:
        engine = start_engine(tmp, args.tokens, args.chunk_ms)
        await register_one(topo.url, engine)
        gw = start_gateway(tmp, topo)
        await load(gw.url, args.concurrency * 2, args.concurrency, True, args.tokens)  # warm: scripts, pools
        rows = [await measured("plain", topo, gw, args, keyed=False)]
        rows.append(await measured("keyed", topo, gw, args, keyed=True))
        rows.append(await measured("plain again", topo, gw, args, keyed=False))
        return rows
    finally:
        for proc in (gw, engine):
            if proc is not None:
                proc.stop()
        topo.stop()


async def register_one(url: str, engine: Proc) -> None:
    """The FAKE ENGINE as the model's one replica in the registry, as the supervisor would publish it."""
    redis = connect(url, socket_timeout=5.0)
    try:
        rec = ReplicaRecord(id=f"{MODEL}-0", model=MODEL, url=engine.url, concurrency=256)
        await publish(redis, RedisKeys("cap"), rec, 3600)
    finally:
        await redis.aclose()


def report(rows: list[Row]) -> str:
    plain = [r for r in rows if r.name != "keyed"]
    base_cmds = sum(r.per_stream(r.redis.calls) for r in plain) / len(plain)
    base_cpu = sum(r.per_stream(r.redis.cpu_master_s) for r in plain) / len(plain)
    base_gw = sum(r.per_stream(r.gateway_cpu_s) for r in plain) / len(plain)
    lines = [
        "row          streams events/stream not-ended | Redis per stream: cmds scripts bytes-in CPU us"
        " | per event: cmds CPU us | gateway CPU ms/stream (x plain)"
    ]
    for r in rows:
        lines.append(
            f"{r.name:12s} {r.streams:7d} {r.per_stream(r.events):13.1f} {r.incomplete:9d} |"
            f" {r.per_stream(r.redis.calls):21.1f} {r.per_stream(r.redis.scripts):7.2f}"
            f" {r.per_stream(r.redis.bytes_in):8.0f} {r.per_stream(r.redis.cpu_master_s) * 1e6:6.0f} |"
            f" {r.per_event(r.redis.calls):14.3f} {r.per_event(r.redis.cpu_master_s) * 1e6:6.1f} |"
            f" {r.per_stream(r.gateway_cpu_s) * 1e3:8.3f} (x{r.per_stream(r.gateway_cpu_s) / base_gw:.2f})"
        )
    keyed = next(r for r in rows if r.name == "keyed")
    extra_cmds = keyed.per_stream(keyed.redis.calls) - base_cmds
    extra_us = (keyed.per_stream(keyed.redis.cpu_master_s) - base_cpu) * 1e6
    events = keyed.per_stream(keyed.events)
    lines.append(
        f"the key costs per stream: {extra_cmds:+.1f} Redis commands ({extra_cmds / events:+.3f} per event),"
        f" {extra_us:+.0f} us of Redis CPU ({extra_us / events:+.2f} us per event)"
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64, help="chunks per answer")
    p.add_argument("--chunk-ms", type=float, default=2.0, help="the FAKE ENGINE's time per chunk")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="keyed-cost-") as tmp:
        rows = asyncio.run(bench(args, Path(tmp)))
    print(report(rows))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
