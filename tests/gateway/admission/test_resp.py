"""RESP2 on plain bytes: the encoder's bytes, and the incremental parser fed every reply kind whole,
byte by byte and cut at every offset (the lean client's replies arrive in arbitrary pieces)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.admission.redis_cluster_wire import first_key
from gateway.admission.resp import Parser, Part, RedisReplyError, encode, head, words

WIRE = (
    b":42\r\n:-7\r\n+OK\r\n-NOSCRIPT No matching script\r\n$5\r\nhe\r\no\r\n$0\r\n\r\n$-1\r\n"
    b"*-1\r\n*0\r\n*3\r\n:1\r\n$3\r\nabc\r\n*2\r\n+x\r\n$-1\r\n*5\r\n:0\r\n:59000\r\n:1234\r\n:5\r\n:500\r\n"
)
WANT = [
    42, -7, "OK", "NOSCRIPT No matching script", b"he\r\no", b"", None, None, [],
    [1, b"abc", ["x", None]], [0, 59000, 1234, 5, 500],
]  # fmt: skip


def shown(replies: Sequence[object]) -> list[object]:
    return [str(r) if isinstance(r, RedisReplyError) else r for r in replies]


def test_every_reply_kind_whole_and_in_pieces() -> None:
    for cut in range(len(WIRE) + 1):
        p = Parser()
        p.feed(WIRE[:cut])
        got = p.replies()
        p.feed(WIRE[cut:])
        assert shown(got + p.replies()) == WANT, cut
    one, each = Parser(), list[object]()
    for i in range(len(WIRE)):
        one.feed(WIRE[i : i + 1])
        each += one.replies()
    assert shown(each) == WANT and not one.buf


def test_an_error_reply_is_an_error_value() -> None:
    p = Parser()
    p.feed(b"-ERR wrong\r\n")
    (reply,) = p.replies()
    assert isinstance(reply, RedisReplyError) and str(reply) == "ERR wrong"


def test_commands_are_encoded_as_arrays_of_bulk_strings() -> None:
    assert encode(["EVALSHA", b"ab", 2, 1.5, "é"]) == (
        b"*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n$3\r\n1.5\r\n$2\r\n\xc3\xa9\r\n"
    )


def test_a_head_encoded_once_makes_the_same_command() -> None:
    """A script call's fixed start (EVALSHA, sha, numkeys, fixed keys), encoded once per model or API
    key, then each call's own words: the same bytes as the whole command encoded at once."""
    fixed = head(["EVALSHA", "ab12", 3, "{m}:leases", "{m}:queue"])
    rest: list[Part] = ["{m}:gone:t1", "t1", 4, 2.5, b"raw"]
    whole: list[Part] = ["EVALSHA", "ab12", 3, "{m}:leases", "{m}:queue", "{m}:gone:t1", "t1", 4, 2.5, b"raw"]
    assert encode([fixed, *rest]) == encode(whole)
    assert encode([fixed]) == encode(whole[:5])
    assert words([fixed, *rest]) == whole
    assert first_key([fixed, *rest]) == b"{m}:leases"  # a cluster routes it by its first key
    assert encode([True, -7]) == b"*2\r\n$4\r\nTrue\r\n$2\r\n-7\r\n"  # spelled as str() spells them
