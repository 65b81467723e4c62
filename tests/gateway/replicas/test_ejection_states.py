"""The ejection and probe state machine driven through the real owner (gateway/replicas/ejection.py) by
Hypothesis, against a reference model of the rule "evidence before action": any failure takes a replica
out of new picks; only ``lost_after`` failed probes in a row tell the requests in flight (once a run);
an answer (a probe or a request) brings it back into picks at once."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gateway.replicas.ejection import Ejection
from gateway.replicas.table import Endpoint
from llmgw_contract.backoff import Backoff
from llmgw_contract.registry import ReplicaRecord

LOST_AFTER = 3
STRIKES = 2


class EjectionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ejection = Ejection(Backoff(1.0, 8.0), after=STRIKES, lost_after=LOST_AFTER)
        self.ep = Endpoint(ReplicaRecord(id="r", model="m", url="http://r"))
        self.told = 0
        self.ep.watchers.add(self._tell)
        self.now = 0.0
        # the reference model
        self.out = False
        self.probes_failed = self.strikes = self.expected_told = 0

    def _tell(self) -> None:
        self.told += 1

    @rule(dt=st.floats(0.0, 10.0))
    def time_passes(self, dt: float) -> None:
        self.now += dt

    @rule()
    def connection_error(self) -> None:
        newly = self.ejection.fail(self.ep, self.now)
        assert newly == (not self.out)
        self.out = True

    @rule()
    def server_error(self) -> None:
        newly = self.ejection.strike(self.ep, self.now)
        self.strikes += 1
        assert newly == (self.strikes >= STRIKES and not self.out)
        self.out = self.out or self.strikes >= STRIKES

    @rule()
    def probe_fails(self) -> None:
        newly, lost = self.ejection.probe_failed(self.ep, self.now)
        self.probes_failed += 1
        assert newly == (not self.out) and lost == (self.probes_failed == LOST_AFTER)
        self.expected_told += lost
        self.out = True

    @rule()
    def answers(self) -> None:  # a probe that succeeds or a request answered
        self.ejection.succeed(self.ep)
        self.out, self.probes_failed, self.strikes = False, 0, 0

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert self.ep.available == (not self.out)
        assert self.told == self.expected_told
        assert self.ep.probe_failures == self.probes_failed
        if self.out:  # a half-open probe comes once its back-off has run out, never before
            assert Ejection.probe_due(self.ep, self.ep.ejected_until)
            assert not Ejection.probe_due(self.ep, self.ep.ejected_until - 1e-3)


TestEjectionMachine = EjectionMachine.TestCase
TestEjectionMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
