"""Which way a replica sleeps: stopped, or in place at the level :func:`choose_level` picks (a GPU
replica launched with vLLM's sleep mode); and the level each replica sleeps at now."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmgw_contract.fleet import Fleet, Model
from workers.life.replica import Replica
from workers.ondemand.sleepers import Sleeper
from workers.ondemand.sleepers.level import SleepLevel, choose_level
from workers.ondemand.sleepers.process_stop import ProcessStop
from workers.ondemand.sleepers.vllm_sleep import VllmSleep

SLEEP_MODE_FLAG = "--enable-sleep-mode"
GIB = 1 << 30


def model_of(fleet: Fleet | None, r: Replica) -> Model:
    """The replica's model as the fleet file says now (activation may change without a restart)."""
    if fleet is not None:
        for m in fleet.models:
            if m.name == r.spec.model.name:
                return m
    return r.spec.model


class SleepChoice:
    """The sleep strategies and the choice between them."""

    def __init__(
        self,
        stopper: ProcessStop,
        vllm: VllmSleep,
        weights: Callable[[Replica], int],
        fleet: Callable[[], Fleet | None],
        replicas: Callable[[], Sequence[Replica]],
    ) -> None:
        self.stopper, self.vllm, self.weights = stopper, vllm, weights
        self.fleet, self.replicas = fleet, replicas
        self.levels: dict[str, SleepLevel] = {}
        """Replica id -> the level it sleeps at now (0: its process is stopped or was never started)."""
        self.stop_instead: set[str] = set()
        """Models whose sleep in place kept half or more of their memory: they are stopped instead."""

    def sleep_mode(self, r: Replica) -> bool:
        """True when the replica sleeps in place (a GPU replica launched with vLLM's sleep mode)."""
        return r.on_gpu and SLEEP_MODE_FLAG in r.process.argv and r.spec.model.name not in self.stop_instead

    def sleeper(self, r: Replica, level: SleepLevel) -> Sleeper:
        """The strategy that puts ``r`` to sleep at, or wakes it from, ``level``."""
        return self.vllm if level or self.sleep_mode(r) else self.stopper

    def level_for(self, r: Replica) -> SleepLevel:
        """The level ``r`` goes to sleep at now (0: its process stops)."""
        if not self.sleep_mode(r):
            return 0
        model = model_of(self.fleet(), r)
        fleet = self.fleet()
        budget = int((fleet.defaults.sleep_host_ram_gib if fleet is not None else 0) * GIB)
        held = sum(
            self.weights(x) for x in self.replicas()
            if x is not r and self.levels.get(x.spec.id) == 1 and x.process.alive
        )  # fmt: skip
        return choose_level(
            model.sleep.level, self.weights(r), budget, held, model.engine.load_format != "dummy"
        )
