"""The restart of a replica that died (workers/life/restart.py) runs the one rule of
:class:`RestartBackoff` (the delays of llmgw_contract/backoff.py, the count of consecutive failures and its
reset after a healthy run, the give-up), through the real owner on a FAKE PROCESS replica and a real Redis."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaState
from testing.fake_process import FakeProcess
from testing.poll import until
from testing.procs import free_port
from workers.life.owner import Replica, RestartBackoff, Supervisor, SupervisorOptions
from workers.replica.launch import Launch, ReplicaSpec

S = ReplicaState


async def test_restarts_count_reset_and_give_up_by_the_restart_backoff_rule(
    redis_url: str, tmp_path: Path
) -> None:
    rule: list[tuple[int, bool, int]] = []
    delays: list[int] = []

    class Recorded(RestartBackoff):
        """The policy as configured, each use of its rule recorded."""

        def consecutive_after(self, consecutive: int, ran_s: float) -> int:
            after = super().consecutive_after(consecutive, ran_s)
            rule.append((consecutive, ran_s >= self.healthy_after_s, after))
            return after

        def delay(self, consecutive: int) -> float:
            delays.append(consecutive)
            return super().delay(consecutive)

    policy = Recorded(base_s=0.01, max_s=0.04, healthy_after_s=30, give_up_after=3)
    timing = RegistryTiming(ttl_s=5, drain_settle_s=0.0, drain_grace_s=0.0)
    options = SupervisorOptions(ready_deadline_s=1, timing=timing, backoff=policy, max_start_attempts=1)
    model = parse_fleet("models:\n - name: m\n   source: {path: /m}\n").models[0]
    r = Replica(ReplicaSpec(model, 0, free_port(), (0,)), Launch(["fake"]), tmp_path)
    process = FakeProcess(r.process.launch, r.process.log_file, iter(range(10_000_000, 10_001_000)))
    r.process = process
    redis = aioredis.Redis.from_url(redis_url)
    async with httpx.AsyncClient(verify=False) as client:
        registry = RegistryWriter(redis, RedisKeys(f"rs{uuid.uuid4().hex[:6]}"), timing)
        sup = Supervisor([], registry, client, options)
        try:
            assert await sup.start(r)
            for n in (1, 2):  # two quick deaths: 1, 2 in a row
                process.die()
                await until(lambda n=n: r.restarts == n and r.state is S.READY)  # type: ignore[misc]
            r.started_at -= 60  # it then ran longer than healthy_after_s: the count starts again
            process.die()
            await until(lambda: r.restarts == 3 and r.state is S.READY)
            process.fail_starts = 10  # then every restart fails: 2, 3, and past 3 it gives up
            process.die()
            await until(lambda: r.state is S.FAILED)
        finally:
            await sup.drain()
            await redis.aclose()
    assert rule == [(0, False, 1), (1, False, 2), (2, True, 1), (1, False, 2), (2, False, 3), (3, False, 4)]
    assert delays == [1, 2, 1, 2, 3] and r.restarts == 5
    assert "it died and 3 restarts in a row failed" in r.detail
