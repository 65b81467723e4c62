"""The registration sidecar's heartbeat through a whole Redis Cluster outage (every node frozen for 4 s,
longer than a record lives): it must outlive the outage and the registry be whole again within 10 s of its
end. The sidecar runs in this process (its client with 0.5 s timeouts: redis-py's cluster client then
raises its own ``RedisClusterUnreachableError`` within the pause) over the FAKE ENGINE."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from llmgw_contract.registry import RegistryWriter, ReplicaRecord
from llmgw_contract.replica_metrics import SupervisorMetrics
from llmgw_contract.sidecar import Options, Sidecar, Watched
from llmgw_contract.vllm_probe import probe_client
from testing.poll import until
from testing.procs import start_fake_engine
from tests.conftest import Topologies
from tests.workers.test_registry_outage import TIMING, WHOLE_WITHIN_S, expiry, outage, settle

MODEL = "fake-chat"


async def test_the_sidecars_heartbeat_outlives_a_whole_cluster_pause_and_refills_the_registry(
    tmp_path: Path, topologies: Topologies
) -> None:
    topo = topologies.get("cluster")
    engine = start_fake_engine(tmp_path, "--model", MODEL)
    redis = connect(topo.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    reader = connect(topo.url, socket_timeout=1.0, socket_connect_timeout=1.0)
    keys = RedisKeys(f"sco{uuid.uuid4().hex[:6]}")
    record = ReplicaRecord(id=f"{MODEL}-pod-1", model=MODEL, url=engine.url)

    async def published() -> int | None:
        return await expiry(reader, keys, MODEL, record.id)

    async with probe_client() as client:
        registry = RegistryWriter(redis, keys, TIMING)
        reg = Sidecar([Watched(record)], registry, client, SupervisorMetrics(), Options(TIMING))
        beat = asyncio.create_task(reg.heartbeat())
        try:
            await until(published, 10, "record published")
            ended = await outage(topo)
            first = await until(published, WHOLE_WITHIN_S, "the registry whole again after the outage")
            assert time.monotonic() - ended <= WHOLE_WITHIN_S
            assert isinstance(first, int)

            async def written_again() -> bool:  # the heartbeat lives on (a record lasts 3 s without it)
                later = await published()
                return later is not None and later > first + 1500

            await until(written_again, 3 * TIMING.ttl_s, "the record written again after the outage")
            assert not beat.done()
        finally:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
            await redis.aclose()
            await reader.aclose()
            engine.stop()
            await asyncio.to_thread(settle, topo)
