"""``llmgw-register``'s command line (:mod:`llmgw_contract.sidecar`): the replicas it watches as their
records in JSON, the registry's timing, the metrics port and the KV-event feeds of exact-index models."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pydantic import ValidationError

from llmgw_contract.build_info import add_version_flag
from llmgw_contract.kv_endpoints import KvEndpoints
from llmgw_contract.registry import RegistryTiming, ReplicaRecord


def parse_record(text: str) -> ReplicaRecord:
    try:
        return ReplicaRecord.model_validate_json(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"not a replica record: {exc}") from exc


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-register", description="Publish externally run vLLM servers into the replica registry."
    )
    add_version_flag(p)
    p.add_argument(
        "--record",
        type=parse_record,
        action="append",
        required=True,
        help='a replica as JSON, e.g. {"id": "m-0", "model": "m", "url": "http://10.0.0.7:8000"} (repeat)',
    )
    p.add_argument("--redis-url", default=os.environ.get("LLMGW_REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--redis-prefix", default=os.environ.get("LLMGW_REDIS_PREFIX", "llmgw"))
    d = RegistryTiming()
    p.add_argument("--ttl", type=float, default=d.ttl_s, help="seconds a record lives without a heartbeat")
    p.add_argument(
        "--drain-grace", type=float, default=d.drain_grace_s, help="seconds in-flight work may take"
    )
    p.add_argument(
        "--drain-settle", type=float, default=d.drain_settle_s, help="seconds before in-flight work is read"
    )
    p.add_argument(
        "--kv-events",
        type=parse_kv_events,
        action="append",
        default=[],
        help="REPLICA_ID=EVENTS,REPLAY: the ZMQ addresses (as this process reaches them) of a replica's "
        "KV events and their replay (vLLM's --kv-events-config endpoint and replay_endpoint): its entries "
        "in the prefix index follow them (exact mode; repeat per replica)",
    )
    p.add_argument(
        "--kv-model-dir", type=Path, default=None, help="the models' tokenizer folder (with --kv-events)"
    )
    p.add_argument(
        "--kv-model",
        nargs=2,
        action="append",
        default=[],
        metavar=("MODEL", "DIR"),
        help="one model's tokenizer folder (with --kv-events; repeat per model; before --kv-model-dir)",
    )
    p.add_argument(
        "--kv-chat-template",
        nargs=2,
        action="append",
        default=[],
        metavar=("MODEL", "TEMPLATE"),
        help="the chat template vLLM serves the model with (a file or the template): the fleet's "
        "engine.chat_template (default: the tokenizer folder's)",
    )
    p.add_argument("--metrics-host", default="0.0.0.0")
    p.add_argument("--metrics-port", type=int, default=9400, help="0: no metrics endpoint")
    return p.parse_args(argv)


def parse_kv_events(text: str) -> tuple[str, KvEndpoints]:
    rid, _, addresses = text.partition("=")
    events, _, replay = addresses.partition(",")
    if not rid or not events or not replay:
        raise argparse.ArgumentTypeError(f"expected REPLICA_ID=EVENTS,REPLAY, got {text!r}")
    return rid, KvEndpoints(events, replay)
