"""``llmgw-plan``: does this fleet fit these GPUs, with which budgets, and why."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from llmgw_contract.build_info import add_version_flag
from llmgw_contract.fleet import FleetError
from llmgw_contract.fleet_file import read_fleet
from workers.planner import memory as mem
from workers.planner.model_shape import make_config_loader
from workers.planner.plan import DEFAULT_TARGET, plan_fleet
from workers.planner.report import render
from workers.planner.scaling import at_maximum

H200_BYTES = 143_771 * mem.MIB
"""What an H200 reports as total memory (140.4 GiB)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmgw-plan",
        description="Check that a fleet fits its GPUs and propose a gpu_memory_utilization per replica, "
        "printing the arithmetic (weights, KV per token, in-budget other, reserve). "
        "Exit 1 if it does not fit.",
    )
    add_version_flag(p)
    p.add_argument("--fleet", type=Path, required=True, help="the fleet YAML file")
    p.add_argument(
        "--gpu-memory-gib", type=float, action="append", metavar="GIB",
        help="total memory of a device, once per device in index order (default: 140.4, an H200)",
    )  # fmt: skip
    p.add_argument("--gpus", type=int, help="number of devices, each of --gpu-memory-gib (given once)")
    p.add_argument(
        "--target", type=float, default=DEFAULT_TARGET,
        help=f"fraction of each device that planned budgets plus reserves fill (default {DEFAULT_TARGET})",
    )  # fmt: skip
    p.add_argument(
        "--reserve-gib", type=float, default=mem.DEFAULT_RESERVE_BYTES / mem.GIB,
        help="memory each vLLM process takes outside its budget (default 2.0; measured 1.2-2.6 on an H200)",
    )  # fmt: skip
    p.add_argument(
        "--config-dir", type=Path,
        help="folder with <model name>/config.json or <model name>.json, tried before the model's own source",
    )  # fmt: skip
    p.add_argument(
        "--models-dir", type=Path, default=Path(".cache/models"),
        help="where prepared package models live (default .cache/models)",
    )  # fmt: skip
    return p


def device_sizes(sizes_gib: Sequence[float] | None, gpus: int | None) -> dict[int, int]:
    """Device index -> bytes; raises ValueError when the two options disagree."""
    sizes = [round(g * mem.GIB) for g in sizes_gib] if sizes_gib else [H200_BYTES]
    if gpus is not None:
        if gpus < 1:
            raise ValueError("--gpus must be at least 1")
        if len(sizes) == 1:
            sizes = sizes * gpus
        elif len(sizes) != gpus:
            raise ValueError(f"--gpus {gpus} but --gpu-memory-gib was given {len(sizes)} times")
    if any(s <= 0 for s in sizes):
        raise ValueError("--gpu-memory-gib must be positive")
    return dict(enumerate(sizes))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        devices = device_sizes(args.gpu_memory_gib, args.gpus)
        fleet = read_fleet(args.fleet)
        if not 0 < args.target <= 1:
            raise ValueError("--target must be in (0, 1]")
    except (ValueError, FleetError) as exc:
        print(f"llmgw-plan: {exc}", file=sys.stderr)
        return 2
    if fleet.defaults.device == "cpu":
        print("note: the fleet's defaults.device is cpu; this plans it as if it ran on the GPUs given.\n")
    loader = make_config_loader(args.models_dir, args.config_dir)
    reserve = round(args.reserve_gib * mem.GIB)
    plan = plan_fleet(fleet, devices, loader, target=args.target, reserve_bytes=reserve)
    print(render(plan))
    grown = at_maximum(fleet)
    if grown is None:
        return 0 if plan.fits else 1
    top = plan_fleet(grown, devices, loader, target=args.target, reserve_bytes=reserve)
    print("\nAt every model's scaling.max_replicas (what the scaling rules may start):\n")
    print(render(top))
    return 0 if plan.fits and top.fits else 1


if __name__ == "__main__":
    raise SystemExit(main())
