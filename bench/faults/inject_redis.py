"""The Redis faults of `make faults`: kill -9 (one server: started again empty; Sentinel and Cluster: the
master of the registry's key, started again as it was), a pause of every data node, SIGHUP, and a Sentinel
failover. Each notes when the outage ended: the registry must be whole within 10 s of it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from bench.faults.ctx import DOWN_S, PAUSE_S, Ctx, freeze
from bench.faults.workload import CHAT
from llmgw_contract.redis_keys import RedisKeys
from llmgw_tools.stack.redis_topology import SERVICE, Node, cli
from testing.poll import until


async def redis_kill9(c: Ctx) -> str:
    """single: kill -9, started again empty after 2 s; Sentinel and Cluster: the master of the chat
    model's registry key killed -9 (the others fail over), started again as it was 2 s later."""
    topo = c.stack.topology
    if topo is None:
        note = await c.service_signal("redis", signal.SIGKILL, restart_after_s=DOWN_S)
    else:
        port = topo.master_port(RedisKeys().registry(CHAT))
        node = topo.node(port)
        node.kill(signal.SIGKILL)
        await asyncio.sleep(DOWN_S)
        restart_node(node)
        note = f"master {port} killed -9, started again after {DOWN_S:g} s"
    c.strike.outage_end = time.monotonic()
    return note


def restart_node(node: Node) -> None:
    """The same redis-server command line again, in its own folder (it rejoins as it was configured)."""
    argv = [str(a) for a in node.popen.args]  # type: ignore[union-attr]
    folder = Path(argv[argv.index("--dir") + 1]) if "--dir" in argv else Path.cwd()
    with (folder / "redis.log").open("ab") as out:
        node.popen = subprocess.Popen(
            argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True, cwd=folder
        )


async def redis_pause_all(c: Ctx) -> str:
    """Every data node SIGSTOPped for 4 s at once (a whole-cluster pause; single: the one server)."""
    if c.stack.topology is None:
        svc = c.stack.service("redis")
        assert svc.pid is not None
        pids = [svc.pid]
    else:
        pids = [n.popen.pid for n in c.redis_nodes()]
    await freeze(pids, PAUSE_S)
    c.strike.outage_end = time.monotonic()
    return f"{len(pids)} Redis data node(s) SIGSTOP for {PAUSE_S:g} s, then SIGCONT"


async def redis_hup(c: Ctx) -> str:
    if c.stack.topology is None:
        note = await c.service_signal("redis", signal.SIGHUP)
    else:
        for n in c.redis_nodes():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(n.popen.pid, signal.SIGHUP)
        note = "SIGHUP to every Redis data node"
    c.strike.outage_end = time.monotonic()
    return note


async def sentinel_failover(c: Ctx) -> str:
    topo = c.stack.topology
    assert topo is not None
    sentinel = next(n.port for n in topo.nodes if n.role == "sentinel")
    before = topo.master_port()
    cli(sentinel, "SENTINEL", "FAILOVER", SERVICE)
    with contextlib.suppress(AssertionError):
        await until(lambda: topo.master_port() != before, 20.0, "failover", interval_s=0.2)
    c.strike.outage_end = time.monotonic()
    return f"SENTINEL FAILOVER: master {before} -> {topo.master_port()}"
