"""The one table of a supervised replica's states and the moves allowed between them.

A replica is made STARTING (not yet published: the registry holds only what may be routed to or woken).
Every change of state goes through the owner's one method (``workers.life.owner.Supervisor.move``),
which checks it here (:func:`check_move`) and publishes it. Staying in a state is not a move: it is
always allowed (a republish). Retiring a replica (drain if routable, stop, withdraw) is allowed from every
state and ends its life: it is not a state.

======================  ===========================================================================
from                    to
======================  ===========================================================================
starting                ready (it answers), failed (gave up), asleep (on-demand: waits for a
                        request), draining (shutdown while it starts)
ready                   starting (it died: restart), draining (retire, sleep, shutdown),
                        replacing (its replacement starts beside it), failed (its watch broke)
replacing               ready (the replacement failed), starting (it died), draining, failed
draining                asleep (the sleep finished), failed (the sleep broke)
asleep                  waking (a request waits), draining (shutdown of a process asleep in place),
                        failed
waking                  ready (awake), asleep (the wake failed), draining (shutdown), failed
failed                  draining (shutdown of a process still alive)
======================  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping

from llmgw_contract.registry import ReplicaState

S = ReplicaState

MOVES: Mapping[ReplicaState, frozenset[ReplicaState]] = {
    S.STARTING: frozenset({S.READY, S.FAILED, S.ASLEEP, S.DRAINING}),
    S.READY: frozenset({S.STARTING, S.DRAINING, S.REPLACING, S.FAILED}),
    S.REPLACING: frozenset({S.READY, S.STARTING, S.DRAINING, S.FAILED}),
    S.DRAINING: frozenset({S.ASLEEP, S.FAILED}),
    S.ASLEEP: frozenset({S.WAKING, S.DRAINING, S.FAILED}),
    S.WAKING: frozenset({S.READY, S.ASLEEP, S.DRAINING, S.FAILED}),
    S.FAILED: frozenset({S.DRAINING}),
}
"""Every state's allowed next states (the table above)."""

INITIAL = ReplicaState.STARTING
"""The state a replica is made in."""


class IllegalMove(RuntimeError):
    """A state change the table does not allow: a bug in the caller, never a condition to handle."""

    def __init__(self, replica: str, old: ReplicaState, new: ReplicaState) -> None:
        allowed = ", ".join(sorted(MOVES[old])) or "none"
        super().__init__(f"replica={replica}: {old} -> {new} is not an allowed move (from {old}: {allowed})")
        self.old, self.new = old, new


def allowed(old: ReplicaState, new: ReplicaState) -> bool:
    """True when ``old -> new`` is in the table (or ``old`` is ``new``)."""
    return old is new or new in MOVES[old]


def check_move(replica: str, old: ReplicaState, new: ReplicaState) -> None:
    """Raise :class:`IllegalMove` unless ``old -> new`` is allowed."""
    if not allowed(old, new):
        raise IllegalMove(replica, old, new)
