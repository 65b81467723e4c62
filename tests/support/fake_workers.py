"""``llmgw-workers`` exactly as shipped (:func:`workers.cli.serve`), except that each replica is the FAKE
ENGINE (bench/fake_engine.py) instead of vLLM: the fleet's ``engine.extra_args`` become its flags.
Run as ``python -m tests.support.fake_workers <llmgw-workers arguments>``."""

from __future__ import annotations

import asyncio
import logging
import sys

from workers.cli import LOG_FORMAT, parse_args, serve
from workers.launch import Launch, ReplicaSpec


def fake_launch(spec: ReplicaSpec) -> Launch:
    argv = [sys.executable, "-m", "bench.fake_engine", "--port", str(spec.port), "--model", spec.model.name]
    return Launch([*argv, *spec.model.engine.extra_args])


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(serve(parse_args(sys.argv[1:]), fake_launch))


if __name__ == "__main__":
    main()
