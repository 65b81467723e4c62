"""``llmgw-fleet``: validate a fleet file and show what it declares."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.routing import load_routable_fleet
from llmgw_contract.build_info import add_version_flag
from llmgw_contract.fleet import FleetError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="llmgw-fleet", description="Validate a fleet file; errors name the field path."
    )
    add_version_flag(p)
    p.add_argument("fleet", type=Path, help="fleet YAML file")
    args = p.parse_args(argv)
    try:
        fleet = load_routable_fleet(args.fleet)
    except FleetError as exc:
        print(exc, file=sys.stderr)
        return 1
    for m in fleet.models:
        where = (
            f"{m.replicas} replica(s)" if m.managed else f"endpoints {', '.join(e.url for e in m.endpoints)}"
        )
        names = ", ".join(m.aliases) or "-"
        print(f"{m.name}: aliases {names}; {where}; policy {m.policy}; concurrency {m.concurrency}")
    print(f"{args.fleet}: valid ({len(fleet.models)} models)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
