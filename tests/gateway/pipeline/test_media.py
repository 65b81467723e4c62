"""Media URLs in a request (image, audio, video, file parts) never make a worker fetch an internal
address: one that resolves to a loopback, private, link-local, shared or metadata address is refused with
400 before anything is forwarded, unless its domain is one the operator allows (real gateway, FAKE ENGINE)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.pipeline.media import media_urls, refused_address
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.procs import Proc, start_fake_engine

FLEET = fleet_yaml([{"name": "m", "source": {"path": "/nonexistent"}}])
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("fake"))
    yield proc
    proc.stop()


def chat_with_image(url: str) -> dict[str, Any]:
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": "m", "messages": [{"role": "user", "content": parts}], "max_tokens": 2}


async def test_a_media_url_to_an_internal_address_is_refused(
    tmp_path: Path, redis_url: str, prefix: str, engine: Proc, http: httpx.AsyncClient
) -> None:
    """Defect 9: media URLs went to vLLM untouched (a worker fetched cloud metadata or cluster services)."""
    await register(redis_url, prefix, "m", engine.url, "m-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix, media_domains=["media.localhost"]) as gw:
        url = f"{gw}/v1/chat/completions"
        for bad in (
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:6379/",
            "http://localhost/x.png",
            "http://10.1.2.3/x.png",
            "file:///etc/passwd",
        ):
            r = await http.post(url, json=chat_with_image(bad))
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["error"]["code"] == "media_url_not_allowed"
        data = "data:image/png;base64,iVBORw0KGgo="
        assert (await http.post(url, json=chat_with_image(data))).status_code == 200
        allowed = "http://media.localhost/cat.png"  # the operator's domain passes (resolves to loopback)
        assert (await http.post(url, json=chat_with_image(allowed))).status_code == 200


def test_every_media_part_shape_is_seen() -> None:
    payload = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": "http://a/1"}]},
            {"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": "http://a/2"}}]},
            {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://a/3"}}]},
        ],
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://a/4"}]}],
    }
    assert sorted(media_urls(payload)) == ["http://a/1", "http://a/2", "http://a/3", "http://a/4"]


def test_internal_addresses_are_refused_public_ones_pass() -> None:
    v4 = (
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.100.100.200",
        "0.0.0.0",
    )
    for internal in (*v4, "0.0.0.0", "::1", "fd00:ec2::254", "fe80::1", "::ffff:127.0.0.1"):
        assert refused_address(internal), internal
    for public in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"):
        assert not refused_address(public), public


PRIVATE = "http://10.1.2.3/x.png"


def escaped(body: bytes) -> bytes:
    """The same JSON with every ``url`` of a key or value spelled ``\\u0075rl`` (a valid JSON escape)."""
    return body.replace(b"url", b"\\u0075rl")


async def test_a_media_url_behind_a_json_escape_is_refused(
    tmp_path: Path, redis_url: str, prefix: str, engine: Proc, http: httpx.AsyncClient
) -> None:
    """Finding 9: the check ran only when the raw body held the bytes ``url``; ``\\u0075rl`` passed."""
    await register(redis_url, prefix, "m", engine.url, "m-0")
    async with serve_gateway(tmp_path, FLEET, redis_url, prefix) as gw:
        body = escaped(orjson.dumps(chat_with_image(PRIVATE)))
        assert b"url" not in body
        r = await http.post(f"{gw}/v1/chat/completions", content=body, headers=JSON)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "media_url_not_allowed"


def image(url: str) -> dict[str, Any]:
    return {"content": [{"type": "image_url", "image_url": {"url": url}}]}


POOLING_FLEET = fleet_yaml(
    [{"name": "p", "source": {"path": "/nonexistent"}, "engine": {"runner": "pooling"}}]
)
SCORING = [
    ("/v1/score", {"model": "p", "text_1": "a cat", "text_2": image(PRIVATE)}),
    ("/score", {"model": "p", "data_1": "a cat", "data_2": [image(PRIVATE)]}),
    ("/v1/rerank", {"model": "p", "query": "a cat", "documents": image(PRIVATE)}),
    ("/rerank", {"model": "p", "query": image(PRIVATE), "documents": ["a cat"]}),
    ("/v1/embeddings", {"model": "p", "messages": [{"role": "user", **image(PRIVATE)}]}),
    ("/pooling", {"model": "p", "messages": [{"role": "user", **image(PRIVATE)}]}),
]


@pytest.mark.parametrize(("path", "payload"), SCORING, ids=[p for p, _ in SCORING])
async def test_media_urls_of_scoring_and_pooling_apis_are_checked(
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    engine: Proc,
    http: httpx.AsyncClient,
    path: str,
    payload: dict[str, Any],
) -> None:
    """Finding 9: only ``messages`` and ``input`` were looked at; score and rerank take media in other
    fields (vLLM's multimodal scoring), which reached the worker unchecked."""
    await register(redis_url, prefix, "p", engine.url, "p-0")
    async with serve_gateway(tmp_path, POOLING_FLEET, redis_url, prefix) as gw:
        r = await http.post(f"{gw}{path}", json=payload)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "media_url_not_allowed"


def test_media_urls_are_found_in_every_field() -> None:
    payload = {
        "model": "m",
        "text_1": "a",
        "text_2": {"content": [{"type": "image_url", "image_url": {"url": "http://a/1"}}]},
        "documents": [{"content": [{"type": "video_url", "video_url": {"url": "http://a/2"}}]}],
        "queries": [{"content": [{"type": "input_image", "image_url": "http://a/3"}]}],
    }
    assert sorted(media_urls(payload)) == ["http://a/1", "http://a/2", "http://a/3"]
