"""Load scraping: vLLM's gauges parsed from a real-looking /metrics page."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.metrics import GatewayMetrics
from gateway.replicas.ejection import Ejection
from gateway.replicas.monitor import Monitor
from gateway.replicas.table import Endpoint, ReplicaTable
from gateway.routing.base import PolicyOptions
from gateway.routing.prefix.affinity import PrefixAffinity
from gateway.routing.prefix.index import capacity_keys
from llmgw_contract.registry import ReplicaRecord, ReplicaState
from testing.procs import running, start_fake_engine


def test_load_counts_other_gateways_through_vllm_as_of_the_scrape() -> None:
    ep = Endpoint(ReplicaRecord(id="r", model="m", url="http://x"))
    # scraped: 3 running + 2 waiting there, 1 of them ours -> 4 are the other gateways'
    ep.inflight, ep.running, ep.waiting, ep.inflight_at_scrape = 1, 3, 2, 1
    assert (ep.others, ep.load) == (4, 1 + 4 + 2)
    ep.inflight = 4  # we sent three more since: our own count is fresh
    assert ep.load == 4 + 4 + 2
    ep.inflight = 0  # ours finished: the others' part stays as scraped
    assert ep.load == 0 + 4 + 2


def test_others_never_go_below_zero() -> None:
    ep = Endpoint(ReplicaRecord(id="r", model="m", url="http://x"))
    ep.inflight, ep.running, ep.waiting, ep.inflight_at_scrape = 2, 1, 0, 3  # vLLM had not counted ours yet
    assert (ep.others, ep.load) == (0, 2)


async def test_a_scrape_records_our_own_count_with_the_gauges(tmp_path: Path) -> None:
    """Against the FAKE ENGINE (a real HTTP server; its /metrics has vLLM's gauge names)."""
    with running(start_fake_engine(tmp_path)) as engine:
        ep = Endpoint(ReplicaRecord(id="r", model="m", url=engine.url))
        ep.inflight, ep.running, ep.waiting = 2, 9, 9
        async with httpx.AsyncClient() as client:
            await Monitor(client, ReplicaTable(["m"]), Ejection(), GatewayMetrics()).scrape(ep)
    assert (ep.running, ep.waiting, ep.inflight_at_scrape) == (0, 0, 2)
    assert (ep.others, ep.load) == (0, 2)  # nothing of ours reached it, and nobody else's either


async def test_a_replicas_cache_size_is_the_engines_own_in_both_index_modes(tmp_path: Path) -> None:
    """The FAKE ENGINE reports ``vllm:cache_config_info`` as vLLM does (100 blocks of 16 tokens): the scrape
    gives the replica its size, and the prefix index sizes an approximate replica's LRU from it (not from
    the ``kv_tokens`` default); an exact replica's entries follow its events, so no cache size enters."""
    with running(start_fake_engine(tmp_path, "--kv-blocks", "100")) as engine:
        ep = Endpoint(ReplicaRecord(id="r", model="m", url=engine.url, concurrency=4))
        async with httpx.AsyncClient() as client:
            await Monitor(client, ReplicaTable(["m"]), Ejection(), GatewayMetrics()).scrape(ep)
    assert ep.kv_tokens == 100 * 16
    options = PolicyOptions(chunk_bytes=512, max_chunks=64, kv_tokens=65536, bytes_per_token=8)
    policy = PrefixAffinity(options)
    assert policy.view(ep).capacity == capacity_keys(1600, 512, 8) == 25  # 1600 tokens x 8 bytes / 512
    assert not policy.view(ep).exact
    exact = Endpoint(ep.record.model_copy(update={"kv_index": "exact"}))
    exact.kv_tokens = ep.kv_tokens
    assert policy.view(exact).exact and policy.view(exact).capacity == 4 * 64  # the pending placements
    unscraped = Endpoint(ep.record)
    assert policy.view(unscraped).capacity == capacity_keys(65536, 512, 8)  # only until the first scrape


async def test_a_draining_replica_with_requests_in_flight_is_still_scraped(tmp_path: Path) -> None:
    """Its scrapes are the stall evidence of the streams still on it (gateway/replicas/progress.py); an
    idle draining one is left alone."""
    with running(start_fake_engine(tmp_path)) as engine:
        table = ReplicaTable(["m"])
        busy, idle = (
            ReplicaRecord(id=i, model="m", url=engine.url, state=ReplicaState.DRAINING) for i in ("a", "b")
        )
        table.sync("m", [busy, idle])
        with_work, without = table.pool("m").endpoints
        with_work.inflight = 1
        async with httpx.AsyncClient() as client:
            await Monitor(client, table, Ejection(), GatewayMetrics()).load_tick()
    assert with_work.progress.scraped_at > 0 and without.progress.scraped_at == 0
