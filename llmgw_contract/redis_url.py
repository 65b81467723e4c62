"""One Redis URL for every component (gateways, supervisor, sidecar, key store), in three topologies:

- ``redis://[user:pass@]host:port/db`` (``rediss://`` for TLS, ``unix://``): one server;
- ``redis+sentinel://[user:pass@]host:port,host:port/service?db=0``: the master of ``service`` as the
  Sentinels name it (the password is the master's; ``sentinel_password=`` for the Sentinels' own); a
  connection that fails asks the Sentinels again, so a failover is followed without a restart;
- ``redis+cluster://[user:pass@]host:port,host:port``: a Redis Cluster from any of its nodes; redis-py's
  cluster client follows MOVED and ASK.

``rediss+sentinel://`` and ``rediss+cluster://`` speak TLS to every server (the Sentinels, the master, each
cluster node), with the TLS options of a ``rediss://`` URL in the query, as redis-py reads them there:
``ssl_ca_certs`` (the CA file the servers' certificates are verified against), ``ssl_certfile`` and
``ssl_keyfile`` (a client certificate), ``ssl_cert_reqs`` and ``ssl_check_hostname``.

:func:`connect` builds the asynchronous redis-py client, :func:`connect_sync` the synchronous one (for a
thread that must work while the event loop is busy); :func:`parse` the parts (the lean pipelined client
uses them). Their pools hold :data:`POOL_CONNECTIONS` unless the caller gives ``max_connections``.
:data:`REDIS_DOWN` is what their calls raise when Redis is unavailable: every "Redis is down"
handler, on the gateways' side and the control plane's, catches exactly it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.cluster
import redis.sentinel
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import RedisClusterException, RedisError

SENTINEL, CLUSTER = "redis+sentinel", "redis+cluster"
TLS_SCHEMES = {"rediss+sentinel": SENTINEL, "rediss+cluster": CLUSTER}
TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
TCP_ONLY = ("socket_keepalive", "socket_keepalive_options")
"""Connection options redis-py's unix-socket connection refuses (a TypeError at the first command)."""
POOL_CONNECTIONS = 1024
"""Connections a client may open (per server for a cluster) unless its caller says: redis-py 8 stops at 100
by default and fails the 101st command at once with ``MaxConnectionsError`` (read as "Redis is down"). A
one-server client waits for a free connection instead, up to its socket timeout; a Sentinel or cluster
client (redis-py's pools there do not wait) fails past this many."""

REDIS_DOWN: tuple[type[Exception], ...] = (RedisError, RedisClusterException, OSError)
"""What a Redis call raises when Redis is unreachable, slow past its timeout or refuses the call, in any
topology: redis-py's errors (``RedisError``), its cluster client's own family (``RedisClusterException``:
no node reachable, a slot no node covers; not a ``RedisError``) and the socket's (``OSError``, which the
builtin ``TimeoutError`` and ``ConnectionError`` are)."""


@dataclass(frozen=True, slots=True)
class RedisUrl:
    """A parsed Redis URL: its kind (``single``, ``sentinel``, ``cluster``) and what that kind needs."""

    kind: str
    url: str
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    tls: tuple[tuple[str, str], ...] | None = None  # the TLS options of a rediss+… URL; None: no TLS

    def tls_kwargs(self) -> dict[str, Any]:
        """redis-py's keyword arguments for this URL's TLS (none without it)."""
        if self.tls is None:
            return {}
        opts: dict[str, Any] = dict(self.tls)
        if "ssl_check_hostname" in opts:
            opts["ssl_check_hostname"] = opts["ssl_check_hostname"].lower() in ("1", "true", "yes")
        return {"ssl": True, **opts}


def parse(url: str) -> RedisUrl:
    scheme = url.split("://", 1)[0]
    tls = scheme in TLS_SCHEMES
    scheme = TLS_SCHEMES.get(scheme, scheme)
    if scheme not in (SENTINEL, CLUSTER):
        return RedisUrl("single", url)
    parts = urlsplit(url)
    netloc = parts.netloc
    creds, _, hosts = netloc.rpartition("@")
    user, _, password = creds.partition(":") if creds else ("", "", "")
    nodes = tuple(node(h) for h in hosts.split(",") if h)
    if not nodes:
        raise ValueError(f"{scheme} URL names no host: {url!r}")
    query = parse_qs(parts.query)
    db = int(query.get("db", ["0"])[0])
    kind = "sentinel" if scheme == SENTINEL else "cluster"
    service = parts.path.strip("/")
    if kind == "sentinel" and not service:
        raise ValueError(f"a Sentinel URL names its service as the path: {url!r}")
    if kind == "cluster" and db:
        raise ValueError(f"Redis Cluster has database 0 only: {url!r}")
    return RedisUrl(
        kind, url, nodes, service, db, unquote(user) or None, unquote(password) or None,
        query.get("sentinel_password", [None])[0],
        tuple((k, query[k][0]) for k in TLS_OPTIONS if k in query) if tls else None,
    )  # fmt: skip


