"""What one residency-autopilot decision costs (pure logic, :func:`workers.ondemand.autopilot.policy.decide`):
decisions per second on one CPU core for a device of ``--models`` on-demand models of the H200's 7B shape,
from seeded random snapshots (states, load, rates, idle times), none of them I/O.

    .venv/bin/python -m bench.autopilot_decisions --models 8 --seconds 2
"""

from __future__ import annotations

import argparse
import json
import random
import time

from bench.residency.h200 import CARD_BYTES, GIB, H200_7B
from workers.ondemand.autopilot.costs import CostTable
from workers.ondemand.autopilot.policy import decide
from workers.ondemand.autopilot.snapshot import DeviceSnapshot, ModelView, State

STATES: tuple[State, ...] = ("awake", "asleep1", "asleep1", "asleep2", "stopped")


def snapshots(n_models: int, count: int, seed: int = 44) -> list[DeviceSnapshot]:
    """``count`` random snapshots with at most 3 models awake (what fits the card)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        awake = set(rng.sample(range(n_models), min(3, n_models)))
        models = tuple(
            ModelView(
                f"m{i}", "awake" if i in awake else rng.choice(STATES[1:]), H200_7B,
                in_flight=rng.choice([0, 0, 1, 4]) if i in awake else 0, queued=int(rng.random() < 0.1),
                rates=tuple(rng.random() for _ in range(6)), idle_s=rng.random() * 400,
            )
            for i in range(n_models)
        )  # fmt: skip
        out.append(DeviceSnapshot("gpu:0", CARD_BYTES, 64 * GIB, models))
    return out


def measure(n_models: int, seconds: float) -> dict[str, float]:
    snaps, costs = snapshots(n_models, 500), CostTable()
    done, moves, started = 0, 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for s in snaps:
            moves += len(decide(s, costs))
        done += len(snaps)
    took = time.perf_counter() - started
    return {
        "models": n_models,
        "decisions": done,
        "decisions_per_s": round(done / took),
        "us_per_decision": round(took / done * 1e6, 1),
        "moves_per_decision": round(moves / done, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    print(json.dumps(measure(args.models, args.seconds)))


if __name__ == "__main__":
    main()
