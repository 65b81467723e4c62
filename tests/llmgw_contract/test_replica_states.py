"""The table of a replica's states: a walk of every move. The owner's verbs are driven against it through
the real owner in tests/workers/test_owner_states.py (a Hypothesis state machine)."""

from __future__ import annotations

import pytest

from llmgw_contract.registry import ReplicaState
from llmgw_contract.replica_states import INITIAL, MOVES, IllegalMove, allowed, check_move

S = ReplicaState
ALL = list(ReplicaState)


def test_every_state_has_a_row_and_every_move_is_checked_as_the_table_says() -> None:
    assert set(MOVES) == set(ReplicaState)
    for old in ALL:
        for new in ALL:
            if old is new or new in MOVES[old]:
                check_move("r", old, new)
            else:
                with pytest.raises(IllegalMove, match=f"{old} -> {new}"):
                    check_move("r", old, new)


def test_every_state_is_reachable_from_the_initial_one_and_every_one_can_drain() -> None:
    seen, frontier = {INITIAL}, [INITIAL]
    while frontier:
        for nxt in MOVES[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(ReplicaState)
    assert all(allowed(s, S.DRAINING) for s in ALL)  # a shutdown drains from anywhere
