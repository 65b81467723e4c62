"""One scaling rule per model (the fleet file's ``scaling:``) and the arithmetic of desired replicas.

:class:`Scaling` is the schema; :func:`scaling_rule` the rule a model runs with (without ``scaling:``,
today's fixed count: minimum = maximum = ``replicas``). :func:`check_scaling` refuses, at validation,
what cannot work: a minimum above the maximum, ``replicas`` outside them, a minimum of 0 for a model
whose requests nothing holds while it has no replica (only ``activation: on_demand`` waits in the shared
queue at capacity zero; an ``always`` model with no ready replica answers 503 at once), and a maximum
whose replicas ``placement.devices`` cannot give ``tensor_parallel_size`` distinct devices each. Whether
the maximum's replicas fit the devices' memory is the planner's check (:mod:`workers.planner.cli`).

:class:`Autoscale` is the pure arithmetic (no I/O, no clock of its own): desired replicas from the
demand (requests in flight + queued), the rule, the current count and when the demand last needed the
current count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, model_validator

if TYPE_CHECKING:
    from llmgw_contract.fleet import Model

MAX_REPLICAS = 64
DEFAULT_SCALE_DOWN_DELAY_S = 600.0


class Scaling(BaseModel):
    """How many replicas the model runs as its demand changes: between ``min_replicas`` and
    ``max_replicas``, ``target_per_replica`` requests (in flight + queued) per replica. Absent: the model
    keeps ``replicas`` (minimum = maximum = replicas)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    min_replicas: Annotated[int, Field(ge=0, le=MAX_REPLICAS)]
    """The fewest replicas; 0 (scale to zero) only for `activation: on_demand`, whose requests wait in the
    shared queue while no replica is ready."""
    max_replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS)]
    """The most replicas; each needs `tensor_parallel_size` distinct devices of `placement.devices`."""
    target_per_replica: Annotated[int, Field(ge=1, le=4096)] | None = None
    """Requests in flight + queued one replica should carry; unset: the model's `concurrency`."""
    scale_down_delay_s: Annotated[float, Field(ge=0)] = DEFAULT_SCALE_DOWN_DELAY_S
    """How long the demand must stay below the current count's before a replica goes (KEDA: the HPA's
    scale-down window and the cooldown before zero)."""

    @model_validator(mode="after")
    def _min_not_above_max(self) -> Scaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}")
        return self


@dataclass(frozen=True, slots=True)
class ScalingRule:
    """The rule a model runs with (the fleet's ``scaling:`` with its defaults filled in)."""

    min_replicas: int
    max_replicas: int
    target_per_replica: int
    scale_down_delay_s: float

    @property
    def fixed(self) -> bool:
        return self.min_replicas == self.max_replicas


def scaling_rule(model: Model) -> ScalingRule:
    """The model's rule; without ``scaling:``, ``replicas`` fixed (today's behaviour)."""
    s = model.scaling
    if s is None:
        n = model.replicas
        return ScalingRule(n, n, model.concurrency, DEFAULT_SCALE_DOWN_DELAY_S)
    target = s.target_per_replica or model.concurrency
    return ScalingRule(s.min_replicas, s.max_replicas, target, s.scale_down_delay_s)


def devices_problem(devices: list[int], tp: int, count: int) -> str | None:
    """Why ``count`` replicas cannot each run on ``tp`` distinct devices of ``devices`` (replica r takes
    ``devices[r*tp : r*tp+tp]``, wrapping around); None when they can, or when no devices are given."""
    slices = (
        [[devices[(r * tp + k) % len(devices)] for k in range(tp)] for r in range(count)] if devices else []
    )
    if all(len(set(s)) == tp for s in slices):
        return None
    return (
        f"placement.devices {devices}: each replica needs tensor_parallel_size ({tp}) distinct devices; "
        f"replica r runs on devices[r*{tp} : r*{tp}+{tp}], wrapping around"
    )


def _problems(s: Scaling, data: dict[str, Any]) -> list[str]:
    """What cannot work in ``s`` given the model's fields validated before it (``data``)."""
    out = []
    replicas = data.get("replicas")
    if replicas is not None and not s.min_replicas <= replicas <= s.max_replicas:
        out.append(f"replicas {replicas} (the count it starts with) is outside [min_replicas, max_replicas]")
    if s.min_replicas == 0 and data.get("activation") != "on_demand":
        out.append(
            "min_replicas 0 needs activation: on_demand: only an on-demand model's requests wait in the "
            "shared queue while it has no replica (an `always` model answers 503 at once)"
        )
    placement, engine = data.get("placement"), data.get("engine")
    if placement is not None and engine is not None:
        problem = devices_problem(placement.devices, engine.tensor_parallel_size, s.max_replicas)
        if problem:
            out.append(f"max_replicas {s.max_replicas}: {problem}")
    return out


def check_scaling(value: Scaling | None, info: ValidationInfo) -> Scaling | None:
    """The model's ``scaling:`` once it can work with the model's other fields; else ValueError."""
    if value is None:
        return None
    problems = _problems(value, info.data)
    if problems:
        raise ValueError("; ".join(problems))
    return value


ScalingField = Annotated[Scaling | None, AfterValidator(check_scaling)]
"""The fleet's ``scaling:`` field type (declared after the fields it is checked against)."""


@dataclass(frozen=True, slots=True)
class Autoscale:
    """Desired replicas for one model (pure): up at once to what the demand needs, down only once the
    demand has not needed the current count for ``scale_down_delay_s``."""

    rule: ScalingRule

    def needed(self, demand: float) -> int:
        """Replicas the demand needs within the rule: ceil(demand / target), at least one while anything
        waits or runs, within [min, max]."""
        want = math.ceil(max(0.0, demand) / self.rule.target_per_replica)
        if demand > 0:
            want = max(1, want)
        return max(self.rule.min_replicas, min(self.rule.max_replicas, want))

    def busy(self, demand: float, current: int) -> bool:
        """True while the demand needs at least ``current`` replicas (the moment a caller records)."""
        return self.needed(demand) >= current

    def desired(self, demand: float, current: int, last_busy_s: float | None, now_s: float) -> int:
        """The count to run now. ``last_busy_s``: when the demand last needed ``current`` replicas (None:
        never seen); a lower count is desired only ``scale_down_delay_s`` after it."""
        want = self.needed(demand)
        if want >= current:
            return want
        if last_busy_s is not None and now_s - last_busy_s < self.rule.scale_down_delay_s:
            return min(current, self.rule.max_replicas)
        return want
