"""Where and how the lean Redis client (redis_wire.py) connects: the server's address, database,
credentials and TLS, read from a redis-py client; TCP keepalive with short probes."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import SSLConnection

KEEPALIVE = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}  # a dead peer noticed in ~25 s


def keepalive(sock: socket.socket) -> None:
    """TCP keepalive on, with short probes where the platform allows them."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in KEEPALIVE.items():
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def tls_context(connection_class: type[Any] | None, kwargs: dict[str, Any]) -> ssl.SSLContext | None:
    """The TLS context a redis-py connection of ``connection_class`` with ``kwargs`` uses (built by
    redis-py itself from the ``ssl_*`` options: CA file, client certificate, checks), or None without TLS."""
    if connection_class is None or not issubclass(connection_class, SSLConnection):
        return None
    options = {k: v for k, v in kwargs.items() if k.startswith("ssl_")}
    return SSLConnection(**options).ssl_context.get()


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to connect: the server (``host``/``port``, or the socket ``path`` of a ``unix://``
    URL), its database, ACL credentials and TLS (``rediss://``)."""

    host: str = "127.0.0.1"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: ssl.SSLContext | None = None
    path: str | None = None

    @classmethod
    def of(cls, client: aioredis.Redis) -> Endpoint:
        """The endpoint a redis-py client connects to, TLS context included (built by redis-py itself)."""
        pool = client.connection_pool
        kw = pool.connection_kwargs
        tls = tls_context(pool.connection_class, kw)
        return cls(
            kw.get("host", "127.0.0.1"),
            int(kw.get("port", 6379)),
            int(kw.get("db", 0)),
            kw.get("username"),
            kw.get("password"),
            tls,
            kw.get("path"),
        )

    def auth(self) -> list[bytes | str | int | float] | None:
        """The AUTH command for these credentials (``AUTH user pass`` with an ACL user), or None."""
        if not self.password:
            return None
        return ["AUTH", self.username, self.password] if self.username else ["AUTH", self.password]
