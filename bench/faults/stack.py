"""The fault suite's stack: the embedded stack (llmgw_tools/stack/stack.py) on free ports with keys on, its
Redis one server, Sentinel or Cluster, the supervisor's replicas FAKE ENGINE processes
(testing/fake_workers.py, not a model: each logs every generation by request id and crashes or closes on the
suite's prompts), two gateways behind real nginx; tenants with keys and limits in the key store; and what the
checkers read after a fault: the replicas' logs, Redis' keys, the metrics, the processes of the run."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import yaml

from bench.faults.checks import KeyState, ProcInfo, inflight_count
from bench.faults.workload import CHAT, EMBED, ON_DEMAND
from bench.fleet_scenarios import FakeWorkersStack
from gateway.auth.keys import ApiKey, KeyStore, new_secret
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import ReplicaState, read_registry
from llmgw_tools.stack.stack import Stack, StackConfig

CRASH_PROMPT, RESET_PROMPT = "FAULTS-CRASH-ON-THIS", "FAULTS-RESET-ON-THIS"
MARKER = "LLMGW_FAULTS_RUN"
"""Set in the driver's environment for the run: every process the run starts inherits it (orphan scan)."""
STREAM_WRITE_TIMEOUT_S = 3
"""The gateways' stream write timeout (30 s shipped): a slow reader is dropped within seconds."""
# The gateways' timeouts lowered so that a frozen replica or Redis outlasts them within a short cell, and
# a slow reader is dropped within one (the load's clients read at once: never near the write timeout).
GATEWAY_ENV = {"LLMGW_AUTH": "true", "LLMGW_FIRST_BYTE_TIMEOUT_S": "5", "LLMGW_CHUNK_TIMEOUT_S": "5",
               "LLMGW_STREAM_WRITE_TIMEOUT_S": str(STREAM_WRITE_TIMEOUT_S),
               "LLMGW_LOG_LEVEL": "WARNING"}  # fmt: skip
# A replica that fails every start gives up soon; everything else is the shipped supervisor.
WORKERS_ARGS = ("--restart-give-up-after", "5", "--restart-max-delay", "1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fleet(base_port: int, delay_ms: int, tokens: int) -> dict[str, Any]:
    """Two FAKE ENGINE replicas of a generating model (tools on), two of a pooling one, and an on-demand
    model (asleep until a request wakes it; back to sleep 3 s after)."""
    faults = ["--enable-log-requests", "--exit-on-prompt", CRASH_PROMPT, "--crash-on", RESET_PROMPT]
    flags = [*faults, "--delay-ms", str(delay_ms), "--tokens", str(tokens)]
    chat = {"name": CHAT, "source": {"path": f"/{CHAT}"}, "replicas": 2, "concurrency": 4,
            "max_queue": 64, "max_queue_wait_s": 10,
            "engine": {"tool_call_parser": "hermes", "extra_args": flags}}  # fmt: skip
    embed = {"name": EMBED, "source": {"path": f"/{EMBED}"}, "replicas": 2, "concurrency": 4,
             "engine": {"runner": "pooling", "extra_args": faults}}  # fmt: skip
    lazy = {"name": ON_DEMAND, "source": {"path": f"/{ON_DEMAND}"}, "activation": "on_demand",
            "idle_timeout_s": 3, "wake_timeout_s": 15,
            "engine": {"extra_args": ["--enable-log-requests"]}}  # fmt: skip
    return {"defaults": {"device": "cpu", "base_port": base_port}, "models": [chat, embed, lazy]}


def config(run_dir: Path, fleet_file: Path, topology: str) -> StackConfig:
    return StackConfig(
        fleet_file=fleet_file, run_dir=run_dir, redis_port=free_port(), redis_topology=topology,
        keys_redis_port=free_port(), gateway_ports=(free_port(), free_port()), nginx_port=free_port(),
        prometheus_port=0, supervisor_metrics_port=free_port(), ready_deadline_s=120, drain_grace_s=3,
        gateway_env=GATEWAY_ENV, workers_args=WORKERS_ARGS,
    )  # fmt: skip


def make_stack(tmp: Path, topology: str, base_port: int, delay_ms: int = 20, tokens: int = 16) -> Stack:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet(base_port, delay_ms, tokens)))
    return FakeWorkersStack(config(tmp / "run", path, topology))


