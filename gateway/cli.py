"""``llmgw-gateway``: serve one gateway replica."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import uvicorn
from pydantic import ValidationError

from contract.fleet import FleetError
from gateway.app import create_app
from gateway.settings import GatewaySettings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-gateway",
        description="Serve one gateway replica. Settings come from LLMGW_* environment variables; "
        "the options below override them.",
    )
    p.add_argument("--fleet", type=Path, help="fleet YAML file (LLMGW_FLEET_FILE)")
    p.add_argument("--redis-url", help="Redis URL (LLMGW_REDIS_URL)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9000)
    p.add_argument("--gateway-id", help="name of this replica (LLMGW_GATEWAY_ID)")
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> GatewaySettings:
    overrides = {"fleet_file": args.fleet, "redis_url": args.redis_url, "gateway_id": args.gateway_id}
    return GatewaySettings(**{k: v for k, v in overrides.items() if v is not None})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = settings_from(args)
        app = create_app(settings)
    except (ValidationError, FleetError) as exc:
        print(f"llmgw-gateway: bad settings: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.basicConfig(level=settings.log_level, format=LOG_FORMAT, stream=sys.stdout)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        proxy_headers=False,
        log_level="warning",
        timeout_graceful_shutdown=30,
        backlog=4096,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
