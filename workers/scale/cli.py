"""``llmgw-scaler``: KEDA's external scaler for the fleet's models, served over gRPC from Redis.

Stateless beyond Redis: run several replicas behind one Service; KEDA's ``external-push`` trigger holds
one stream per ScaledObject to whichever answers."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import grpc  # type: ignore[import-untyped]

from llmgw_contract.build_info import add_version_flag
from llmgw_contract.fleet import FleetError
from llmgw_contract.logs import configure_logging
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import connect
from workers.scale.rules import FleetRules
from workers.scale.service import DEFAULT_POLL_S, DemandScaler, add_to_server

GRACE_S = 2.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmgw-scaler",
        description="KEDA's external scaler (externalscaler.proto) for the fleet's models: activity, the "
        "target per replica and the demand (queued + in flight over every gateway) read from Redis.",
    )
    p.add_argument("--fleet", type=Path, required=True, help="fleet YAML file (each model's scaling rule)")
    p.add_argument("--redis-url", default=os.environ.get("LLMGW_REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--redis-prefix", default=os.environ.get("LLMGW_REDIS_PREFIX", "llmgw"))
    p.add_argument("--listen", default="0.0.0.0:9090", help="gRPC address (host:port)")
    p.add_argument(
        "--poll-s", type=float, default=DEFAULT_POLL_S,
        help="how often each StreamIsActive stream reads its model's demand",
    )  # fmt: skip
    add_version_flag(p)
    return p


async def serve(args: argparse.Namespace, rules: FleetRules) -> int:
    """Serve until SIGTERM or SIGINT; open streams end within ``GRACE_S``."""
    redis = connect(args.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    server = grpc.aio.server()
    add_to_server(DemandScaler(redis, RedisKeys(args.redis_prefix), rules, args.poll_s), server)
    server.add_insecure_port(args.listen)
    await server.start()
    logging.getLogger("llmgw.scaler").info("serving KEDA's external scaler on %s", args.listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(GRACE_S)
    await redis.aclose()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Refuse at start (exit 2, one line) a fleet file that cannot be read; else serve."""
    args = build_parser().parse_args(argv)
    configure_logging(logging.INFO)  # text, or JSON lines with LLMGW_LOG_FORMAT=json
    try:
        rules = FleetRules(args.fleet)
    except FleetError as exc:
        print(f"llmgw-scaler: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(args, rules))


if __name__ == "__main__":
    sys.exit(main())
