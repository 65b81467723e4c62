"""The state Redis as a Sentinel setup for compose: an override file (pure: options in, text out).

``docker compose -f compose.yaml -f deploy/compose/compose.redis-sentinel.yaml up -d`` turns the one
state Redis into a master (the ``redis`` service), one replica (``redis-replica``) and three Sentinels
(``redis-sentinel-1..3``, quorum 2), each behind the same password, and points the gateways and the
registration service at ``redis+sentinel://…/llmgw`` (llmgw_contract/redis_url.py): they ask the Sentinels for
the master and follow a failover without a restart. Neither data node persists (the state rebuilds from
heartbeats); a former master that comes back empty is made a replica of the new one by the Sentinels.
The key store ``redis-keys`` stays one persisted server (its records are few and written rarely).
"""

from __future__ import annotations

from typing import Any

from llmgw_tools.deploy.common import header, to_yaml
from llmgw_tools.stack.redis import EPHEMERAL_REDIS_ARGS

Obj = dict[str, Any]
OVERRIDE_FILE = "deploy/compose/compose.redis-sentinel.yaml"
SERVICE = "llmgw"  # the master's name at the Sentinels (as llmgw_tools/stack/redis_topology.py's)
SENTINEL_PORT = 26379
SENTINELS = tuple(f"redis-sentinel-{i}" for i in (1, 2, 3))
QUORUM = 2
DOWN_AFTER_MS = 5000
FAILOVER_TIMEOUT_MS = 60000
HEALTHY = {"condition": "service_healthy"}


def sentinel_url(password: str, sentinels: tuple[str, ...] = SENTINELS) -> str:
    """The URL every state-Redis client takes: the Sentinels' addresses, the service, both passwords."""
    hosts = ",".join(f"{h}:{SENTINEL_PORT}" for h in sentinels)
    return f"redis+sentinel://:{password}@{hosts}/{SERVICE}?db=0&sentinel_password={password}"


def sentinel_conf(
    announce: str, master: str, password: str, port: int = SENTINEL_PORT, master_port: int = 6379
) -> list[str]:
    """One Sentinel's configuration: hostnames (container names) rather than addresses, as they move."""
    return [
        f"port {port}",
        "sentinel resolve-hostnames yes",
        "sentinel announce-hostnames yes",
        f"sentinel announce-ip {announce}",
        f"sentinel monitor {SERVICE} {master} {master_port} {QUORUM}",
        f"sentinel auth-pass {SERVICE} {password}",
        f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
        f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
        f"requirepass {password}",
        f"sentinel sentinel-pass {password}",
    ]


def data_command(name: str, password: str, replica_of: str | None) -> list[str]:
    argv = ["redis-server", *EPHEMERAL_REDIS_ARGS, "--requirepass", password, "--masterauth", password]
    argv += ["--replica-announce-ip", name]
    return argv + (["--replicaof", replica_of, "6379"] if replica_of else [])


def ping_check(port: int = 6379) -> Obj:
    test = ["CMD", "redis-cli", "-p", str(port), "ping"]
    return {"test": test, "interval": "5s", "timeout": "5s", "start_period": "10s", "retries": 3}


def sentinel_script(conf: list[str]) -> str:
    """A shell line that writes the configuration into the container and starts the Sentinel on it
    (Sentinel rewrites its file, so it cannot be a read-only mount)."""
    lines = " ".join(f"'{line}'" for line in conf)
    return f"printf '%s\\n' {lines} > /data/sentinel.conf && exec redis-server /data/sentinel.conf --sentinel"


def sentinel_service(name: str, image: str, password: str) -> Obj:
    return {
        "image": image,
        "command": ["sh", "-c", sentinel_script(sentinel_conf(name, "redis", password))],
        "environment": {"REDISCLI_AUTH": password},
        "healthcheck": ping_check(SENTINEL_PORT),
        "depends_on": {"redis": HEALTHY, "redis-replica": HEALTHY},
        "restart": "unless-stopped",
    }


def override(image: str, password: str, gateways: int, register: bool) -> Obj:
    """The override's services: the data nodes, the Sentinels, and the clients' URL."""
    url = sentinel_url(password)
    wait = {s: HEALTHY for s in SENTINELS}
    services: Obj = {
        "redis": {"command": data_command("redis", password, None)},
        "redis-replica": {
            "image": image,
            "command": data_command("redis-replica", password, "redis"),
            "environment": {"REDISCLI_AUTH": password},
            "healthcheck": ping_check(),
            "depends_on": {"redis": HEALTHY},
            "restart": "unless-stopped",
        },
    }
    services.update({s: sentinel_service(s, image, password) for s in SENTINELS})
    clients = [f"gateway-{i}" for i in range(1, gateways + 1)] + (["register"] if register else [])
    services.update({c: {"environment": {"LLMGW_REDIS_URL": url}, "depends_on": wait} for c in clients})
    return {"services": services}


def render_sentinel_override(image: str, password: str, gateways: int, register: bool) -> dict[str, str]:
    what = (
        "The state Redis as master + replica + three Sentinels: `docker compose -f compose.yaml "
        f"-f {OVERRIDE_FILE} up -d`; docs/deployment/redis.md"
    )
    return {OVERRIDE_FILE: header(what) + to_yaml(override(image, password, gateways, register))}
