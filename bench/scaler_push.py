"""From the first request waiting for a model at zero to llmgw-scaler's "active" push, over its gRPC stream.

The real scaler runs in its own process (``python -m workers.scale.cli``) on a private redis-server, with
a fleet of one model at ``min_replicas: 0``. Four FAKE gateways (four admission connections and gateway
ids, no HTTP) each write a waiter at capacity zero through the real admission script (``acquire.lua``),
all at once; the clock starts before the first write and stops when ``StreamIsActive`` pushes
``active``. The waiters then leave and the stream's ``inactive`` is awaited before the next trial; a random
pause of up to two polls before each trial spreads the first wait over the scaler's poll phase.

Usage: ``python -m bench.scaler_push [--trials 200] [--poll-s 0.1]``; prints p50/p99/max in ms. Exit status
1 when p99 is over 1 s (the issue's target).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc  # type: ignore[import-untyped]
import redis.asyncio as aioredis

from gateway.admission.base import Ticket
from gateway.admission.queue_scripts import Acquired, QueueScripts, ticket_id
from gateway.admission.redis_wire import PipelinedRedis
from llmgw_contract.redis_keys import RedisKeys
from testing.procs import free_port, running, spawn, start_redis, wait_for_line
from workers.scale.proto import externalscaler_pb2 as pb
from workers.scale.proto import externalscaler_pb2_grpc as stubs

MODEL = "cold"
FLEET = f"""models:
 - name: {MODEL}
   source: {{package: x}}
   activation: on_demand
   scaling: {{min_replicas: 0, max_replicas: 2}}
"""
TARGET_P99_S = 1.0


@dataclass(frozen=True)
class Options:
    trials: int = 200
    gateways: int = 4
    poll_s: float = 0.1


@dataclass(frozen=True)
class Result:
    latencies_s: list[float]

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    def line(self, o: Options) -> str:
        ms = [x * 1000 for x in (self.quantile(0.5), self.quantile(0.99), max(self.latencies_s))]
        return (
            f"first wait -> active push, {len(self.latencies_s)} trials, {o.gateways} gateways, "
            f"poll {o.poll_s * 1000:.0f} ms: p50 {ms[0]:.1f} ms, p99 {ms[1]:.1f} ms, max {ms[2]:.1f} ms "
            f"(mean {statistics.fmean(self.latencies_s) * 1000:.1f} ms)"
        )


async def trials(o: Options, redis_url: str, scaler_port: int) -> Result:
    redis = aioredis.Redis.from_url(redis_url)
    keys = RedisKeys()
    gateways = [QueueScripts(PipelinedRedis.like(redis, 2.0), keys, 30_000) for _ in range(o.gateways)]
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{scaler_port}")
    ref = pb.ScaledObjectRef(name="vllm-cold", namespace="bench", scalerMetadata={"model": MODEL})
    stream = stubs.ExternalScalerStub(channel).StreamIsActive(ref)
    latencies: list[float] = []
    try:
        assert (await asyncio.wait_for(stream.read(), 10)).result is False
        for n in range(o.trials):
            await asyncio.sleep(random.uniform(0, 2 * o.poll_s))
            tickets = [ticket_id(f"gw-{g}", f"t{n}") for g in range(o.gateways)]
            started = time.perf_counter()
            got = await asyncio.gather(
                *(
                    gw.acquire(Ticket(t, MODEL, "t", 0, 10, 30.0, 100), t, 0)
                    for gw, t in zip(gateways, tickets, strict=True)
                )
            )
            assert all(status is Acquired.QUEUED for status, _ in got), got
            assert (await asyncio.wait_for(stream.read(), 5)).result is True
            latencies.append(time.perf_counter() - started)
            for gw, t in zip(gateways, tickets, strict=True):
                await gw.leave(MODEL, t, keep=False, capacity=0)
            assert (await asyncio.wait_for(stream.read(), 5)).result is False
    finally:
        stream.cancel()
        await channel.close()
        await redis.aclose()
    return Result(latencies)


async def bench(o: Options) -> Result:
    """Start redis-server and llmgw-scaler in a scratch folder, run the trials, stop both."""
    with tempfile.TemporaryDirectory(prefix="scaler-push-") as scratch:
        tmp = Path(scratch)
        (tmp / "fleet.yaml").write_text(FLEET)
        with running(start_redis(tmp / "redis")) as redis_proc:
            redis_url = f"redis://127.0.0.1:{redis_proc.port}/0"
            port = free_port()
            argv = [
                sys.executable, "-m", "workers.scale.cli", "--fleet", str(tmp / "fleet.yaml"),
                "--redis-url", redis_url, "--listen", f"127.0.0.1:{port}", "--poll-s", str(o.poll_s),
            ]  # fmt: skip
            with running(spawn(argv, port, tmp / "scaler.log")) as scaler:
                wait_for_line(scaler, "serving KEDA's external scaler", 30, "llmgw-scaler")
                return await trials(o, redis_url, port)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trials", type=int, default=Options.trials)
    p.add_argument("--gateways", type=int, default=Options.gateways)
    p.add_argument("--poll-s", type=float, default=Options.poll_s)
    args = p.parse_args()
    o = Options(args.trials, args.gateways, args.poll_s)
    result = asyncio.run(bench(o))
    print(result.line(o))
    return 0 if result.quantile(0.99) <= TARGET_P99_S else 1


if __name__ == "__main__":
    sys.exit(main())
