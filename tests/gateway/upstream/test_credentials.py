"""Credentials per endpoint: each external endpoint gets the key the fleet file names for it (from an
environment variable or a file) or none (``auth: none``), never the workers' key, which goes only to the
supervised replicas. Loopback servers record every header they receive (health checks, metrics
scrapes, the model list and requests alike)."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import free_port, start_fake_engine

WORKERS_KEY = "workers-key-" + "w" * 20
ENV_KEY = "endpoint-env-key-" + "e" * 16
FILE_KEY = "endpoint-file-key-" + "f" * 16
COMPLETION = {
    "id": "x",
    "object": "chat.completion",
    "model": "ext",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


@dataclass
class Recorder:
    """A loopback server that answers like a vLLM replica and records (method, path, authorization)."""

    port: int = field(default_factory=free_port)
    seen: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = dict(ln.split(": ", 1) for ln in lines[1:] if ": " in ln)
                headers = {k.lower(): v for k, v in headers.items()}
                await reader.readexactly(int(headers.get("content-length", "0")))
                self.seen.append((method, path, headers.get("authorization", "")))
                body = b""
                if path == "/v1/models":
                    body = json.dumps({"data": [{"id": "ext", "max_model_len": 512}]}).encode()
                elif method == "POST":
                    body = json.dumps(COMPLETION).encode()
                ctype = b"text/plain" if path == "/metrics" else b"application/json"
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: " + ctype
                    + f"\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body
                )  # fmt: skip
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_each_endpoint_gets_its_own_key_and_never_the_workers(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXT_ENDPOINT_KEY", ENV_KEY)
    key_file = tmp_path / "endpoint.key"
    key_file.write_text(FILE_KEY + "\n")
    by_env, by_file, open_one = Recorder(), Recorder(), Recorder()
    servers = [await asyncio.start_server(r.handle, "127.0.0.1", r.port) for r in (by_env, by_file, open_one)]
    supervised = start_fake_engine(tmp_path, "--model", "sup", "--api-key", WORKERS_KEY)
    prefix = f"cr{uuid.uuid4().hex[:8]}"
    fleet = fleet_yaml(
        [
            {"name": "sup", "source": {"path": "/x"}},
            {
                "name": "ext",
                "policy": "round_robin",
                "migration": False,  # the recorder answers plain completions, without token ids
                "endpoints": [
                    {"url": by_env.url, "api_key_env": "EXT_ENDPOINT_KEY"},
                    {"url": by_file.url, "api_key_file": str(key_file)},
                    {"url": open_one.url, "auth": "none"},
                ],
            },
        ]
    )
    try:
        await register(redis_url, prefix, "sup", supervised.url, "sup-0")
        async with (
            serve_gateway(tmp_path, fleet, redis_url, prefix, vllm_api_key=WORKERS_KEY) as gw,
            httpx.AsyncClient(timeout=10) as c,
        ):
            for model in ("ext", "ext", "ext", "sup"):
                chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
                r = await c.post(f"{gw}/v1/chat/completions", json=chat)
                assert r.status_code == 200, r.text

            def every_kind_seen() -> bool:
                paths = {(m, p) for rec in (by_env, by_file, open_one) for m, p, _ in rec.seen}
                wanted = {("GET", "/health"), ("GET", "/metrics"), ("GET", "/v1/models")}
                return wanted <= paths

            await until(every_kind_seen, 10, "health checks, scrapes and the model list on the endpoints")
            stats = (await c.get(f"{supervised.url}/stats")).json()
    finally:
        supervised.stop()
        for s in servers:
            s.close()
    assert {a for _, _, a in by_env.seen} == {f"Bearer {ENV_KEY}"}
    assert {a for _, _, a in by_file.seen} == {f"Bearer {FILE_KEY}"}
    assert {a for _, _, a in open_one.seen} == {""}
    assert all(("POST", "/v1/chat/completions") in {(m, p) for m, p, _ in r.seen} for r in (by_env, by_file))
    assert (
        stats["last_headers"]["authorization"] == f"Bearer {WORKERS_KEY}"
    )  # the supervised one: the workers'
    assert stats["get_authorization"] == f"Bearer {WORKERS_KEY}"


def test_a_missing_endpoint_key_is_a_clear_error_at_load(tmp_path: Path) -> None:
    from gateway.upstream.credentials import CredentialError, Credentials
    from llmgw_contract.fleet import parse_fleet

    fleet = parse_fleet(
        "models:\n - name: e\n   endpoints: [{url: 'http://h:1', api_key_env: NOPE_NOT_SET}]\n"
    )
    with pytest.raises(CredentialError, match="NOPE_NOT_SET"):
        Credentials(fleet, WORKERS_KEY)
    fleet = parse_fleet(
        f"models:\n - name: e\n   endpoints: [{{url: 'http://h:1', api_key_file: {tmp_path}/k}}]\n"
    )
    with pytest.raises(CredentialError, match="cannot read"):
        Credentials(fleet, WORKERS_KEY)
