"""The faults of `make faults`, one function each: it strikes the running stack while the load runs, waits
for the fault to end (a frozen process thawed, a killed one started again), and returns what it did,
noting in :class:`Strike` what the checkers need (logs cut at a kill, processes it killed itself, the end
of a Redis outage, a gateway killed, extra outcomes of its own requests)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import httpx

from bench.faults.checks import ANSWERED, stalled_total
from bench.faults.ctx import DOWN_S, PAUSE_S, Ctx, freeze, prompt_request, replica_urls, set_knob
from bench.faults.inject_client import client_cut_retry
from bench.faults.inject_redis import redis_hup, redis_kill9, redis_pause_all, sentinel_failover
from bench.faults.stack import (
    CRASH_PROMPT,
    RESET_PROMPT,
    STREAM_WRITE_TIMEOUT_S,
    metrics_text,
    registry_whole,
)
from bench.faults.workload import CHAT, ON_DEMAND, Request, mix, send, slow_read, slow_uploads
from llmgw_tools.stack.stack import Stack
from testing.poll import until
from workers.life.adopt import pid_alive

# ---- replicas (engines) -------------------------------------------------------------------------


async def engine_signal(c: Ctx, sig: int) -> str:
    rid, pid = c.replica_pids()[0]
    died = await c.kill_replica(rid, pid, sig)
    fate = "died; the supervisor restarts it" if died else "lives on"
    return f"replica {rid} (pid {pid}) {signal.Signals(sig).name}: {fate}"


async def engine_kill9(c: Ctx) -> str:
    return await engine_signal(c, signal.SIGKILL)


async def engine_hup(c: Ctx) -> str:
    return await engine_signal(c, signal.SIGHUP)


async def engine_stop(c: Ctx) -> str:
    rid, pid = c.replica_pids()[0]
    await freeze([pid], PAUSE_S)
    return f"replica {rid} SIGSTOP for {PAUSE_S:g} s, then SIGCONT"


async def crash_on_prompt(c: Ctx) -> str:
    """A non-streamed chat whose prompt crashes the replica that takes it (after it received it)."""
    before = dict(c.replica_pids())
    out = await prompt_request(c, CRASH_PROMPT, mix(8)[0])
    after = dict(c.replica_pids())
    crashed = [r for r, p in before.items() if after.get(r) != p or not pid_alive(p)]
    return f"a prompt that crashes its replica: {out.outcome} {out.detail}; replicas crashed: {crashed}"


async def reset_after_write(c: Ctx) -> str:
    """Requests whose replica closes the connection once it received them: two rounds of six kinds (a
    non-streamed chat, a stream before its first token, Responses, Messages, an embedding, a rerank),
    0.3 s apart so that the gateways' pooled connections are idle and reused, as between real requests."""
    kinds = [
        r for r in mix(8) if r.kind in ("chat", "chat-stream", "responses", "messages", "embedding", "rerank")
    ]
    outs = []
    for r in kinds * 2:
        outs.append(await prompt_request(c, RESET_PROMPT, r))
        await asyncio.sleep(0.3)
    ends = Counter(o.outcome for o in outs)
    return f"{len(outs)} requests whose connection closed once received: " + ", ".join(
        f"{n} {k}" for k, n in ends.most_common()
    )


async def slow_health(c: Ctx) -> str:
    """One replica busy for 8 s, as a loaded CPU replica is: its /health answers 2.5 s late and each
    generation waits 2 s for its first token (within the gateways' 5 s first-byte timeout); then at once
    again. It serves throughout: no request may fail."""
    url = replica_urls(c)[0]
    await set_knob([url], "/fault/health-delay?ms=2500")
    await set_knob([url], "/fault/latency?ms=2000")
    try:
        await asyncio.sleep(8.0)
    finally:
        await set_knob([url], "/fault/health-delay?ms=0")
        await set_knob([url], "/fault/latency?ms=0")
    return f"{url} busy for 8 s: /health 2.5 s late, first tokens 2 s late"


async def reset_before_write(c: Ctx) -> str:
    """Every chat replica closes keep-alive connections idle for 100 ms, for 6 s (as uvicorn's keep-alive
    timeout does, sooner): a gateway that reuses one finds it closed before its request was written."""
    urls = replica_urls(c)
    await set_knob(urls, "/fault/idle-close?ms=100")
    try:
        await asyncio.sleep(6.0)
    finally:
        await set_knob(urls, "/fault/idle-close?ms=0")
    return f"{len(urls)} replicas closed keep-alive connections idle 100 ms, for 6 s"


