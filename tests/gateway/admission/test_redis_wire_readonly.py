"""A lean connection to a server that became a read-only replica (a Sentinel failover demoted it) is
closed at its first READONLY reply, so that the next call opens a fresh one (to the master named then);
the call gets the error. Against a real redis-server started as a replica (of a master that is not there:
it still refuses every write)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.admission.redis_wire import Endpoint, PipelinedRedis, RedisReplyError
from testing.procs import Proc, start_redis


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_redis(tmp_path_factory.mktemp("replica-redis"), extra=["--replicaof", "127.0.0.1", "1"])
    yield proc
    proc.stop()


async def test_a_readonly_reply_closes_the_connection_and_the_next_call_opens_another(replica: Proc) -> None:
    lean = PipelinedRedis(Endpoint("127.0.0.1", replica.port), 2.0)
    try:
        assert await lean.call("GET", "readonly-wire") is None  # reads are answered
        first = lean.socket()
        with pytest.raises(RedisReplyError, match="READONLY"):
            await lean.call("SET", "readonly-wire", "x")
        assert not lean.healthy  # closed at the READONLY reply
        assert await lean.call("GET", "readonly-wire") is None
        assert lean.healthy and lean.socket() is not first
    finally:
        lean.close()
