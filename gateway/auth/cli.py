"""``llmgw-keys``: create, list, revoke, export and import the gateway's API keys in their Redis.

``create`` prints the secret once (only its sha256 is stored); ``list`` never shows secrets or hashes.
``export`` writes one JSON line per key (the sha256 of its secret and its record, never a secret) and
``import`` reads such lines back: a backup, or a move to another key store.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from gateway.auth.keys import ApiKey, KeyStore, StoredKey, new_secret
from gateway.redis_clients import REDIS_DOWN
from llmgw_contract.build_info import add_version_flag
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-keys", description="Manage the gateway's API keys (stored hashed)."
    )
    add_version_flag(p)
    p.add_argument(
        "--redis-url",
        default=os.environ.get("LLMGW_KEYS_REDIS_URL") or os.environ.get("LLMGW_REDIS_URL", DEFAULT_REDIS),
        help="the key store's Redis (default: LLMGW_KEYS_REDIS_URL, else LLMGW_REDIS_URL, else %(default)s)",
    )
    p.add_argument(
        "--prefix",
        default=os.environ.get("LLMGW_REDIS_PREFIX", "llmgw"),
        help="Redis key prefix (default: LLMGW_REDIS_PREFIX or %(default)s)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create", help="create a key and print its secret (once)")
    c.add_argument("--tenant", required=True, help="tenant the key belongs to (fair share is per tenant)")
    c.add_argument("--models", help="comma-separated models the key may use (default: all)")
    c.add_argument("--priority", type=int, default=0, help="default queue priority (higher goes first)")
    c.add_argument(
        "--max-priority",
        type=int,
        default=None,
        help="highest priority a request may ask with x-priority (default: --priority)",
    )
    c.add_argument("--rpm", type=int, default=0, help="requests per minute (0: unlimited)")
    c.add_argument(
        "--tpm", type=int, default=0, help="tokens per minute, prompt estimate + max_tokens (0: unlimited)"
    )
    c.add_argument(
        "--max-wait-s", type=float, default=None, help="longest queue wait for this key's requests"
    )
    c.add_argument("--name", default="", help="a label for people")
    sub.add_parser("list", help="list keys (never their secrets)")
    r = sub.add_parser("revoke", help="revoke a key by its id")
    r.add_argument("key_id")
    e = sub.add_parser("export", help="write every key as JSON lines (hashes, never secrets)")
    e.add_argument("file", nargs="?", type=argparse.FileType("w"), default=sys.stdout)
    i = sub.add_parser("import", help="read keys from JSON lines written by export (same id: replaced)")
    i.add_argument("file", nargs="?", type=argparse.FileType("r"), default=sys.stdin)
    return p.parse_args(argv)


def key_from(args: argparse.Namespace, key_id: str) -> ApiKey:
    models = tuple(m.strip() for m in args.models.split(",") if m.strip()) if args.models else None
    max_priority = args.priority if args.max_priority is None else args.max_priority
    return ApiKey(
        key_id=key_id,
        tenant=args.tenant,
        models=models,
        priority=args.priority,
        max_priority=max_priority,
        rpm=args.rpm,
        tpm=args.tpm,
        max_wait_s=args.max_wait_s,
        name=args.name,
    )


def describe(k: ApiKey) -> str:
    created = datetime.datetime.fromtimestamp(k.created, datetime.UTC).strftime("%Y-%m-%d %H:%M")
    models = ",".join(k.models) if k.models is not None else "*"
    wait = f"{k.max_wait_s:g}" if k.max_wait_s is not None else "-"
    return (
        f"{k.key_id:<12}  {k.tenant:<16} {models:<24} {k.priority:>4} {k.max_priority:>4} "
        f"{k.rpm:>8} {k.tpm:>10} {wait:>6}  {created}  {k.name}"
    )


HEADER = (
    f"{'KEY ID':<12}  {'TENANT':<16} {'MODELS':<24} {'PRIO':>4} {'MAX':>4} {'RPM':>8} {'TPM':>10} "
    f"{'WAIT':>6}  {'CREATED':<16}  NAME"
)


async def run(args: argparse.Namespace) -> int:
    redis = connect(args.redis_url, socket_timeout=5, socket_connect_timeout=5)
    store = KeyStore(redis, RedisKeys(args.prefix))
    try:
        return await dispatch(args, store)
    finally:
        await redis.aclose()


async def dispatch(args: argparse.Namespace, store: KeyStore) -> int:
    if args.command == "create":
        key_id, secret = new_secret()
        key = key_from(args, key_id)
        await store.create(key, secret)
        print(f"created key {key_id} for tenant {key.tenant}; its secret, shown only this once:")
        print(secret)
        return 0
    if args.command == "list":
        print(HEADER)
        for k in await store.list():
            print(describe(k))
        return 0
    if args.command == "export":
        return await export_keys(store, args.file)
    if args.command == "import":
        return await import_keys(store, args.file)
    if await store.revoke(args.key_id):
        print(f"revoked key {args.key_id}")
        return 0
    print(f"llmgw-keys: no key with id {args.key_id}", file=sys.stderr)
    return 1


async def export_keys(store: KeyStore, out: TextIO) -> int:
    stored = await store.export()
    for s in stored:
        out.write(s.to_line().decode() + "\n")
    out.flush()
    print(f"exported {len(stored)} keys", file=sys.stderr)
    return 0


def read_lines(source: TextIO) -> list[StoredKey]:
    """Every key of an export, checked whole before anything is written; a bad line names its number."""
    out = []
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            out.append(StoredKey.from_line(line))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return out


async def import_keys(store: KeyStore, source: TextIO) -> int:
    stored = read_lines(source)
    for s in stored:
        await store.put(s)
    print(f"imported {len(stored)} keys", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(run(args))
    except ValueError as exc:
        print(f"llmgw-keys: {exc}", file=sys.stderr)
        return 2
    except REDIS_DOWN as exc:
        print(f"llmgw-keys: cannot reach Redis: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
