"""``llmgw-gateway``: serve one gateway replica."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import ipaddress
import logging
import math
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI
from pydantic import ValidationError

from gateway.app import create_app
from gateway.edge.one_write import door_protocol
from gateway.settings import GatewaySettings
from gateway.shutdown import OpenRequests, graceful_s
from gateway.tracing import TraceIdFilter
from gateway.upstream.credentials import CredentialError
from llmgw_contract.build_info import add_version_flag
from llmgw_contract.extras import MissingExtra
from llmgw_contract.fleet import FleetError
from llmgw_contract.logs import configure_logging


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-gateway",
        description="Serve one gateway replica. Settings come from LLMGW_* environment variables; "
        "the options below override them.",
    )
    add_version_flag(p)
    p.add_argument("--fleet", type=Path, help="fleet YAML file (LLMGW_FLEET_FILE)")
    p.add_argument("--redis-url", help="Redis URL (LLMGW_REDIS_URL)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9000)
    p.add_argument("--gateway-id", help="name of this replica (LLMGW_GATEWAY_ID)")
    return p.parse_args(argv)


def open_bind_refusal(host: str, settings: GatewaySettings) -> str | None:
    """Why the gateway must not serve ``host``: a non-loopback address with API keys off is an open
    proxy, refused unless ``LLMGW_ALLOW_OPEN=true``; None when it may."""
    if settings.auth or settings.allow_open or is_loopback(host):
        return None
    return (
        f"refusing to serve {host} with API keys off (an open proxy): set LLMGW_AUTH=true, bind a "
        "loopback address, or set LLMGW_ALLOW_OPEN=true when something in front authenticates"
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost may resolve anywhere
        return False


def settings_from(args: argparse.Namespace) -> GatewaySettings:
    overrides = {"fleet_file": args.fleet, "redis_url": args.redis_url, "gateway_id": args.gateway_id}
    return GatewaySettings(**{k: v for k, v in overrides.items() if v is not None})


# The collector's first threshold: young objects allocated before a collection (CPython's is 700; a
# request allocates a few hundred, so the default collects every couple of requests).
GC_THRESHOLD = (50_000, 20, 100)


def quiet_gc() -> None:
    """Once started: what was built so far (modules, the app, its settings) moves out of the
    collector's sight (``gc.freeze``), and young collections run every ``GC_THRESHOLD[0]``
    allocations. The request path's garbage is freed by reference counting; cycles are still
    collected, less often (the memory soak of bench/hotpath.py watches this)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def hangup() -> None:
    """SIGHUP (a closed terminal, a keeper passing it on) would kill the gateway by default and cut its
    streams without their error event: it is logged and changes nothing (the fleet file is followed
    without it; SIGTERM stops the gateway)."""
    logging.getLogger("llmgw.gateway").warning(
        "SIGHUP ignored: the gateway follows the fleet file by itself; SIGTERM stops it"
    )


class GatewayServer(uvicorn.Server):
    """uvicorn's server that also tells the gateway when it is told to stop (SIGTERM, SIGINT), so that
    the gateway ends its open requests in a planned way within uvicorn's graceful period; SIGHUP is
    logged and ignored (:func:`hangup`)."""

    def __init__(self, config: uvicorn.Config, open_requests: OpenRequests) -> None:
        super().__init__(config)
        self.open_requests = open_requests
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop.add_signal_handler(signal.SIGHUP, hangup)
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        quiet_gc()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self.loop is not None:  # a signal handler: hand over to the event loop
            self.loop.call_soon_threadsafe(self.open_requests.stop)


def server_config(app: FastAPI, settings: GatewaySettings, host: str, port: int) -> uvicorn.Config:
    """uvicorn's settings: idle keep-alive longer than nginx's (nginx never reuses a connection the
    gateway is closing), and a graceful period longer than the open requests' grace."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=door_protocol(settings),  # uvicorn's httptools protocol: one write per response, the door
        access_log=False,
        proxy_headers=False,
        log_level="warning",
        log_config=None
        if settings.log_format == "json"
        else uvicorn.config.LOGGING_CONFIG,  # JSON: uvicorn's too
        timeout_keep_alive=math.ceil(settings.keepalive_timeout_s),
        timeout_graceful_shutdown=math.ceil(graceful_s(settings.shutdown_grace_s)),
        backlog=4096,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = settings_from(args)
        refusal = open_bind_refusal(args.host, settings)
        if refusal is not None:
            print(f"llmgw-gateway: {refusal}", file=sys.stderr)
            return 2
        app = create_app(settings)
    except (ValidationError, FleetError, CredentialError, MissingExtra) as exc:
        print(f"llmgw-gateway: bad settings: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("httpx").setLevel(logging.WARNING)
    configure_logging(settings.log_level, settings.log_format)
    for handler in logging.getLogger().handlers:
        handler.addFilter(TraceIdFilter())  # a request's lines carry its trace id beside its request id
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    config = server_config(app, settings, args.host, args.port)
    server = GatewayServer(config, app.state.gateway.open_requests)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else 1


if __name__ == "__main__":
    raise SystemExit(main())
