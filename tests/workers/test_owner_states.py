"""The table of a replica's states (:mod:`llmgw_contract.replica_states`) driven through the real owner: a
Hypothesis state machine calls :class:`workers.life.owner.Supervisor`'s own verbs (start, park, wake,
sleep, replace, retire, fail, drain) in random order on replicas whose processes are FAKE PROCESSES
(testing/fake_process.py) that start, fail and die as the machine says, with a real Redis behind the
registry. Every state change the owner makes (seen through its ``on_change``) is checked against the
table, every published record against the owner's state, and no background watch may fail."""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ROUTABLE, RegistryTiming, RegistryWriter, ReplicaState, read_registry
from llmgw_contract.replica_states import INITIAL, allowed
from testing.fake_process import FakeProcess
from testing.poll import until
from testing.procs import free_port
from workers.life.owner import Replica, RestartBackoff, Supervisor, SupervisorOptions
from workers.replica.launch import Launch, ReplicaSpec

S = ReplicaState
T = TypeVar("T")
OPTIONS = SupervisorOptions(
    ready_deadline_s=1,
    timing=RegistryTiming(ttl_s=5, drain_settle_s=0.0, drain_poll_s=0.0, drain_grace_s=0.0),
    backoff=RestartBackoff(base_s=0.001, max_s=0.004, give_up_after=2),
    max_start_attempts=1,
)
MODEL = parse_fleet("models:\n - name: m\n   source: {path: /m}\n").models[0]


