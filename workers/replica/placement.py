"""The one placement: which devices (GPU indices or CPU cores) each supervised replica runs on.

Replica ``r`` of a model with tensor-parallel size ``tp`` runs on ``placement.devices[r*tp : r*tp+tp]``
(wrapping around the list); replicas of models without a placement take the known devices round robin,
in fleet order, ``tp`` devices each. The launcher (:func:`workers.replica.launch.plan_replicas`), the
planner and the compose renderer all place through :func:`place_replicas`.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw_contract.fleet import Model

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


def placement_problems(models: Sequence[Model], device_ids: Sequence[int], kind: str = "gpu") -> list[str]:
    """One line per supervised replica the host's devices cannot hold: a replica placed on a device the
    host does not have, or one that needs more distinct devices (``tensor_parallel_size``) than it has.
    Each line names the model, the devices and the arithmetic; an empty list: the fleet can be placed."""
    known = sorted(device_ids)
    have = f"the host has {len(known)} {kind}(s): {', '.join(map(str, known)) or 'none'}"
    placed = place_replicas(models, known)
    out: list[str] = []
    for model in (m for m in models if m.managed):
        tp = model.engine.tensor_parallel_size
        for r in range(model.replicas):
            devs = placed[(model.name, r)]
            unknown = sorted(set(devs) - set(known))
            if unknown:
                out.append(
                    f"model {model.name!r} replica {r}: placement.devices puts it on {kind} "
                    f"{','.join(map(str, devs))} but {have} (no {','.join(map(str, unknown))}). "
                    "Change placement.devices."
                )
            elif len(set(devs)) < tp:
                out.append(
                    f"model {model.name!r} replica {r}: tensor_parallel_size {tp} needs {tp} distinct "
                    f"devices but {have}. Change tensor_parallel_size or run it on a larger host."
                )
    return out
