"""The two Redis servers of the embedded stack, with the flags compose and Kubernetes use too."""

from __future__ import annotations

from pathlib import Path

# The two Redis roles, with the same flags in the embedded stack, compose and Kubernetes (a test checks):
# the state Redis holds only what rebuilds itself (registry, leases, queue, in-flight counts, rate
# counters), so it never persists and a restart never brings back stale state; the key store holds the
# API keys and persists every write (AOF, fsync on each write: key writes are rare) so keys survive.
EPHEMERAL_REDIS_ARGS = ("--save", "", "--appendonly", "no")
KEYS_REDIS_ARGS = (
    "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction",
)  # fmt: skip


def redis_server_argv(
    binary: str, port: int, data_dir: Path, host: str = "127.0.0.1", persistent: bool = False
) -> list[str]:
    """A redis-server on ``host``: the ephemeral state Redis, or (``persistent``) the key store, whose
    append-only file lives in ``data_dir``."""
    mode = KEYS_REDIS_ARGS if persistent else EPHEMERAL_REDIS_ARGS
    return [binary, "--port", str(port), "--bind", host, "--dir", str(data_dir), *mode]
