"""RESP2, as much of it as EVALSHA needs: encoding a command, and an incremental reply parser (integers,
bulk strings, arrays, simple strings and errors)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

Reply = int | bytes | str | list[Any] | None
Word = bytes | str | int | float


class RedisReplyError(RedisError):
    """Redis answered the command with an error."""


def awaited_call_needed(exc: BaseException | None) -> bool:
    """Whether a call sent without waiting failed in a way that the awaited call handles: NOSCRIPT (it
    loads the script), a cluster's MOVED or ASK (it follows them)."""
    return isinstance(exc, RedisReplyError) and str(exc).split(" ", 1)[0] in ("NOSCRIPT", "MOVED", "ASK")


@dataclass(frozen=True, slots=True)
class Head:
    """The fixed start of a command (a script call's EVALSHA, sha, numkeys and fixed keys), encoded once:
    its words, and their RESP bulk strings. A command whose first part is a head is that head's words
    followed by the rest."""

    words: tuple[Word, ...]
    data: bytes


Part = Word | Head


def head(words: Sequence[Word]) -> Head:
    return Head(tuple(words), bulks(words))


def bulks(words: Sequence[Word]) -> bytes:
    """Each word as a RESP bulk string (text as UTF-8, numbers as their decimal text); the common kinds
    first, by exact type (a bool or a float is spelled as ``str`` spells it)."""
    out = []
    for w in words:
        kind = type(w)
        if kind is str:
            d = w.encode()  # type: ignore[union-attr]
        elif kind is int:
            d = b"%d" % w  # type: ignore[str-format]
        else:
            d = w if kind is bytes else str(w).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(d), d))
    return b"".join(out)


def encode(parts: Sequence[Part]) -> bytes:
    """A command as RESP: an array of bulk strings; a :class:`Head` first stands for its words, already
    encoded."""
    first = parts[0] if parts else None
    if isinstance(first, Head):
        rest: Sequence[Any] = parts[1:]
        return b"*%d\r\n" % (len(first.words) + len(rest)) + first.data + bulks(rest)
    return b"*%d\r\n" % len(parts) + bulks(parts)  # type: ignore[arg-type]


def words(parts: Sequence[Part]) -> list[Word]:
    """The command's words, a head's spelled out."""
    first = parts[0] if parts else None
    if isinstance(first, Head):
        return [*first.words, *parts[1:]]  # type: ignore[list-item]
    return list(parts)  # type: ignore[arg-type]


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
