"""The one placement: which devices (GPU indices or CPU cores) each supervised replica runs on.

Replica ``r`` of a model with tensor-parallel size ``tp`` runs on ``placement.devices[r*tp : r*tp+tp]``
(wrapping around the list); replicas of models without a placement take the known devices round robin,
in fleet order, ``tp`` devices each. The launcher (:func:`workers.replica.launch.plan_replicas`), the
planner and the compose renderer all place through :func:`place_replicas`.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.fleet import Model

Placement = dict[tuple[str, int], tuple[int, ...]]


def take(pool: Sequence[int], start: int, count: int) -> tuple[int, ...]:
    """``count`` devices of ``pool`` from ``start``, wrapping around; () for an empty pool."""
    return tuple(pool[(start + k) % len(pool)] for k in range(count)) if pool else ()


def place_replicas(models: Sequence[Model], device_ids: Sequence[int]) -> Placement:
    """(model name, replica index) -> the devices it runs on, for every supervised replica."""
    spread = sorted(device_ids)
    cursor = 0
    out: Placement = {}
    for model in models:
        if not model.managed:
            continue
        tp = model.engine.tensor_parallel_size
        for r in range(model.replicas):
            if model.placement.devices:
                out[(model.name, r)] = take(model.placement.devices, r * tp, tp)
            else:
                out[(model.name, r)] = take(spread, cursor, tp)
                cursor += tp
    return out
