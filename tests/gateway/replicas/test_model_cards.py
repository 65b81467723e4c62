"""/v1/models and /v1/models/{id} say what the replicas say of each model: max_model_len, and for an
adapter its parent and root; an alias carries its target's (FAKE ENGINE replica; the default fleet's
real models: tests/e2e/test_edge_contract_live.py)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from gateway.replicas.model_cards import ModelCards
from testing.gateway import fleet_yaml, register, serve_gateway
from testing.poll import until
from testing.procs import free_port, start_fake_engine


async def test_models_carry_the_replicas_max_model_len_parent_and_root(
    tmp_path: Path, redis_url: str
) -> None:
    engine = start_fake_engine(tmp_path, "--model", "m", "--max-model-len", "4096")
    prefix = f"mc{uuid.uuid4().hex[:8]}"
    try:
        async with httpx.AsyncClient(timeout=10) as c:
            load = {"lora_name": "ad1", "lora_path": "/adapters/ad1"}
            assert (await c.post(f"{engine.url}/v1/load_lora_adapter", json=load)).status_code == 200
            await register(redis_url, prefix, "m", engine.url, "m-0")
            model = {"name": "m", "aliases": ["m-alias"], "source": {"path": "/x"}}
            fleet = fleet_yaml([{**model, "engine": {"lora_modules": {"ad1": "/adapters/ad1"}}}])
            async with serve_gateway(tmp_path, fleet, redis_url, prefix) as gw:

                async def listed() -> dict[str, dict[str, object]]:
                    data = (await c.get(f"{gw}/v1/models")).json()["data"]
                    entries = {e["id"]: e for e in data}
                    return entries if all("max_model_len" in e for e in entries.values()) else {}

                entries = await until(listed, 10, "max_model_len in /v1/models")
                one = (await c.get(f"{gw}/v1/models/m-alias")).json()
                adapter = (await c.get(f"{gw}/v1/models/ad1")).json()
    finally:
        engine.stop()
    assert isinstance(entries, dict)
    assert {k: v["max_model_len"] for k, v in entries.items()} == {"m": 4096, "m-alias": 4096, "ad1": 4096}
    assert one["max_model_len"] == 4096 and one["root"] == "m" and one["parent"] is None
    assert adapter["parent"] == "m" and adapter["root"] == "/adapters/ad1"


async def test_cards_are_learned_from_another_replica_when_the_first_does_not_answer(
    tmp_path: Path, redis_url: str
) -> None:
    """The model's first replica (by id) is registered but refuses connections (killed, not yet out of the
    registry): the card is read from the next routable replica instead of waiting for the first."""
    engine = start_fake_engine(tmp_path, "--model", "m", "--max-model-len", "4096")
    prefix = f"mc{uuid.uuid4().hex[:8]}"
    try:
        await register(redis_url, prefix, "m", f"http://127.0.0.1:{free_port()}", "m-0")
        await register(redis_url, prefix, "m", engine.url, "m-1")
        fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}}])
        async with (
            serve_gateway(tmp_path, fleet, redis_url, prefix) as gw,
            httpx.AsyncClient(timeout=10) as c,
        ):

            async def learned() -> object:
                return (await c.get(f"{gw}/v1/models/m")).json().get("max_model_len")

            assert await until(learned, 10, "max_model_len of m from its answering replica") == 4096
    finally:
        engine.stop()


async def test_cards_are_learned_again_when_the_replica_they_came_from_is_replaced(
    tmp_path: Path, redis_url: str
) -> None:
    """A fleet change that restarts the model with another context length (a new instance under the
    same id): the gateway's /v1/models follows the new replica's own answer."""
    old = start_fake_engine(tmp_path, "--model", "m", "--max-model-len", "4096")
    new = start_fake_engine(tmp_path, "--model", "m", "--max-model-len", "8192")
    prefix = f"mc{uuid.uuid4().hex[:8]}"
    try:
        await register(redis_url, prefix, "m", old.url, "m-0", instance="a")
        fleet = fleet_yaml([{"name": "m", "source": {"path": "/x"}}])
        async with (
            serve_gateway(tmp_path, fleet, redis_url, prefix) as gw,
            httpx.AsyncClient(timeout=10) as c,
        ):

            async def length() -> object:
                return (await c.get(f"{gw}/v1/models/m")).json().get("max_model_len")

            assert await until(length, 10, "max_model_len from the first replica") == 4096
            await register(redis_url, prefix, "m", new.url, "m-0", instance="b")
            await until(lambda: _is(length, 8192), 10, "max_model_len from the replaced replica")
    finally:
        old.stop()
        new.stop()


async def _is(read: Callable[[], Awaitable[object]], value: object) -> bool:
    return await read() == value


def test_cards_read_vllms_model_list() -> None:
    cards = ModelCards()
    body = {
        "object": "list",
        "data": [
            {"id": "base", "root": "/models/base", "parent": None, "max_model_len": 2048},
            {"id": "lora", "root": "/l/lora", "parent": "base", "max_model_len": 2048},
            {"id": "odd"},
        ],
    }
    cards.learn(body)
    assert cards.card("base", "base") == {"max_model_len": 2048, "parent": None, "root": "base"}
    assert cards.card("lora", "base") == {"max_model_len": 2048, "parent": "base", "root": "/l/lora"}
    assert cards.card("alias", "base") == {"max_model_len": 2048, "parent": None, "root": "base"}
    assert cards.card("odd", "odd") == {"parent": None, "root": "odd"}  # no length known: none made up
