"""The steps of bench/gpu/multigpu.sh that check something, on the lent machine (vLLM) and in the dry run
(FAKE GPU ENGINES, FAKE nvidia-smi): every check prints one line and exits non-zero when it fails.

* ``health``: a URL answers (polled until a deadline);
* ``ready``: every replica in the supervisor's state file lists its model (polled until a deadline);
* ``placement``: each replica runs on the devices of the one placement over the GPUs nvidia-smi reports,
  and its process sees exactly those (``CUDA_VISIBLE_DEVICES``) with NVLink multicast off;
* ``load``: N chat requests to one model through the gateway, 0 errors wanted;
* ``kill``: SIGKILL one replica's process (by its id in the state file).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from llmgw_contract.fleet_file import read_fleet
from workers.host.gpu import gpu_memory
from workers.replica.launch import NVLINK_MULTICAST_OFF
from workers.replica.placement import place_replicas


def entries(state: Path) -> list[dict[str, Any]]:
    try:
        data: list[dict[str, Any]] = json.loads(state.read_text())
    except (OSError, ValueError):
        return []
    return data


def listed(url: str, model: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as r:
            return any(m.get("id") == model for m in json.load(r).get("data", []))
    except (OSError, ValueError):
        return False


def ready(args: argparse.Namespace) -> int:
    end = time.monotonic() + args.deadline
    while time.monotonic() < end:
        es = entries(args.state)
        up = [e for e in es if listed(f"http://{e['host']}:{e['port']}", json.loads(e["model"])["name"])]
        if len(up) >= args.want:
            print(f"ready: {len(up)} replicas: {', '.join(sorted(e['id'] for e in up))}")
            return 0
        time.sleep(0.5)
    print(f"NOT READY after {args.deadline:.0f} s: {len(up)} of {args.want} replicas listed their model")
    return 1


def health(args: argparse.Namespace) -> int:
    end = time.monotonic() + args.deadline
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(args.url, timeout=2):
                print(f"health: {args.url} answers")
                return 0
        except OSError:
            time.sleep(0.5)
    print(f"NO ANSWER from {args.url} in {args.deadline:.0f} s")
    return 1


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(kv.decode(errors="replace").split("=", 1) for kv in raw if b"=" in kv)


def placement(args: argparse.Namespace) -> int:
    fleet = read_fleet(args.fleet)
    gpus = [d.index for d in gpu_memory()]
    want = place_replicas(fleet.models, gpus)
    bad = 0
    for e in sorted(entries(args.state), key=lambda e: e["id"]):
        name = json.loads(e["model"])["name"]
        expected = want[(name, e["slot"])]
        env = environ(e["pid"])
        seen = env.get("CUDA_VISIBLE_DEVICES", "<unset>")
        multicast = {k: env.get(k) for k in NVLINK_MULTICAST_OFF}
        ok = tuple(e["devices"]) == expected and seen == ",".join(map(str, expected))
        ok = ok and multicast == NVLINK_MULTICAST_OFF
        bad += not ok
        print(
            f"placement {e['id']}: {'ok' if ok else 'WRONG'} planned gpu:{','.join(map(str, expected))} "
            f"state gpu:{','.join(map(str, e['devices']))} CUDA_VISIBLE_DEVICES={seen} "
            + " ".join(f"{k}={v}" for k, v in multicast.items())
        )
    print(f"placement: {len(gpus)} GPU(s) reported, {bad} replica(s) wrong")
    return 1 if bad else 0


def chat(gateway: str, model: str, key: str) -> bool:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    req = urllib.request.Request(
        f"{gateway}/v1/chat/completions",
        body.encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status == 200 and bool(json.load(r).get("choices"))
    except (OSError, ValueError, urllib.error.HTTPError):
        return False


def routable(args: argparse.Namespace) -> int:
    """Poll until one chat to ``model`` through the gateway is answered: a replica the supervisor listed is
    routable only once the gateway's registry poll has seen it (a poll interval later)."""
    end = time.monotonic() + args.deadline
    while time.monotonic() < end:
        if chat(args.gateway, args.model, args.key):
            print(f"routable: {args.model} answers through the gateway")
            return 0
        time.sleep(0.5)
    print(f"NOT ROUTABLE: {args.model} unanswered through the gateway for {args.deadline:.0f} s")
    return 1


def load(args: argparse.Namespace) -> int:
    t = time.monotonic()
    with ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda _: chat(args.gateway, args.model, args.key), range(args.n)))
    errors = results.count(False)
    took = time.monotonic() - t
    print(f"load {args.model}: {args.n} requests, {errors} errors in {took:.1f} s")
    return 1 if errors else 0


def kill(args: argparse.Namespace) -> int:
    e = next((e for e in entries(args.state) if e["id"] == args.id), None)
    if e is None:
        print(f"kill: no replica {args.id} in {args.state}")
        return 1
    os.kill(e["pid"], signal.SIGKILL)
    print(f"kill: replica {args.id} pid {e['pid']} on gpu:{','.join(map(str, e['devices']))} SIGKILLed")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="multigpu_check")
    sub = p.add_subparsers(dest="step", required=True)
    h = sub.add_parser("health")
    h.add_argument("--url", required=True)
    h.add_argument("--deadline", type=float, default=60)
    r = sub.add_parser("ready")
    r.add_argument("--state", type=Path, required=True)
    r.add_argument("--want", type=int, required=True)
    r.add_argument("--deadline", type=float, default=60)
    pl = sub.add_parser("placement")
    pl.add_argument("--state", type=Path, required=True)
    pl.add_argument("--fleet", type=Path, required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--gateway", required=True)
    ld.add_argument("--model", required=True)
    ld.add_argument("--n", type=int, default=20)
    ld.add_argument("--concurrency", type=int, default=4)
    ld.add_argument("--key", default=os.environ.get("LLMGW_KEY", "none"))
    rt = sub.add_parser("routable")
    rt.add_argument("--gateway", required=True)
    rt.add_argument("--model", required=True)
    rt.add_argument("--deadline", type=float, default=60)
    rt.add_argument("--key", default=os.environ.get("LLMGW_KEY", "none"))
    k = sub.add_parser("kill")
    k.add_argument("--state", type=Path, required=True)
    k.add_argument("--id", required=True)
    args = p.parse_args(argv)
    steps = {"health": health, "ready": ready, "placement": placement, "routable": routable, "load": load}
    return {**steps, "kill": kill}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
