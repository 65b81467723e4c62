"""What a plan says: each model's memory estimate, each replica's budget and device, each device's sum.

The planner (:mod:`workers.planner.plan`) makes these; :mod:`workers.planner.report` prints them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from workers.planner import memory as mem
from workers.planner.model_shape import ModelShape, Quantization

DEFAULT_TARGET = 0.85
"""Fraction of each device that planned budgets plus reserves fill."""

BudgetFrom = Literal["fleet", "planned"]


@dataclass(frozen=True)
class ModelEstimate:
    """One model's memory, independent of where its replicas land."""

    name: str
    shape: ModelShape
    params: mem.ParamCount
    weight_dtype: str
    act_bytes: float
    quantization: Quantization | None
    weight_bytes: int
    kv_dtype: str
    kv_dtype_bytes: float
    tp: int
    max_model_len: int
    concurrency: int
    max_num_seqs: int | None

    @property
    def tokens_wanted(self) -> int:
        return self.max_model_len * self.concurrency

    @property
    def weight_bytes_per_rank(self) -> int:
        return math.ceil(self.weight_bytes / self.tp)

    @property
    def kv_bytes_per_token(self) -> int:
        """Per rank (all ranks hold the same number of tokens)."""
        return mem.kv_bytes_per_token(self.shape, self.kv_dtype_bytes, self.tp)

    def kv_bytes_for(self, tokens: int) -> int:
        return mem.round_up_tokens(tokens) * self.kv_bytes_per_token

    @property
    def weight_bits(self) -> float:
        return self.quantization.bits if self.quantization else self.act_bytes * 8

    def seqs_on(self, device_bytes: int) -> int:
        return self.max_num_seqs or mem.default_max_num_seqs(device_bytes)


@dataclass(frozen=True)
class ReplicaPlan:
    """One vLLM process (per rank figures for tensor-parallel replicas)."""

    model: str
    replica: int
    devices: tuple[int, ...]
    device_bytes: int
    gpu_memory_utilization: float
    budget_from: BudgetFrom
    weight_bytes: int
    other_bytes: int
    kv_bytes: int
    kv_tokens: int
    kv_tokens_wanted: int
    reserve_bytes: int
    min_budget: float
    start_budget: float
    floor: float

    @property
    def budget_bytes(self) -> int:
        return math.floor(self.gpu_memory_utilization * self.device_bytes)

    @property
    def used_bytes(self) -> int:
        return self.budget_bytes + self.reserve_bytes

    @property
    def backoff_floor(self) -> float:
        """Below this the OOM back-off should stop: the fleet's floor, or where vLLM cannot start."""
        return max(self.floor, self.start_budget)


@dataclass(frozen=True)
class DevicePlan:
    device: int
    total_bytes: int
    processes: tuple[tuple[str, int, float], ...]
    used_bytes: int

    @property
    def budget_sum(self) -> float:
        return round(sum(b for _, _, b in self.processes), 6)

    @property
    def reserve_sum(self) -> int:
        return self.used_bytes - sum(math.floor(b * self.total_bytes) for _, _, b in self.processes)

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.total_bytes

    @property
    def fraction(self) -> float:
        return self.used_bytes / self.total_bytes


@dataclass(frozen=True)
class Plan:
    models: tuple[ModelEstimate, ...]
    replicas: tuple[ReplicaPlan, ...]
    devices: tuple[DevicePlan, ...]
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    target: float
    reserve_bytes: int

    @property
    def fits(self) -> bool:
        return not self.problems

    def replica(self, model: str, index: int) -> ReplicaPlan:
        for r in self.replicas:
            if r.model == model and r.replica == index:
                return r
        raise KeyError(f"no replica {index} of model {model!r} in the plan")
