"""The record of one ``Idempotency-Key`` in Redis, shared by every gateway.

One hash per tenant and key (:meth:`RedisKeys.idempotency`; the key is kept as its sha256, so any bytes
a client sends make a bounded key name): ``fp`` (the request's fingerprint), ``rid`` (the request id
that claimed it), ``state`` (``running``, then ``done``) and, once done, the answer: ``status``,
``type`` (its content type), ``stream`` (``1`` for an event stream) and ``body`` (the whole body, or
every byte of the stream). The claim is one script (an existing record is read in the same step), so of
two requests with one key exactly one runs. A running record expires after ``running_ttl_ms`` unless
renewed (a gateway that died with it frees the key); a done one after the settings' TTL. Only the
request that claimed a record finishes, renews or releases it (its ``rid``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis

from gateway.errors import InvalidRequest
from llmgw_contract.redis_keys import RedisKeys

CLAIM = """
local found = redis.call('HMGET', KEYS[1], 'fp', 'rid', 'state', 'status', 'type', 'stream', 'body')
if found[1] then return found end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'rid', ARGV[2], 'state', 'running')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return false
"""
FINISH = """
if redis.call('HGET', KEYS[1], 'rid') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[2], 'type', ARGV[3], 'stream', ARGV[4],
  'body', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
"""
RELEASE = """
if redis.call('HGET', KEYS[1], 'rid') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
"""
RENEW = """
if redis.call('HGET', KEYS[1], 'rid') ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
"""


@dataclass(frozen=True, slots=True)
class KeyNames:
    """The Redis keys of one idempotency key: its record and its stream's events (events.py)."""

    record: str
    events: str


@dataclass(frozen=True, slots=True)
class Record:
    """A key's record as read: who holds it and, once ``done``, the answer to give again."""

    fingerprint: str
    request_id: str
    done: bool
    status: int = 0
    content_type: str = ""
    stream: bool = False
    body: bytes = b""


def fingerprint(route: str, target: str, body: bytes) -> tuple[str, bool]:
    """sha256 of the endpoint, its target (a path's model or response id) and the canonical body: a JSON
    body with its keys sorted and no spaces (the same request however it is spelled), any other body as
    sent; and whether the body asks for a stream (``"stream": true``)."""
    try:
        doc = orjson.loads(body)
        canonical = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        doc, canonical = None, body
    digest = hashlib.sha256(f"{route}\n{target}\n".encode())
    digest.update(canonical)
    return digest.hexdigest(), isinstance(doc, dict) and doc.get("stream") is True


def checked(key: str) -> str:
    """The key as sent: 1 to 255 printable ASCII characters (the IETF draft's and Stripe's bound)."""
    if not 0 < len(key) <= 255 or not key.isascii() or not key.isprintable():
        raise InvalidRequest("the Idempotency-Key header must be 1 to 255 printable ASCII characters")
    return key


def record_of(found: list[Any]) -> Record:
    """A record from its fields as read (bytes, or None where absent)."""
    fp, rid, state, status, ctype, stream, body = found
    return Record(
        (fp or b"").decode(),
        (rid or b"").decode(),
        state == b"done",
        int(status or 0),
        (ctype or b"").decode("latin-1"),
        stream == b"1",
        body or b"",
    )


class IdempotencyStore:
    """Claims, reads, finishes and releases key records (see the module docstring)."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys, ttl_s: float, running_ttl_s: float) -> None:
        self.redis, self.keys = redis, keys
        self.ttl_ms, self.running_ttl_ms = int(ttl_s * 1000), int(running_ttl_s * 1000)
        self.claim_script = redis.register_script(CLAIM)
        self.finish_script = redis.register_script(FINISH)
        self.release_script = redis.register_script(RELEASE)
        self.renew_script = redis.register_script(RENEW)

    def key(self, tenant: str, idempotency_key: str) -> KeyNames:
        digest = hashlib.sha256(idempotency_key.encode("latin-1")).hexdigest()[:40]
        return KeyNames(self.keys.idempotency(tenant, digest), self.keys.idempotency_events(tenant, digest))

    async def claim(self, key: str, fp: str, request_id: str) -> Record | None:
        """None when this request now holds the key; else the record that holds it."""
        found = await self.claim_script(keys=[key], args=[fp, request_id, self.running_ttl_ms])
        return None if not found else record_of(found)

    async def read(self, key: str) -> Record | None:
        found = await self.redis.hmget(key, ["fp", "rid", "state", "status", "type", "stream", "body"])
        return None if found[0] is None else record_of(found)

    async def finish(
        self, key: str, request_id: str, status: int, content_type: str, stream: bool, body: bytes
    ) -> None:
        args: list[str | int | bytes] = [request_id, status, content_type, int(stream), body, self.ttl_ms]
        await self.finish_script(keys=[key], args=args)

    async def release(self, key: str, request_id: str) -> None:
        await self.release_script(keys=[key], args=[request_id])

    async def renew(self, key: str, request_id: str) -> None:
        await self.renew_script(keys=[key], args=[request_id, self.running_ttl_ms])

    async def claim_stream(self, key: str) -> None:
        """A request follows the key's stream: its grace period (kept.py) ends
        in no cancel."""
        await self.redis.hset(key, "claimed", 1)

    async def claimed(self, key: str) -> bool:
        return bool(await self.redis.hexists(key, "claimed"))
