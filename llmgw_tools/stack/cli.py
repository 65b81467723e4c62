"""``llmgw-stack``: the embedded default stack in the foreground; Ctrl-C or SIGTERM stops all of it, SIGHUP
re-reads the fleet file, and a kill -9 of it takes its services with it (not the vLLM replicas)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from pathlib import Path

from llmgw_contract.build_info import add_version_flag
from llmgw_contract.fleet import FleetError
from llmgw_contract.logs import configure_logging
from llmgw_contract.supervision import EXIT_TASK_DIED, TaskGroup
from llmgw_tools.stack.keeper import KeepPolicy, keep
from llmgw_tools.stack.redis_topology import KINDS
from llmgw_tools.stack.stack import REPO, Stack, StackConfig


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-stack",
        description="Run Redis, the vLLM workers, gateway replicas, nginx and Prometheus on this machine.",
    )
    add_version_flag(p)
    p.add_argument("--fleet", type=Path, default=REPO / "fleet.yaml", help="fleet YAML file")
    p.add_argument("--run-dir", type=Path, default=REPO / ".run", help="logs, pid files and data")
    p.add_argument("--port", type=int, default=8080, help="nginx port (the public endpoint)")
    p.add_argument("--gateways", type=int, default=2, help="number of gateway replicas")
    p.add_argument("--gateway-port", type=int, default=9001, help="port of the first gateway replica")
    p.add_argument("--redis-port", type=int, default=6390, help="the state Redis (never persisted)")
    p.add_argument(
        "--keys-redis-port",
        type=int,
        default=6391,
        help="the API key store (persisted in RUN_DIR/redis-keys)",
    )
    p.add_argument(
        "--redis",
        choices=KINDS,
        default="single",
        help="the state Redis' topology: one server on --redis-port, or Sentinel (master, replica, three"
        " sentinels) or a 6-node Cluster on free loopback ports",
    )
    p.add_argument("--prometheus-port", type=int, default=9090)
    p.add_argument("--supervisor-port", type=int, default=9400, help="the supervisor's /metrics")
    p.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus")
    return p.parse_args(argv)


def ready_line(stack: Stack, took_s: float) -> str:
    c, first = stack.config, stack.fleet.models[0]
    example = (
        f"curl -s {c.nginx_url}/v1/chat/completions -H 'content-type: application/json' "
        f'-d \'{{"model": "{first.aliases[0] if first.aliases else first.name}", '
        f'"messages": [{{"role": "user", "content": "Hello!"}}]}}\''
    )
    prom = f"; Prometheus http://{c.host}:{c.prometheus_port}" if c.prometheus_port else ""
    served = ", ".join(stack.expected())
    return f"READY in {took_s:.0f} s: {c.nginx_url}/v1 serves {served}{prom}\n  try: {example}"


async def run(config: StackConfig) -> int:
    """Bring the stack up, keep it (each service restarted when it dies, one supervised task each) until
    SIGINT or SIGTERM, then stop it. SIGHUP re-reads the fleet file and stops nothing. Its services die
    with it even when it is killed (their parent-death signal). Returns the exit status: 1 when it could
    not come up, :data:`EXIT_TASK_DIED` when a keeper died."""
    stack, started = Stack(config), time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, stack.reload)
    tasks = TaskGroup()
    up = asyncio.create_task(stack.up())
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({up, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not up.done():
            return 0
        up.result()
        print(ready_line(stack, time.monotonic() - started), flush=True)
        for service in stack.services:
            tasks.spawn(f"keep {service.name}", keep(service, KeepPolicy()))
        if await tasks.wait_died_or(stop):
            logging.getLogger("llmgw.stack").error("a keeper died (%s): stopping", ",".join(tasks.dead))
            return EXIT_TASK_DIED
        return 0
    except RuntimeError as exc:
        logging.getLogger("llmgw.stack").error("%s", exc)
        return 1
    finally:
        up.cancel()
        waiter.cancel()
        await tasks.close()
        await stack.down()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    configure_logging(logging.INFO)  # text, or JSON lines with LLMGW_LOG_FORMAT=json
    ports = tuple(args.gateway_port + i for i in range(args.gateways))
    config = StackConfig(
        fleet_file=args.fleet.resolve(),
        run_dir=args.run_dir.resolve(),
        nginx_port=args.port,
        gateway_ports=ports,
        prometheus_port=0 if args.no_prometheus else args.prometheus_port,
        redis_port=args.redis_port,
        redis_topology=args.redis,
        keys_redis_port=args.keys_redis_port,
        supervisor_metrics_port=args.supervisor_port,
    )
    taken = config.ports_in_use()
    if taken:
        for line in taken:
            print(f"llmgw-stack: {line} (make run STACK_ARGS='...')", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(config))
    except FleetError as exc:
        print(f"llmgw-stack: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
