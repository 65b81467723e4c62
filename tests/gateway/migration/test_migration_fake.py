"""Mid-stream migration through a real gateway in front of FAKE ENGINE replicas (token ids, faults that
strike after N tokens): each trigger continues the stream token-exact on the other replica; each request
that cannot move keeps today's end (the SSE error event). A non-streamed request that may move continues
the same way and is answered whole; one that cannot move runs again whole."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, remove
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import Proc, start_fake_engine

N = 12
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": N}
UNDISTURBED = "".join(f"tok{i} " for i in range(N))
FAULTS = {
    "die": "die-after-4",
    "die_mid": "die-mid-4",
    "error": "error-after-4",
    "garbage": "garbage-after-4",
    "stall": "stall-after-4",
}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    tmp = tmp_path_factory.mktemp("engines")
    procs = {name: start_fake_engine(tmp, "--fault", fault) for name, fault in FAULTS.items()}
    procs["good"] = start_fake_engine(tmp)
    procs["die2"] = start_fake_engine(tmp, "--fault", "die-after-2")
    procs["hang"] = start_fake_engine(tmp, "--fault", "hang")
    procs["mb_die"] = start_fake_engine(tmp, "--multibyte", "--fault", "die-after-4")
    procs["mb_good"] = start_fake_engine(tmp, "--multibyte")
    procs["paced"] = start_fake_engine(tmp, "--delay-ms", "40", "--split-tail")  # each event its own read
    yield procs
    for p in procs.values():
        p.stop()


@contextlib.asynccontextmanager
async def gateway(
    tmp: Path, redis_url: str, urls: list[str], model: dict[str, Any] | None = None, **settings: Any
) -> AsyncIterator[tuple[str, str]]:
    """A gateway whose first stream goes to ``urls[0]`` (round robin over ids in order)."""
    prefix = f"mig{uuid.uuid4().hex[:8]}"
    for i, url in enumerate(urls):
        await register(redis_url, prefix, "m", url, f"m-{i}")
    fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}, "policy": "round_robin", **(model or {})}])
    async with serve_gateway(tmp, fleet, redis_url, prefix, health_interval_s=60, **settings) as gw:
        yield gw, prefix


def frames(text: str) -> list[dict[str, Any]]:
    events = [e.removeprefix("data: ") for e in text.strip().split("\n\n")]
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    return [json.loads(e) for e in events[:-1]]


def content(parsed: list[dict[str, Any]]) -> str:
    return "".join(
        c.get("delta", {}).get("content") or c.get("text") or "" for f in parsed for c in f["choices"]
    )


def assert_one_whole_stream(parsed: list[dict[str, Any]], n: int = N) -> None:
    """Same id and created throughout, no error, one finish_reason (on the last token frame), no ids."""
    assert not [f for f in parsed if "error" in f]
    assert len({f["id"] for f in parsed}) == 1 and len({f["created"] for f in parsed}) == 1
    finishes = [c["finish_reason"] for f in parsed for c in f["choices"] if c.get("finish_reason")]
    assert finishes == ["length"]
    for f in parsed:
        assert "prompt_token_ids" not in f or f["prompt_token_ids"] is None
        assert all(c.get("token_ids") is None for c in f["choices"])


async def leave(redis_url: str, prefix: str, url: str) -> None:
    """The first replica (m-0) leaves the registry."""
    redis = aioredis.Redis.from_url(redis_url)
    await remove(redis, RedisKeys(prefix), ReplicaRecord(id="m-0", model="m", url=url))
    await redis.aclose()


async def metric(c: httpx.AsyncClient, gw: str, line: str) -> bool:
    return line in (await c.get(f"{gw}/metrics")).text


async def stream(c: httpx.AsyncClient, gw: str, body: dict[str, Any], path: str = "chat/completions") -> str:
    r = await c.post(f"{gw}/v1/{path}", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    return r.text


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_each_trigger_continues_token_exact(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = {"migration_stall_s": 0.5} if fault == "stall" else {}
    caplog.set_level(logging.WARNING, "llmgw.migration")
    async with gateway(tmp_path, redis_url, [engines[fault].url, engines["good"].url], **settings) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            body = {**CHAT, "stream_options": {"include_usage": True}}
            parsed = frames(await stream(c, gw, body))
            assert await metric(c, gw, 'llmgw_migrations_total{model="m",outcome="continued"} 1.0')
            assert await metric(c, gw, 'llmgw_migration_stall_seconds_count{model="m"} 1.0')
            assert await metric(c, gw, 'llmgw_stream_errors_total{model="m"}') is False
    assert content(parsed) == UNDISTURBED
    assert_one_whole_stream(parsed)
    usage = [f["usage"] for f in parsed if f.get("usage")]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == N
    assert usage[0]["total_tokens"] == usage[0]["prompt_tokens"] + N
    moved = [r.getMessage() for r in caplog.records if "migration moved" in r.getMessage()]
    assert len(moved) == 1 and "from=m-0 to=m-1 offset=4" in moved[0] and "request_id=" in moved[0]


@pytest.mark.parametrize("include_usage", [False, True])
async def test_a_paced_stream_ends_with_done_whether_or_not_the_client_asked_for_usage(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], include_usage: bool
) -> None:
    # the gateway asks for usage itself; when the client did not, the usage event is dropped, and a read
    # that held only it must not end the stream before [DONE] (it did: 38 cut streams in the real e2e)
    async with gateway(tmp_path, redis_url, [engines["paced"].url, engines["good"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            body = {**CHAT, "stream_options": {"include_usage": True}} if include_usage else CHAT
            parsed = frames(await stream(c, gw, body))  # [DONE] once, last
    assert content(parsed) == UNDISTURBED
    assert_one_whole_stream(parsed)
    assert len([f for f in parsed if f.get("usage")]) == int(include_usage)


async def test_completion_continues_in_its_own_shape(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["die"].url, engines["good"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            parsed = frames(
                await stream(c, gw, {"model": "m", "prompt": "hi", "max_tokens": N}, "completions")
            )
            seen = (await c.get(f"{engines['good'].url}/stats")).json()["last_headers"]["x-request-id"]
    assert seen.endswith("-move1")  # vLLM's id of the continuation: one generation, continued
    assert content(parsed) == UNDISTURBED and {f["object"] for f in parsed} == {"text_completion"}
    assert_one_whole_stream(parsed)


async def test_seam_inside_a_utf8_character(tmp_path: Path, redis_url: str, engines: dict[str, Proc]) -> None:
    # the replica dies after four tokens; the fourth ends inside a character: its text was held back,
    # so the continuation regenerates it and the text the client saw is not written twice
    async with httpx.AsyncClient(timeout=30) as c:
        direct = frames(await stream(c, engines["mb_good"].url, {**CHAT, "return_token_ids": True}))
        async with gateway(tmp_path, redis_url, [engines["mb_die"].url, engines["mb_good"].url]) as (gw, _):
            parsed = frames(await stream(c, gw, CHAT))
    assert "日" in content(direct) and content(parsed) == content(direct)
    assert_one_whole_stream(parsed)


async def test_replica_leaving_the_registry_moves_the_stream(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    urls = [engines["stall"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, migration_stall_s=30) as (gw, prefix):
        async with httpx.AsyncClient(timeout=30) as c:
            async with c.stream("POST", f"{gw}/v1/chat/completions", json={**CHAT, "stream": True}) as r:
                seen = b""
                async for part in r.aiter_bytes():
                    seen += part
                    if seen.count(b"\n\n") == 4:  # four tokens, then the replica freezes: it leaves
                        await leave(redis_url, prefix, urls[0])
    parsed = frames(seen.decode())
    assert content(parsed) == UNDISTURBED
    assert_one_whole_stream(parsed)


async def test_a_stall_with_nowhere_to_move_waits_the_chunk_timeout(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], caplog: pytest.LogCaptureFixture
) -> None:
    """The stream's watchdog: with no other replica, a frozen one is given today's chunk timeout (not
    the shorter migration stall), then the stream ends with the error event."""
    caplog.set_level(logging.WARNING, "llmgw.migration")
    settings = {"migration_stall_s": 0.2, "chunk_timeout_s": 1.5, "migration_watch_s": 0.1}
    async with gateway(tmp_path, redis_url, [engines["stall"].url], **settings) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            parsed = frames(await stream(c, gw, CHAT))
    assert parsed[-1]["error"]["code"] == "upstream_timeout"
    assert content(parsed[:-1]) == "".join(f"tok{i} " for i in range(4))
    failed = [r.getMessage() for r in caplog.records if "migration failed" in r.getMessage()]
    assert len(failed) == 1 and "no token from m-0 within 1.5 s" in failed[0]


async def test_attempts_exhausted_end_with_the_error_event(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    urls = [engines["die"].url, engines["die2"].url]
    async with gateway(tmp_path, redis_url, urls, {"migration_attempts": 1}) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            text = await stream(c, gw, CHAT)
            assert await metric(c, gw, 'llmgw_migrations_total{model="m",outcome="failed"} 1.0')
    parsed = frames(text)
    assert parsed[-1]["error"]["type"] == "upstream_error"
    assert content(parsed[:-1]) == "".join(f"tok{i} " for i in range(6))  # 4 there, 2 after one move


async def test_client_that_asks_for_token_ids_gets_them_across_the_seam(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["die"].url, engines["good"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            parsed = frames(await stream(c, gw, {**CHAT, "return_token_ids": True}))
    ids = [i for f in parsed for c in f["choices"] for i in c.get("token_ids") or []]
    assert ids == [100_000 + i for i in range(N)]


async def test_migration_off_forwards_the_body_untouched(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(
        tmp_path, redis_url, [engines["die"].url, engines["good"].url], {"migration": False}
    ) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            raw = json.dumps({**CHAT, "stream": True}).encode()
            r = await c.post(
                f"{gw}/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
            )
            sent = (await c.get(f"{engines['die'].url}/stats")).json()["last_body"]
    # the client's body, with only the usage ask every stream gets (gateway/pipeline/usage.py)
    assert json.loads(sent) == {**json.loads(raw), "stream_options": {"include_usage": True}}
    assert frames(r.text)[-1]["error"]["type"] == "upstream_error"


CANNOT_MOVE: list[tuple[str, str, dict[str, Any]]] = [
    ("n>1", "chat/completions", {"n": 2}),
    ("beam search", "completions", {"prompt": "hi", "use_beam_search": True}),
    ("logprobs", "chat/completions", {"logprobs": True, "top_logprobs": 2}),
    ("tool calls", "chat/completions", {"tools": [{"type": "function", "function": {"name": "f"}}]}),
    ("reasoning", "chat/completions", {"include_reasoning": True}),
    ("multimodal", "chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
    ("stop strings", "chat/completions", {"stop": ["\n"]}),
    ("structured output", "chat/completions", {"response_format": {"type": "json_object"}}),
    ("responses", "responses", {"input": "hi"}),
    ("messages", "messages", {"messages": [{"role": "user", "content": "hi"}]}),
    ("lora", "chat/completions", {"model": "m-lora"}),
]


@pytest.mark.parametrize(("case", "path", "extra"), CANNOT_MOVE, ids=[c[0] for c in CANNOT_MOVE])
async def test_what_cannot_move_keeps_the_error_event(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], case: str, path: str, extra: dict[str, Any]
) -> None:
    # a tool-call parser, so that the tools case reaches the replica (the gateway refuses tools without one)
    model = {"engine": {"lora_modules": {"m-lora": "/adapters/x"}, "tool_call_parser": "hermes"}}
    async with gateway(tmp_path, redis_url, [engines["die"].url, engines["good"].url], model) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            await c.get(f"{engines['good'].url}/stats/reset")
            body = {k: v for k, v in CHAT.items() if path == "chat/completions" or k != "messages"}
            text = await stream(c, gw, {**body, **extra}, path)
            sent = json.loads((await c.get(f"{engines['die'].url}/stats")).json()["last_body"])
            assert (await c.get(f"{engines['good'].url}/stats")).json()["started"] == 0
            assert await metric(c, gw, 'llmgw_migrations_total{model="m",outcome="not_movable"} 1.0')
    assert "return_token_ids" not in sent, case
    data = [line for e in text.strip().split("\n\n") for line in e.split("\n") if line.startswith("data: {")]
    last = data[-1]
    error = json.loads(last.removeprefix("data: "))
    if path == "messages":
        assert error["type"] == "error" and error["error"]["type"] == "api_error"
    else:
        assert error["error"]["type"] == "upstream_error"


WHOLE_BODIES = {
    "chat/completions": CHAT,
    "completions": {"model": "m", "prompt": "hi", "max_tokens": N},
}


async def undisturbed_whole(tmp: Path, redis_url: str, good: str, path: str, body: dict[str, Any]) -> Any:
    """The same non-streamed request through a gateway whose only replica does not fail."""
    async with gateway(tmp, redis_url, [good]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{gw}/v1/{path}", json=body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("path", sorted(WHOLE_BODIES))
async def test_non_streamed_request_continues_token_exact_and_is_answered_whole(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Sent upstream as a stream with token ids; its replica dies after 4 tokens: the generation continues
    on the other replica after those 4 tokens (vLLM id <id>-move1, a prompt of the prompt's ids + the 4
    generated ids, 8 tokens left: a continuation, not a second whole generation), and the client gets one
    whole answer: the text and usage of an undisturbed run, counted once."""
    body = WHOLE_BODIES[path]
    caplog.set_level(logging.WARNING, "llmgw.migration")
    reference = await undisturbed_whole(tmp_path, redis_url, engines["good"].url, path, body)
    async with gateway(tmp_path, redis_url, [engines["die"].url, engines["good"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            await c.get(f"{engines['good'].url}/stats/reset")
            r = await c.post(f"{gw}/v1/{path}", json=body)
            sent = json.loads((await c.get(f"{engines['die'].url}/stats")).json()["last_body"])
            good = (await c.get(f"{engines['good'].url}/stats")).json()
            assert await metric(c, gw, 'llmgw_migrations_total{model="m",outcome="continued"} 1.0')
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert sent == {
        **body,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    assert good["started"] == 1 and good["last_headers"]["x-request-id"].endswith("-move1")
    continued = json.loads(good["last_body"])
    assert continued["prompt"][-4:] == [100_000 + i for i in range(4)] and continued["max_tokens"] == N - 4
    answer = r.json()
    choice = answer["choices"][0]
    assert (choice["message"]["content"] if "message" in choice else choice["text"]) == UNDISTURBED
    assert list(answer) == list(reference) and list(choice) == list(reference["choices"][0])
    assert answer["object"] == reference["object"] and choice["finish_reason"] == "length"
    assert answer["usage"] == reference["usage"] == {
        "prompt_tokens": 8, "total_tokens": 8 + N, "completion_tokens": N,
        "prompt_tokens_details": None, "completion_tokens_details": None,
    }  # fmt: skip
    assert choice["token_ids"] is None and answer.get("prompt_token_ids") is None
    moved = [m.getMessage() for m in caplog.records if "migration moved" in m.getMessage()]
    assert len(moved) == 1 and "from=m-0 to=m-1 offset=4" in moved[0]


@pytest.mark.parametrize("fault", ["error", "garbage"])
async def test_a_non_streamed_answer_that_came_whole_with_a_bad_frame_continues(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc], fault: str
) -> None:
    """Its replica writes 4 tokens, an error (or a frame that is not JSON) and [DONE]: the whole body is
    there when its head is read, but not in the usual shape, so it is not assembled in one pass
    (gateway/migration/assemble.py ``at_once``): read the general way, it continues after the 4 tokens."""
    async with gateway(tmp_path, redis_url, [engines[fault].url, engines["good"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            assert await metric(c, gw, 'llmgw_migrations_total{model="m",outcome="continued"} 1.0')
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["choices"][0]["message"]["content"] == UNDISTURBED
    assert answer["usage"]["completion_tokens"] == N and answer["choices"][0]["finish_reason"] == "length"


async def test_a_non_streamed_answer_longer_than_what_is_read_unrecorded_is_whole(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """2,000 tokens (about 400 KB of frames, past gateway/pipeline/migrate.py ``WHOLE_READ``): what was
    read before the limit is recorded at once, the rest as it comes, and the answer is whole."""
    n = 2000
    async with gateway(tmp_path, redis_url, [engines["good"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json={**CHAT, "max_tokens": n})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["choices"][0]["message"]["content"] == "".join(f"tok{i} " for i in range(n))
    assert answer["usage"]["completion_tokens"] == n


async def test_non_streamed_answer_carries_token_ids_when_asked(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["die"].url, engines["good"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json={**CHAT, "return_token_ids": True})
    answer = r.json()
    assert answer["choices"][0]["token_ids"] == [100_000 + i for i in range(N)]
    assert len(answer["prompt_token_ids"]) == 8 and answer["usage"]["completion_tokens"] == N


async def test_non_streamed_request_on_a_frozen_replica_continues(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """No token within migration_stall_s: the generation moves after the 4 tokens it had."""
    urls = [engines["stall"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, migration_stall_s=0.5) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{gw}/v1/completions", json=WHOLE_BODIES["completions"])
            assert await metric(c, gw, 'llmgw_migrations_total{model="m",outcome="continued"} 1.0')
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == UNDISTURBED


async def test_non_streamed_request_that_cannot_move_is_not_run_again_when_its_connection_breaks(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """logprobs cannot cross a seam: forwarded untouched; when its replica closes the connection after
    the request was sent (it may have begun the generation), it is not run again elsewhere (at most one
    generation per request): a clear 502 that says not to retry."""
    body, rid = {**CHAT, "logprobs": True}, f"whole-{uuid.uuid4().hex[:8]}"
    async with gateway(tmp_path, redis_url, [engines["die"].url, engines["good"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json=body, headers={"x-request-id": rid})
            sent = json.loads((await c.get(f"{engines['die'].url}/stats")).json()["last_body"])
            elsewhere = (await c.get(f"{engines['good'].url}/stats")).json()["generations"]
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_error" and r.headers["x-should-retry"] == "false"
    assert sent == body  # untouched
    assert not [i for i in elsewhere if i.startswith(rid)]


async def test_migration_off_forwards_a_non_streamed_body_untouched(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["good"].url], {"migration": False}) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
            sent = json.loads((await c.get(f"{engines['good'].url}/stats")).json()["last_body"])
    assert r.status_code == 200 and sent == CHAT


async def test_non_streamed_request_on_a_replica_that_leaves_continues(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """A frozen replica taken out of the registry: the wait ends, the generation continues elsewhere."""
    urls = [engines["stall"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, migration_watch_s=0.1) as (gw, prefix):
        async with httpx.AsyncClient(timeout=30) as c:
            await c.get(f"{engines['stall'].url}/stats/reset")
            task = asyncio.create_task(c.post(f"{gw}/v1/chat/completions", json=CHAT))
            await until(lambda: _started(c, engines["stall"].url), 10, "the request at the frozen replica")
            await leave(redis_url, prefix, urls[0])
            r = await task
            assert await metric(c, gw, 'llmgw_migrations_total{model="m",outcome="continued"} 1.0')
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == UNDISTURBED


async def test_non_streamed_request_whose_replica_leaves_before_its_head_ends_with_a_clear_error(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    """A replica that took the request but sent no head leaves the registry: the wait ends at once (not
    at the 600 s deadline: the client's 30 s would end first) with a 502, and nothing is sent elsewhere
    (the replica may run it when it wakes: it would run twice)."""
    urls = [engines["hang"].url, engines["good"].url]
    async with gateway(tmp_path, redis_url, urls, request_timeout_s=600) as (gw, prefix):
        async with httpx.AsyncClient(timeout=30) as c:
            await c.get(f"{engines['hang'].url}/stats/reset")
            await c.get(f"{engines['good'].url}/stats/reset")
            task = asyncio.create_task(c.post(f"{gw}/v1/chat/completions", json=CHAT))
            await until(lambda: _started(c, engines["hang"].url), 10, "the request at the silent replica")
            await leave(redis_url, prefix, urls[0])
            r = await task
            elsewhere = (await c.get(f"{engines['good'].url}/stats")).json()["started"]
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_error"
    assert elsewhere == 0


async def _started(c: httpx.AsyncClient, url: str) -> bool:
    return bool((await c.get(f"{url}/stats")).json()["started"])


async def test_non_streamed_request_with_nowhere_to_move_is_a_502(
    tmp_path: Path, redis_url: str, engines: dict[str, Proc]
) -> None:
    async with gateway(tmp_path, redis_url, [engines["die"].url]) as (gw, _):
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{gw}/v1/chat/completions", json=CHAT)
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"
