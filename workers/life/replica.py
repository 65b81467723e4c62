"""One supervised replica as its owner keeps it: spec, process, state, restarts, budget; and the
options of its life (restart back-off, start deadlines, the GPU start gate)."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from llmgw_contract.backoff import Backoff
from llmgw_contract.registry import RegistryTiming, ReplicaRecord, ReplicaState
from llmgw_contract.replica_states import INITIAL
from workers.life.process import ReplicaProcess
from workers.planner import DEFAULT_RESERVE_BYTES
from workers.replica.launch import Launch, ReplicaSpec, with_budget
from workers.replica.oom import BACKOFF_STEP, VLLM_DEFAULT_BUDGET, StartReport


@dataclass(frozen=True, slots=True)
class RestartBackoff:
    """Delay before the n-th consecutive restart (:class:`Backoff`); reset after a healthy run.

    Consecutive counts every restart since the replica last ran ``healthy_after_s``, failed starts
    included; past ``give_up_after`` the replica is left FAILED (a fleet change may replace it).
    """

    base_s: float = 1.0
    max_s: float = 30.0
    healthy_after_s: float = 60.0
    give_up_after: int = 10

    def delay(self, consecutive: int) -> float:
        """The wait before the ``consecutive``-th restart in a row (the one back-off, :class:`Backoff`)."""
        return Backoff(self.base_s, self.max_s).delay(consecutive)

    def consecutive_after(self, consecutive: int, ran_s: float) -> int:
        """The count once the replica died (or a restart failed: ``ran_s`` 0) after running ``ran_s``."""
        return 1 if ran_s >= self.healthy_after_s else consecutive + 1

    def gives_up(self, consecutive: int) -> bool:
        """True once the ``consecutive``-th restart in a row is past ``give_up_after``: left FAILED."""
        return consecutive > self.give_up_after


@dataclass(frozen=True, slots=True)
class SupervisorOptions:
    ready_deadline_s: float = 600.0
    timing: RegistryTiming = field(default_factory=RegistryTiming)
    backoff: RestartBackoff = RestartBackoff()
    max_start_attempts: int = 3
    """Attempts for failures other than a GPU out-of-memory (those are bounded by the budget floor)."""
    oom_step: float = BACKOFF_STEP
    gpu_reserve_bytes: int = DEFAULT_RESERVE_BYTES
    """What a vLLM process takes beyond its budget (CUDA context, graphs): part of the free-memory gate."""
    free_memory_deadline_s: float = 120.0
    free_memory_poll_s: float = 1.0
    redis_check_s: float = 0.5
    """How often Redis's run id is read, to republish at once after a Redis restart."""


class Replica:
    """One replica's process and its published state; owned by :class:`workers.life.owner.Supervisor`,
    which alone changes its state, instance, watcher and list membership.

    ``floor`` is the lowest budget the OOM back-off may try: the fleet's
    ``budget.min_gpu_memory_utilization`` unless a plan gives one (``ReplicaPlan.backoff_floor``).
    """

    def __init__(
        self,
        spec: ReplicaSpec,
        launch: Launch,
        log_dir: Path,
        floor: float | None = None,
        slot: int | None = None,
    ) -> None:
        self.spec = spec
        self.slot = spec.index if slot is None else slot
        """The model's replica position it fills (workers.converge.actions); a replacement takes the old
        one's."""
        self.retired = False
        """Set once it is taken out for good: its watch ends, nothing starts it again."""
        self.watcher: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()
        """Held by every action on this replica (start, wake, sleep, retire, replace): one at a time."""
        self.process = ReplicaProcess(launch, log_dir / f"{spec.id}.log")
        self.state = INITIAL
        self.restarts = 0
        self.started_at = 0.0
        self.startup_s = 0.0
        self.floor = spec.model.budget.min_gpu_memory_utilization if floor is None else floor
        self.budgets_tried: list[float] = []
        self.failure: StartReport | None = None
        self.instance = ""
        self.kv_index = "approximate"
        """The prefix index's mode for it (``exact`` while its KV events reach the index)."""
        self.detail = ""
        """Why it is FAILED (published with it; empty in every other state)."""
        """Set by the owner at each start of a process (``Supervisor.launched``), or by adoption."""

    @property
    def on_gpu(self) -> bool:
        return self.spec.device_kind == "gpu"

    @property
    def budget(self) -> float:
        return self.spec.gpu_memory_utilization or VLLM_DEFAULT_BUDGET

    def set_budget(self, budget: float) -> None:
        """Use ``budget`` from the next start on (the spec, the published record and vLLM's argv)."""
        self.spec = dataclasses.replace(self.spec, gpu_memory_utilization=budget)
        self.process.launch = with_budget(self.process.launch, budget)

    def record(self) -> ReplicaRecord:
        s = self.spec
        return ReplicaRecord(
            id=s.id,
            model=s.model.name,
            url=s.url,
            state=self.state,
            concurrency=s.model.concurrency,
            device=f"{s.device_kind}:{s.device}",
            budget=s.budget_label,
            instance=self.instance,
            detail=self.detail,
            kv_index=self.kv_index,
        )


__all__ = ["Replica", "ReplicaState", "RestartBackoff", "SupervisorOptions"]
