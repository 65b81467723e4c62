"""The pure parts of an idempotency key's record: the body's fingerprint, the key's checks and names."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from gateway.errors import InvalidRequest
from gateway.idempotency.store import IdempotencyStore, checked, fingerprint
from llmgw_contract.redis_keys import RedisKeys


def test_the_fingerprint_is_the_request_however_its_json_is_spelled() -> None:
    a = fingerprint("POST chat", "", b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    b = fingerprint("POST chat", "", b'{"messages":[{"content":"hi","role":"user"}],"model":"m"}')
    assert a == b


def test_another_body_endpoint_or_target_is_another_fingerprint() -> None:
    base = fingerprint("POST chat", "", b'{"model":"m","max_tokens":4}')
    assert base != fingerprint("POST chat", "", b'{"model":"m","max_tokens":5}')
    assert base != fingerprint("POST completions", "", b'{"model":"m","max_tokens":4}')
    assert base != fingerprint("POST chat", "m2", b'{"model":"m","max_tokens":4}')
    assert fingerprint("POST audio", "", b"--x\r\nraw") != fingerprint("POST audio", "", b"--y\r\nraw")


def test_the_fingerprint_says_whether_the_body_asks_for_a_stream() -> None:
    assert fingerprint("POST chat", "", b'{"stream": true}')[1]
    assert not fingerprint("POST chat", "", b'{"stream": false}')[1]
    assert not fingerprint("POST audio", "", b"stream")[1]


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "a\nb"])
def test_a_key_that_is_empty_too_long_or_not_printable_ascii_is_refused(key: str) -> None:
    with pytest.raises(InvalidRequest):
        checked(key)


def test_a_key_is_the_tenants_own_and_its_events_share_its_slot() -> None:
    store = IdempotencyStore(aioredis.Redis(), RedisKeys("p"), 60, 10)
    a, b = store.key("tenant-a", "k"), store.key("tenant-b", "k")
    assert a.record != b.record and a.events != b.events
    assert a.record.startswith("p:idem:{tenant-a}:") and a.events.startswith("p:idem:{tenant-a}:")
    assert len(store.key("tenant-a", "x" * 255).record) == len(a.record)  # any key: a bounded name


def test_a_uuid_key_is_taken_as_sent() -> None:
    assert checked("9f1c2a7e-4b1d-4c55-9a57-0c1e2f3a4b5c") == "9f1c2a7e-4b1d-4c55-9a57-0c1e2f3a4b5c"
