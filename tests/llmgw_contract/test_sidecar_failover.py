"""The registration sidecar's heartbeat through a Sentinel failover (``SENTINEL FAILOVER``: the old master
stays up until the Sentinels demote it, up to 10 s later): its record on the new master is written again
within 2 s of the Sentinels naming it. The sidecar runs in this process over the FAKE ENGINE."""

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
from llmgw_tools.stack.redis_topology import poll
from testing.poll import until
from testing.procs import start_fake_engine
from tests.conftest import Topologies
from tests.workers.test_registry_failover import TIMING, WRITTEN_WITHIN_S, expiry_on, failover

MODEL = "fake-chat"


async def test_the_sidecar_writes_to_the_new_master_as_soon_as_the_sentinels_name_it(
    tmp_path: Path, topologies: Topologies
) -> None:
    topo = topologies.get("sentinel")
    engine = start_fake_engine(tmp_path, "--model", MODEL)
    redis = connect(topo.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    keys = RedisKeys(f"sfo{uuid.uuid4().hex[:6]}")
    record = ReplicaRecord(id=f"{MODEL}-pod-1", model=MODEL, url=engine.url)

    async with probe_client() as client:
        registry = RegistryWriter(redis, keys, TIMING)
        reg = Sidecar([Watched(record)], registry, client, SupervisorMetrics(), Options(TIMING))
        beat = asyncio.create_task(reg.heartbeat())
        try:
            await until(lambda: expiry_on(topo.master_port(), keys, MODEL, record.id), 10, "published")
            new = await asyncio.to_thread(failover, topo)
            named = time.monotonic()
            first = await expiry_on(new, keys, MODEL, record.id) or 0

            async def written_again() -> bool:
                later = await expiry_on(new, keys, MODEL, record.id)
                return later is not None and later > first + 500

            await until(written_again, 12, "the record written again on the new master")
            took = time.monotonic() - named
            assert took <= WRITTEN_WITHIN_S, f"written to the new master {took:.1f} s after the failover"
            assert not beat.done()
        finally:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
            await redis.aclose()
            engine.stop()
            await asyncio.to_thread(poll, topo.settled, 30, "sentinel settled after the failover")
