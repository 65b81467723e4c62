"""What one request's admission costs Redis when nobody waits, counted by a real Redis (INFO commandstats):
the acquire grants at once with reads and one write (the lease), the release is one write and one read;
the presence stamp is written only when missing or lapsed (the renewing thread keeps it)."""

from __future__ import annotations

from collections import Counter

import redis.asyncio as aioredis

from gateway.admission.base import Ticket
from gateway.admission.redis_queue import Acquired, QueueScripts
from llmgw_contract.redis_keys import RedisKeys

MODEL = "m"
WRITES = {"zadd", "zrem", "hset", "zremrangebyscore", "zpopmin", "rpush", "pexpire", "incr", "del", "set"}


async def calls(redis: aioredis.Redis) -> Counter[str]:
    stats = await redis.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


async def test_a_request_nobody_waits_behind_writes_its_lease_twice_only(
    scripts: QueueScripts, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    ticket = Ticket("r", MODEL, "t", 0, 10, 30.0, 100)
    assert (await scripts.acquire(ticket, "gw:first", 4))[0] is Acquired.GRANTED  # stamps gw present
    assert await redis.hget(keys.alive(MODEL), "gw") is not None
    await scripts.release(MODEL, "gw:first", 4)  # both scripts loaded
    before = await calls(redis)
    assert (await scripts.acquire(ticket, "gw:second", 4))[0] is Acquired.GRANTED
    await scripts.release(MODEL, "gw:second", 4)
    spent = await calls(redis) - before
    spent.pop("info", None)
    writes = {name: n for name, n in spent.items() if name in WRITES}
    assert writes == {"zadd": 1, "zrem": 1}, spent
    assert spent["evalsha"] == 2 and not spent["eval"], spent
    assert sum(spent.values()) - 2 == 8, spent  # acquire 6 commands, release 2