class Failures(logging.Handler):
    """Every log record with an exception attached (a watch that broke, an illegal move swallowed)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None:
            self.seen.append(self.format(record))


class OwnerMachine(RuleBasedStateMachine):
    """One owner, its replicas, the verbs its callers (reconciler, activator, CLI) call."""

    replicas = Bundle("replicas")

    def __init__(self, redis_url: str, tmp: Path) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp, self.pids, self.ids = tmp, itertools.count(10_000_000), itertools.count()
        self.redis = aioredis.Redis.from_url(redis_url)
        self.keys = RedisKeys(f"own{uuid.uuid4().hex[:6]}")
        self.client = httpx.AsyncClient(timeout=0.2, verify=False)  # plain http: no CA bundle to load
        self.seen: dict[str, ReplicaState] = {}
        self.moves: list[tuple[str, ReplicaState, ReplicaState]] = []
        self.failures = Failures()
        logging.getLogger("llmgw.workers").addHandler(self.failures)
        registry = RegistryWriter(self.redis, self.keys, OPTIONS.timing)
        self.sup = Supervisor([], registry, self.client, OPTIONS, on_change=self.changed)

    def run(self, step: Awaitable[T]) -> T:
        return self.loop.run_until_complete(step)

    def changed(self, r: Replica) -> None:
        """The owner's on_change: every state change it made, checked at the next invariant."""
        old = self.seen.get(r.spec.id, INITIAL)
        if r.state is not old:
            self.moves.append((r.spec.id, old, r.state))
        self.seen[r.spec.id] = r.state

    def replica(self, fail_starts: int = 0) -> Replica:
        index = next(self.ids)
        spec = ReplicaSpec(MODEL, index, free_port(), (0,))
        r = Replica(spec, Launch(["fake"]), self.tmp)
        r.process = FakeProcess(r.process.launch, r.process.log_file, self.pids)
        r.process.fail_starts = fail_starts
        return r

    @staticmethod
    def fake(r: Replica) -> FakeProcess:
        assert isinstance(r.process, FakeProcess)
        return r.process

    def settle(self) -> None:
        """Let the owner's watches restart what died (or give up) before the next verb."""
        self.run(until(lambda: not any(r.state is S.STARTING for r in self.sup.replicas), 10, "settled"))

    # --- the verbs, as their callers call them ---------------------------------------------------------

    @rule(target=replicas, ok=st.booleans())
    def start(self, ok: bool) -> Replica:
        """The reconciler starts a new replica (always-on model)."""
        r = self.replica(fail_starts=0 if ok else 10)
        assert self.run(self.sup.start(r)) is ok
        return r

    @rule(target=replicas)
    def park(self) -> Replica:
        """The reconciler lists an on-demand model's new replica asleep."""
        r = self.replica()
        self.run(self.sup.park(r))
        return r

    @rule(r=replicas, ok=st.booleans())
    def wake(self, r: Replica, ok: bool) -> None:
        """The activator wakes an asleep replica (a request waits)."""
        assume(not r.retired and r.state is S.ASLEEP)
        process = self.fake(r)
        process.fail_starts = 0 if ok else 1

        async def bring_up(r: Replica) -> None:
            if not process.alive:
                await process.start()
            await process.wait_until_listed(r.spec.url, MODEL.name, 1, self.client)

        assert self.run(self.sup.wake(r, bring_up)) is ok

    @rule(r=replicas, in_place=st.booleans())
    def sleep(self, r: Replica, in_place: bool) -> None:
        """The activator puts an idle replica to sleep (stopped, or asleep in place); a second sleep of
        one already asleep (a tick that raced a room-making sleep) leaves it as it is."""
        assume(not r.retired and (r.state in ROUTABLE or r.state is S.ASLEEP))

        async def put_to_sleep(r: Replica) -> None:
            if not in_place:
                await r.process.stop()

        async def announce(r: Replica) -> None:
            return None

        before, pid = r.state, r.process.pid
        slept = self.run(self.sup.sleep(r, put_to_sleep, announce))
        assert r.state is S.ASLEEP
        if before is S.ASLEEP:
            assert not slept and r.process.pid == pid

    @rule(target=replicas, old=replicas, ok=st.booleans())
    def replace(self, old: Replica, ok: bool) -> Replica:
        """The reconciler replaces a serving replica beside it."""
        assume(not old.retired and old.state is S.READY and old.process.alive)
        new = self.replica(fail_starts=0 if ok else 10)
        assert self.run(self.sup.replace(old, new)) is ok
        assert (old.retired, new.retired) == (ok, not ok)
        return new

    @rule(r=replicas)
    def die(self, r: Replica) -> None:
        """The process crashes (kill -9, OOM): its watch restarts it, or gives up FAILED."""
        assume(not r.retired and r.process.alive)
        watched = r.watcher is not None
        self.fake(r).die()
        if watched:
            self.settle()

    @rule(r=replicas)
    def retire(self, r: Replica) -> None:
        """The reconciler takes a replica out for good (a stop, a surplus, a failed one withdrawn)."""
        assume(not r.retired)
        self.run(self.sup.retire(r))
        assert r not in self.sup.replicas and not r.process.alive

    @rule(r=replicas)
    def fail(self, r: Replica) -> None:
        """An unexpected error in an action on it (the reconciler's guarded step)."""
        assume(not r.retired)
        self.run(self.sup.fail(r))
        assert r.state is S.FAILED and not r.process.alive

    # --- the checks ---------------------------------------------------------------------------------

    @invariant()
    def every_move_is_in_the_table(self) -> None:
        illegal = [(rid, a, b) for rid, a, b in self.moves if not allowed(a, b)]
        assert not illegal, illegal

    @invariant()
    def no_watch_or_action_broke(self) -> None:
        assert not self.failures.seen, self.failures.seen

    @invariant()
    def the_registry_holds_what_the_owner_says(self) -> None:
        published = {rec.id: rec.state for rec in self.run(read_registry(self.redis, self.keys))}
        owned = {r.spec.id: r.state for r in self.sup.replicas if r.state is not S.STARTING}
        assert published == owned

    def teardown(self) -> None:
        try:
            self.run(self.sup.drain())
            assert all(not r.process.alive for r in self.sup.replicas)
            assert self.run(read_registry(self.redis, self.keys)) == []
            self.every_move_is_in_the_table()
            self.no_watch_or_action_broke()
        finally:
            logging.getLogger("llmgw.workers").removeHandler(self.failures)
            self.run(self.client.aclose())
            self.run(self.redis.aclose())
            self.loop.close()


def test_random_verb_sequences_on_the_real_owner_stay_in_the_table(redis_url: str, tmp_path: Path) -> None:
    run_state_machine_as_test(  # a factory is accepted as the machine (Hypothesis' docs), not typed so
        lambda: OwnerMachine(redis_url, tmp_path),  # type: ignore[arg-type]
        settings=settings(
            max_examples=50, stateful_step_count=25, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )  # fmt: skip


@pytest.mark.parametrize("in_place", [False, True])
def test_a_second_sleep_of_an_asleep_replica_is_a_no_op(
    redis_url: str, tmp_path: Path, in_place: bool
) -> None:
    """No drain (which would wait its whole grace on a replica that cannot answer), no move, no sleep."""
    machine = OwnerMachine(redis_url, tmp_path)
    slept: list[str] = []

    async def put_to_sleep(r: Replica) -> None:
        slept.append(r.spec.id)
        if not in_place:
            await r.process.stop()

    async def announce(r: Replica) -> None:
        return None

    try:
        r = machine.replica()
        assert machine.run(machine.sup.start(r))
        assert machine.run(machine.sup.sleep(r, put_to_sleep, announce))
        moves = list(machine.moves)
        assert not machine.run(machine.sup.sleep(r, put_to_sleep, announce))
        assert machine.moves == moves and slept == [r.spec.id] and r.process.alive is in_place
        assert r.state is S.ASLEEP
    finally:
        machine.teardown()