async def tenants(stack: Stack) -> list[dict[str, str]]:
    """Three tenants' keys: one without limits, one of a higher priority, one with a low rpm (its 429s
    are clear errors); each as the Authorization header it sends."""
    redis = aioredis.Redis.from_url(stack.config.keys_redis_url)
    out = []
    try:
        for key in (ApiKey("", "t-free"), ApiKey("", "t-prio", priority=1), ApiKey("", "t-limited", rpm=60)):
            key_id, secret = new_secret()
            await KeyStore(redis, RedisKeys()).create(dataclasses.replace(key, key_id=key_id), secret)
            out.append({"authorization": f"Bearer {secret}"})
    finally:
        await redis.aclose()
    return out


async def registry_whole(stack: Stack) -> bool:
    """Every replica of every ``always`` model READY in the registry (read afresh: any topology)."""
    redis = connect(stack.redis_url, socket_timeout=1.0)
    try:
        recs = await read_registry(redis, RedisKeys())
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await redis.aclose()
    want = {m.name: m.replicas for m in stack.fleet.models if not m.on_demand}
    ready = [r.model for r in recs if r.state is ReplicaState.READY]
    return all(ready.count(m) >= n for m, n in want.items())


async def key_states(stack: Stack) -> list[KeyState]:
    """The admission, in-flight and rate-limit keys of the state Redis, as the capacity checker reads them."""
    redis = connect(stack.redis_url, socket_timeout=2.0)
    out = []
    try:
        async for raw in redis.scan_iter(match="llmgw:*", count=500):
            key = raw.decode() if isinstance(raw, bytes) else raw
            if ":adm:" not in key and ":inflight:" not in key and ":rate:" not in key:
                continue
            raw_kind = await redis.type(key)
            kind = raw_kind.decode() if isinstance(raw_kind, bytes) else str(raw_kind)
            size, total = 0, 0.0
            if kind == "zset":
                size = int(await redis.zcard(key))
            elif kind == "list":
                size = int(await redis.llen(key))
            elif kind == "hash":
                values = [v.decode() if isinstance(v, bytes) else str(v) for v in await redis.hvals(key)]
                size = len(values)
                total = float(sum(inflight_count(v) for v in values)) if ":inflight:" in key else 0.0
            out.append(KeyState(key, kind, size, float(await redis.ttl(key)), total))
    finally:
        await redis.aclose()
    return out


async def metrics_texts(urls: list[str]) -> list[str]:
    """The Prometheus text of each of ``urls``, in their order ('' for an unreachable one)."""
    texts = []
    async with httpx.AsyncClient(timeout=3.0) as client:
        for url in urls:
            text = ""
            with contextlib.suppress(httpx.HTTPError):
                text = (await client.get(url)).text
            texts.append(text)
    return texts


async def metrics_text(urls: list[str]) -> str:
    """The Prometheus texts of ``urls`` joined (an unreachable one adds nothing)."""
    return "\n".join(t for t in await metrics_texts(urls) if t)


def metrics_urls(stack: Stack) -> list[str]:
    c = stack.config
    return [f"http://{c.host}:{p}/metrics" for p in c.gateway_ports] + [
        f"http://{c.host}:{c.supervisor_metrics_port}/metrics"
    ]


def run_processes(marker: str) -> list[ProcInfo]:
    """Every live process whose environment carries ``MARKER=marker`` (the run's own)."""
    out = []
    needle = f"{MARKER}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            if rest[0] == "Z":
                continue
            out.append(ProcInfo(int(entry.name), int(rest[1]), name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def descendants_of(pid: int, procs: list[ProcInfo]) -> set[int]:
    """``pid`` and every process of ``procs`` below it."""
    out, grew = {pid}, True
    while grew:
        grew = False
        for p in procs:
            if p.ppid in out and p.pid not in out:
                out.add(p.pid)
                grew = True
    return out
