"""The Sentinel override of compose.yaml (deploy/compose/compose.redis-sentinel.yaml), validated offline:
merged onto compose.yaml the way compose merges files it passes the compose specification's schema; every
client of the state Redis takes the Sentinel URL and waits for the Sentinels; and a Sentinel's rendered
configuration, run by a real ``redis-server --sentinel`` on loopback, monitors a real password-protected
master."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis
import yaml

from llmgw_contract.redis_url import parse
from llmgw_tools.deploy.common import REPO
from llmgw_tools.deploy.sentinel import OVERRIDE_FILE, SENTINELS, SERVICE, sentinel_conf
from testing.poll import wait_until
from testing.procs import Proc, free_port, spawn, start_redis

Obj = dict[str, Any]
PASSWORD = "${LLMGW_REDIS_PASSWORD:?set LLMGW_REDIS_PASSWORD in .env, see docs/deployment/index.md}"


def merged(base: Obj, over: Obj) -> Obj:
    """compose's merge of an override: mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        out[key] = merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


@pytest.fixture(scope="module")
def stacked() -> Obj:
    base = yaml.safe_load((REPO / "compose.yaml").read_text())
    over = yaml.safe_load((REPO / OVERRIDE_FILE).read_text())
    return merged(base, over)


def test_merged_file_passes_the_compose_specification(stacked: Obj) -> None:
    validator = jsonschema.Draft202012Validator(
        json.loads((REPO / "deploy/schemas/compose-spec.json").read_text())
    )
    assert [e.message for e in validator.iter_errors(stacked)] == []


def test_state_redis_clients_take_the_sentinel_url(stacked: Obj) -> None:
    services = stacked["services"]
    clients = [n for n in services if n.startswith("gateway-")] + ["register"]
    for name in clients:
        text = services[name]["environment"]["LLMGW_REDIS_URL"]
        url = parse(text.replace(PASSWORD, "0f1e2d"))  # as compose interpolates it (a hex password)
        assert url.kind == "sentinel" and url.service == SERVICE, name
        assert [h for h, _ in url.nodes] == list(SENTINELS) and url.password == "0f1e2d", name
        assert url.sentinel_password == "0f1e2d", name
        assert all(services[name]["depends_on"][s] == {"condition": "service_healthy"} for s in SENTINELS)
    for name in (*SENTINELS, "redis-replica"):
        assert services[name]["healthcheck"]["test"][:2] == ["CMD", "redis-cli"], name
        assert all(dep in services for dep in services[name]["depends_on"]), name
    replica = services["redis-replica"]["command"]
    assert replica[replica.index("--replicaof") + 1 :] == ["redis", "6379"]
    assert services["gateway-1"]["environment"]["LLMGW_KEYS_REDIS_URL"].startswith(
        "redis://"
    )  # the key store
    assert "--replicaof" not in services["redis"]["command"]


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Proc]:
    proc = start_redis(tmp_path / "master", extra=["--requirepass", "pw"])
    yield proc
    proc.stop()


def test_rendered_sentinel_configuration_monitors_a_real_master(tmp_path: Path, master: Proc) -> None:
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text("\n".join(sentinel_conf("127.0.0.1", "127.0.0.1", "pw", port, master.port)) + "\n")
    proc = spawn(["redis-server", str(conf), "--sentinel"], port, tmp_path / "sentinel.log")
    try:
        client = redis.Redis(port=port, password="pw", socket_timeout=2)
        wait_until(lambda: ping(client), 10, "sentinel")
        info = client.sentinel_master(SERVICE)
        assert int(info["port"]) == master.port and not info["is_sdown"]
        with pytest.raises(redis.ResponseError, match="NOQUORUM"):  # quorum 2: one Sentinel is not enough
            client.execute_command("SENTINEL", "CKQUORUM", SERVICE)
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=2).execute_command("SENTINEL", "MASTERS")
    finally:
        proc.stop()


def ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
