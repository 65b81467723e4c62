"""RESP2, as much of it as EVALSHA needs: encoding a command, and an incremental reply parser (integers,
bulk strings, arrays, simple strings and errors)."""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisError

Reply = int | bytes | str | list[Any] | None


class RedisReplyError(RedisError):
    """Redis answered the command with an error."""


def encode(parts: list[bytes | str | int | float]) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        out += [b"$%d\r\n" % len(b), b, b"\r\n"]
    return b"".join(out)


class Parser:
    """Incremental RESP2 parser: feed bytes, take complete replies."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data

    def replies(self) -> list[Reply | RedisReplyError]:
        out = []
        while self.buf:
            parsed = self._parse(0)
            if parsed is None:
                break
            value, end = parsed
            del self.buf[:end]
            out.append(value)
        return out

    def _line(self, at: int) -> tuple[bytes, int] | None:
        end = self.buf.find(b"\r\n", at)
        return None if end < 0 else (bytes(self.buf[at + 1 : end]), end + 2)

    def _parse(self, at: int) -> tuple[Any, int] | None:
        line = self._line(at)
        if line is None:
            return None
        head, nxt = line
        kind = self.buf[at : at + 1]
        if kind == b":":
            return int(head), nxt
        if kind == b"+":
            return head.decode(), nxt
        if kind == b"-":
            return RedisReplyError(head.decode()), nxt
        if kind == b"$":
            return self._bulk(int(head), nxt)
        if kind == b"*":
            return self._array(int(head), nxt)
        raise RedisReplyError(f"unexpected reply type {kind!r}")

    def _bulk(self, size: int, at: int) -> tuple[bytes | None, int] | None:
        if size < 0:
            return None, at
        if len(self.buf) < at + size + 2:
            return None
        return bytes(self.buf[at : at + size]), at + size + 2

    def _array(self, count: int, at: int) -> tuple[list[Any] | None, int] | None:
        if count < 0:
            return None, at
        items = []
        for _ in range(count):
            parsed = self._parse(at)
            if parsed is None:
                return None
            item, at = parsed
            items.append(item)
        return items, at