# ---- gateways ------------------------------------------------------------------------------------


async def gateway_kill9(c: Ctx) -> str:
    """gateway-1 killed -9, started again under the same id 2 s later; how long until it answers."""
    c.strike.gateway_killed = True
    note = await c.service_signal("gateway-1", signal.SIGKILL, restart_after_s=DOWN_S)
    return f"{note}; first answer through it {await first_answer(c, 0):.1f} s after its start"


async def first_answer(c: Ctx, gateway: int, deadline_s: float = 60.0) -> float:
    """Seconds until a chat request straight to the gateway is answered (tried again after each failure)."""
    url = f"http://{c.stack.config.host}:{c.stack.config.gateway_ports[gateway]}"
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=deadline_s) as client:
        while time.monotonic() - started < deadline_s:
            out = await send(client, url, mix(8)[0], c.load.next_id(), c.load.tenants[0])
            c.strike.outcomes.append(out)
            if out.outcome == ANSWERED:
                break
            await asyncio.sleep(0.2)
    return time.monotonic() - started


async def gateway_stop(c: Ctx) -> str:
    svc = c.stack.service("gateway-1")
    assert svc.pid is not None
    await freeze([svc.pid], PAUSE_S)
    return f"gateway-1 SIGSTOP for {PAUSE_S:g} s, then SIGCONT"


async def gateway_hup(c: Ctx) -> str:
    return await c.service_signal("gateway-1", signal.SIGHUP)


async def slow_upload(c: Ctx) -> str:
    """16 uploads without a key, straight to a gateway (nginx would absorb them), 1 KiB a second."""
    port = c.stack.config.gateway_ports[0]
    outs = await slow_uploads(f"http://{c.stack.config.host}:{port}", 16, deadline_s=15.0)
    c.strike.outcomes += outs
    return "16 slow uploads without a key to gateway-1: " + ", ".join(sorted({o.outcome for o in outs}))


async def slow_reader(c: Ctx) -> str:
    """A stream of 65536 tokens (the chat replicas' events 1 ms apart and 4 KiB each meanwhile: megabytes
    a second, past loopback's autotuned socket buffers, about 3 MB, within seconds), straight to
    gateway-1 (nginx would buffer it and has its own send timeout), read 256 bytes every 0.25 s from a
    4 KiB receive buffer: 1 KiB/s, under ``stream_min_rate_bytes_s``, never enough to drain the
    gateway's write buffer. The gateway must end it within a few ``stream_write_timeout_s`` and count
    it as stalled (the client reads on until then: what the gateway's socket already holds reaches it
    after the drop), close its upstream (the engine aborts the generation) and give its lease back (the
    capacity checker)."""
    urls, port = replica_urls(c), c.stack.config.gateway_ports[0]
    stream = {"model": CHAT, "messages": [{"role": "user", "content": "Go on."}], "max_tokens": 65536,
              "stream": True}  # fmt: skip
    rid = c.load.next_id()
    c.strike.stalled.append(rid)
    await set_knob(urls, "/fault/delay?ms=1")
    await set_knob(urls, "/fault/event-bytes?n=4096")
    try:
        url, deadline = f"http://{c.stack.config.host}:{port}", 5.0 * STREAM_WRITE_TIMEOUT_S
        metrics = [f"{url}/metrics"]
        before = stalled_total(await metrics_text(metrics))

        async def ended() -> bool:
            return stalled_total(await metrics_text(metrics)) > before

        out = await slow_read(url, Request("slow-reader", "/v1/chat/completions", stream, True), rid,
                              c.load.tenants[0], ended, deadline)  # fmt: skip
    finally:
        await set_knob(urls, "/fault/delay?ms=0")
        await set_knob(urls, "/fault/event-bytes?n=0")
    c.strike.outcomes.append(out)
    return f"a slow reader (1 KiB/s) of a long stream to gateway-1: {out.outcome}, {out.detail}"


# ---- the supervisor -------------------------------------------------------------------------------


async def supervisor_kill9(c: Ctx) -> str:
    return await c.service_signal("workers", signal.SIGKILL, restart_after_s=1.0)


