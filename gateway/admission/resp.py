"""RESP2, as much of it as EVALSHA needs: encoding a command, and an incremental reply parser (integers,
bulk strings, arrays, simple strings and errors)."""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisError

Reply = int | bytes | str | list[Any] | None


class RedisReplyError(RedisError):
    """Redis answered the command with an error."""


def encode(parts: list[bytes | str | int | float]) -> bytes:
    """A command as RESP: an array of bulk strings (text as UTF-8, numbers as their decimal text)."""
    data = [p if isinstance(p, bytes) else str(p).encode() for p in parts]
    return b"*%d\r\n" % len(data) + b"".join([b"$%d\r\n%b\r\n" % (len(d), d) for d in data])


COLON, PLUS, MINUS, DOLLAR, STAR = b":+-$*"


class Parser:
    """Incremental RESP2 parser: feed bytes, take complete replies. The replies are read in place
    (indexes into the buffer, which is cut once per :meth:`replies`)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data

    def replies(self) -> list[Reply | RedisReplyError]:
        buf, out, at = self.buf, [], 0
        while at < len(buf):
            parsed = self._parse(buf, at)
            if parsed is None:
                break
            value, at = parsed
            out.append(value)
        if at:
            del buf[:at]
        return out

    def _parse(self, buf: bytearray, at: int) -> tuple[Any, int] | None:
        """The reply that starts at ``at`` and where the next starts; None while it is incomplete."""
        end = buf.find(b"\r\n", at)
        if end < 0:
            return None
        kind = buf[at]
        if kind == COLON:
            return int(buf[at + 1 : end]), end + 2
        if kind == STAR:
            return self._array(buf, int(buf[at + 1 : end]), end + 2)
        if kind == DOLLAR:
            size, at = int(buf[at + 1 : end]), end + 2
            if size < 0:
                return None, at
            if len(buf) < at + size + 2:
                return None
            return bytes(buf[at : at + size]), at + size + 2
        if kind == PLUS:
            return buf[at + 1 : end].decode(), end + 2
        if kind == MINUS:
            return RedisReplyError(buf[at + 1 : end].decode()), end + 2
        raise RedisReplyError(f"unexpected reply type {bytes(buf[at : at + 1])!r}")

    def _array(self, buf: bytearray, count: int, at: int) -> tuple[list[Any] | None, int] | None:
        if count < 0:
            return None, at
        items = []
        for _ in range(count):
            parsed = self._parse(buf, at)
            if parsed is None:
                return None
            item, at = parsed
            items.append(item)
        return items, at
