"""``llmgw-render``: write (or check) the deployment files that come from the fleet file.

llmgw-render k8s     --fleet fleet.yaml   # deploy/k8s/models/*, deploy/k8s/nginx/nginx.conf
llmgw-render compose --fleet fleet.yaml   # compose.yaml, deploy/compose/*
llmgw-render all --check                  # exit 1 when a committed file differs from its rendering
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from llmgw_contract.build_info import add_version_flag
from llmgw_contract.fleet import FleetError
from llmgw_contract.fleet_file import read_fleet
from llmgw_tools.deploy.common import REPO, GpuSizing
from llmgw_tools.deploy.compose import ComposeOptions, render_compose
from llmgw_tools.deploy.k8s import MODELS_DIR, K8sOptions, render_k8s
from llmgw_tools.deploy.k8s_prometheus_operator import render_prometheus_operator_component
from llmgw_tools.deploy.k8s_sentinel import render_sentinel_overlay
from workers.planner.memory import GIB

TARGETS = ("k8s", "compose", "all")
TRIGGERS = ("external-push", "prometheus")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llmgw-render",
        description="Render Kubernetes manifests and compose services from the fleet file.",
    )
    add_version_flag(p)
    p.add_argument("target", choices=TARGETS)
    p.add_argument("--fleet", type=Path, default=REPO / "fleet.yaml", help="fleet YAML file")
    p.add_argument("--k8s-out", type=Path, default=REPO / "deploy" / "k8s", help="the kustomize base")
    p.add_argument("--compose-out", type=Path, default=REPO, help="where compose.yaml goes")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file is out of date")
    p.add_argument(
        "--gpu-memory-gib", type=float, default=GpuSizing().gpu_bytes / GIB,
        help="each GPU's memory, for budgets left auto (default: an H200's 140.4)",
    )  # fmt: skip
    p.add_argument(
        "--gpus", type=int, help="the host's GPUs for compose (default: as many as the fleet places on)"
    )
    p.add_argument(
        "--models-dir", type=Path, default=Path(".cache/models"), help="where config.json files are"
    )
    p.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="CIDR",
        help="a load balancer in front of nginx whose X-Forwarded-For names the client (repeatable)",
    )
    p.add_argument(
        "--trigger", choices=TRIGGERS, default=TRIGGERS[0],
        help="what KEDA scales each model on: llmgw-scaler's push, or a Prometheus query",
    )  # fmt: skip
    p.add_argument(
        "--prometheus-url", default="", metavar="URL",
        help="the Prometheus that the prometheus trigger queries (default: the base's, "
        "http://prometheus.<namespace>.svc:9090)",
    )  # fmt: skip
    return p.parse_args(argv)


def stale_models(root: Path, rendered: dict[str, str]) -> list[Path]:
    """Model manifests of models that left the fleet."""
    folder = root / MODELS_DIR
    keep = {root / p for p in rendered}
    return sorted(f for f in folder.glob("*.yaml") if f not in keep) if folder.is_dir() else []


def differences(root: Path, rendered: dict[str, str]) -> list[str]:
    out = []
    for rel, text in rendered.items():
        path = root / rel
        if not path.is_file() or path.read_text() != text:
            out.append(str(path))
    return out


def write(root: Path, rendered: dict[str, str]) -> list[str]:
    changed = differences(root, rendered)
    for rel, text in rendered.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if str(path) in changed:
            path.write_text(text)
    return changed


def sizing(args: argparse.Namespace) -> GpuSizing:
    return GpuSizing(round(args.gpu_memory_gib * GIB), args.models_dir)


def renderings(args: argparse.Namespace) -> list[tuple[Path, dict[str, str], bool]]:
    """(root, files, prune stale model files) for each target asked for."""
    fleet = read_fleet(args.fleet)
    out: list[tuple[Path, dict[str, str], bool]] = []
    if args.target in ("k8s", "all"):
        k8s = K8sOptions(
            sizing=sizing(args),
            trusted_proxies=tuple(args.trusted_proxy),
            trigger=args.trigger,
            prometheus_server=args.prometheus_url,
        )
        files = render_k8s(fleet, args.fleet.read_text(), k8s) | render_sentinel_overlay(fleet, k8s)
        files |= render_prometheus_operator_component()
        out.append((args.k8s_out, files, True))
    if args.target in ("compose", "all"):
        rel = os.path.relpath(args.fleet.resolve(), args.compose_out.resolve())
        mount = rel if rel.startswith("..") else f"./{rel}"
        compose = ComposeOptions(
            sizing=sizing(args), trusted_proxies=tuple(args.trusted_proxy), gpus=args.gpus
        )
        out.append((args.compose_out, render_compose(fleet, mount, compose), False))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        jobs = renderings(args)
    except (FleetError, ValueError) as exc:
        print(f"llmgw-render: {exc}", file=sys.stderr)
        return 2
    problems: list[str] = []
    for root, files, prune in jobs:
        stale = stale_models(root, files) if prune else []
        if args.check:
            problems += differences(root, files) + [f"{s} (model no longer in the fleet)" for s in stale]
            continue
        for line in write(root, files):
            print(f"wrote {line}")
        for s in stale:
            s.unlink()
            print(f"removed {s}")
    if problems:
        print("llmgw-render: out of date (run `make render`):\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