async def supervisor_stop(c: Ctx) -> str:
    svc = c.stack.service("workers")
    assert svc.pid is not None
    await freeze([svc.pid], PAUSE_S)
    return f"supervisor SIGSTOP for {PAUSE_S:g} s, then SIGCONT"


async def supervisor_hup(c: Ctx) -> str:
    return await c.service_signal("workers", signal.SIGHUP)


async def supervisor_dies_in_start(c: Ctx) -> str:
    """A replica killed -9; the moment the supervisor starts its successor, the supervisor is killed -9
    (its half-started replica is in no state file yet), then started again."""
    rid, pid = c.replica_pids()[0]
    log = c.stack.logs / "workers.log"
    mark = log.stat().st_size
    await c.kill_replica(rid, pid)

    def starting() -> bool:
        with log.open("rb") as f:
            f.seek(mark)
            return f"replica={rid} starting".encode() in f.read()

    await until(starting, 15.0, f"{rid} starting again", interval_s=0.02)
    note = await c.service_signal("workers", signal.SIGKILL, restart_after_s=1.0)
    return f"replica {rid} killed -9; supervisor killed -9 while it started it again; {note}"


async def supervisor_dies_in_wake(c: Ctx) -> str:
    """A request for the asleep on-demand model; the moment the supervisor starts its replica, the
    supervisor is killed -9, then started again. The request must end (answer or clear error) within the
    model's wake timeout, and the replica must not be left behind."""
    log = c.stack.logs / "workers.log"
    mark = log.stat().st_size
    req = Request("wake", "/v1/chat/completions", {**mix(8)[0].body, "model": ON_DEMAND}, False)
    waiter = asyncio.create_task(prompt_request(c, "wake up", req))

    def starting() -> bool:
        with log.open("rb") as f:
            f.seek(mark)
            return f"replica={ON_DEMAND}-0 waking".encode() in f.read()

    await until(starting, 15.0, f"{ON_DEMAND} waking", interval_s=0.02)
    note = await c.service_signal("workers", signal.SIGKILL, restart_after_s=1.0)
    out = await waiter
    return (
        f"wake of {ON_DEMAND}; supervisor killed -9 while it started it: {note}; the request: {out.outcome}"
    )


async def no_fault(c: Ctx) -> str:
    return "no fault (the load alone)"


Fault = Callable[[Ctx], Awaitable[str]]
FAULTS: dict[str, Fault] = {
    "none": no_fault,
    "kill9-engine": engine_kill9,
    "stop-engine": engine_stop,
    "hup-engine": engine_hup,
    "crash-on-prompt": crash_on_prompt,
    "reset-after-write": reset_after_write,
    "reset-before-write": reset_before_write,
    "slow-health": slow_health,
    "kill9-gateway": gateway_kill9,
    "stop-gateway": gateway_stop,
    "hup-gateway": gateway_hup,
    "slow-upload": slow_upload,
    "slow-reader": slow_reader,
    "client-cut-retry": client_cut_retry,
    "kill9-supervisor": supervisor_kill9,
    "stop-supervisor": supervisor_stop,
    "hup-supervisor": supervisor_hup,
    "supervisor-dies-in-start": supervisor_dies_in_start,
    "supervisor-dies-in-wake": supervisor_dies_in_wake,
    "kill9-redis": redis_kill9,
    "pause-redis": redis_pause_all,
    "hup-redis": redis_hup,
    "sentinel-failover": sentinel_failover,
}
REDIS_FAULTS = frozenset({"kill9-redis", "pause-redis", "hup-redis", "sentinel-failover"})
NOT_YET: dict[str, str] = {}
"""Faults not injected yet, with why (none today)."""


def not_injected(fault: str, topology: str) -> str:
    """Why ``fault`` is not injected on ``topology`` ('' when it is)."""
    if fault == "sentinel-failover" and topology != "sentinel":
        return "Sentinel topology only"
    return NOT_YET.get(fault, "")


async def back_to_strength(stack: Stack, deadline_s: float = 60.0) -> None:
    """Every service alive (one that died is started again) and the fleet whole again."""
    for svc in list(stack.services):
        if not svc.alive:
            await stack.restart(svc.name)
    await until(lambda: registry_whole(stack), deadline_s, "the registry whole again", interval_s=0.25)