def node(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return (host or hostport, int(port)) if port.isdigit() else (hostport, 26379)


def single_options(url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for one server: a ``unix://`` socket takes no TCP keepalive options."""
    if url.startswith("unix://"):
        return {k: v for k, v in kwargs.items() if k not in TCP_ONLY}
    return kwargs


def pool_wait_s(kwargs: dict[str, Any]) -> float | None:
    """How long a one-server client's command waits for a free connection: its socket timeout (its
    connect timeout when it has none; None, for ever, when it has neither)."""
    wait = kwargs.get("socket_timeout") or kwargs.get("socket_connect_timeout")
    return float(wait) if wait else None


def connect(url: str, **kwargs: Any) -> aioredis.Redis:
    """A redis-py client for ``url`` with ``kwargs`` (timeouts, retry, pool size) on its connections.

    A cluster client is returned typed as ``Redis``: it answers the same single-key commands and
    scripts (every key the project uses carries a hash tag; see llmgw_contract/redis_keys.py)."""
    target = parse(url)
    kwargs["max_connections"] = kwargs.get("max_connections") or POOL_CONNECTIONS
    if target.kind == "single":
        return aioredis.Redis.from_pool(
            aioredis.BlockingConnectionPool.from_url(
                url, timeout=pool_wait_s(kwargs), **single_options(url, kwargs)
            )
        )
    auth: dict[str, Any] = {"username": target.username, "password": target.password}
    if target.kind == "sentinel":
        timeouts = {k: v for k, v in kwargs.items() if k in ("socket_timeout", "socket_connect_timeout")}
        sentinel = Sentinel(
            list(target.nodes),
            sentinel_kwargs={"password": target.sentinel_password, **timeouts, **target.tls_kwargs()},
            db=target.db,
            **auth,
            **target.tls_kwargs(),
            **kwargs,
        )
        return cast(aioredis.Redis, sentinel.master_for(target.service))
    startup = [ClusterNode(h, p) for h, p in target.nodes]
    return cast(aioredis.Redis, RedisCluster(startup_nodes=startup, **auth, **target.tls_kwargs(), **kwargs))


async def follow_master(client: aioredis.Redis) -> bool:
    """For a Sentinel-managed client: ask the Sentinels where the master is now and, when it moved,
    close the pool's idle connections, so the next command goes to the new master. Without it redis-py
    asks only at a reconnect, and a master left by ``SENTINEL FAILOVER`` keeps its connections and takes
    writes (then lost) until the Sentinels turn it into a replica, up to 10 s later. True when the master
    moved; False when it did not, for the other topologies, and when the Sentinels do not answer."""
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, SentinelConnectionPool):
        return False
    known = pool.master_address
    try:
        now = await pool.get_master_address()  # type: ignore[no-untyped-call]
    except REDIS_DOWN:
        return False
    return known is not None and tuple(now) != tuple(known)


def connect_sync(url: str, **kwargs: Any) -> redis.Redis:
    """The synchronous redis-py client for ``url`` (the same three forms and options as :func:`connect`)."""
    target = parse(url)
    kwargs["max_connections"] = kwargs.get("max_connections") or POOL_CONNECTIONS
    if target.kind == "single":
        pool = redis.BlockingConnectionPool.from_url(
            url, timeout=pool_wait_s(kwargs), **single_options(url, kwargs)
        )
        return redis.Redis.from_pool(pool)
    auth: dict[str, Any] = {"username": target.username, "password": target.password}
    if target.kind == "sentinel":
        timeouts = {k: v for k, v in kwargs.items() if k in ("socket_timeout", "socket_connect_timeout")}
        sentinel = redis.sentinel.Sentinel(
            list(target.nodes),
            sentinel_kwargs={"password": target.sentinel_password, **timeouts, **target.tls_kwargs()},
            db=target.db,
            **auth,
            **target.tls_kwargs(),
            **kwargs,
        )
        return cast(redis.Redis, sentinel.master_for(target.service))
    startup = [redis.cluster.ClusterNode(h, p) for h, p in target.nodes]  # type: ignore[no-untyped-call]
    return cast(
        redis.Redis,
        redis.cluster.RedisCluster(startup_nodes=startup, **auth, **target.tls_kwargs(), **kwargs),
    )
