"""The table of a replica's states: a walk of every move, and a property test of random action sequences
(the owner's verbs, as the moves each makes) against it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.registry import ROUTABLE, ReplicaState
from contract.replica_states import INITIAL, MOVES, IllegalMove, allowed, check_move

S = ReplicaState
ALL = list(ReplicaState)

# The owner's verbs (workers/life/owner.py and the modules it delegates to): the states a verb may
# start from, and the moves it makes, in order. A wake or a start ends one of two ways.
VERBS: dict[str, tuple[frozenset[ReplicaState], tuple[ReplicaState, ...]]] = {
    "start ok": (frozenset({S.STARTING}), (S.STARTING, S.READY)),
    "start fails": (frozenset({S.STARTING}), (S.STARTING, S.FAILED)),
    "park": (frozenset({S.STARTING}), (S.ASLEEP,)),
    "adopt": (frozenset({S.STARTING}), (S.READY,)),
    "died, restarted": (frozenset({S.READY, S.REPLACING, S.STARTING}), (S.STARTING, S.READY)),
    "died, gave up": (frozenset({S.READY, S.REPLACING, S.STARTING}), (S.STARTING, S.FAILED)),
    "replace beside": (frozenset({S.READY}), (S.REPLACING,)),
    "replacement failed": (frozenset({S.REPLACING}), (S.READY,)),
    "sleep": (ROUTABLE, (S.DRAINING, S.ASLEEP)),
    "wake ok": (frozenset({S.ASLEEP}), (S.WAKING, S.READY)),
    "wake fails": (frozenset({S.ASLEEP}), (S.WAKING, S.ASLEEP)),
    "fail": (frozenset(ALL) - {S.FAILED}, (S.FAILED,)),
    "shutdown": (frozenset(ALL) - {S.DRAINING}, (S.DRAINING,)),
}


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


def test_every_verb_makes_only_moves_the_table_allows() -> None:
    for verb, (starts, moves) in VERBS.items():
        for start in starts:
            state = start
            for nxt in moves:
                assert allowed(state, nxt), f"{verb} from {start}: {state} -> {nxt}"
                state = nxt


@given(st.lists(st.sampled_from(sorted(VERBS)), max_size=40))
def test_random_action_sequences_stay_in_the_table(actions: list[str]) -> None:
    """A replica driven by a random sequence of verbs (those that may run from its state; the others
    are skipped, as the owner refuses them) only ever makes allowed moves, and a drain is always left."""
    state, path = INITIAL, [INITIAL]
    for verb in actions:
        starts, moves = VERBS[verb]
        if state not in starts:
            continue
        for nxt in moves:
            check_move("r", state, nxt)
            state = nxt
            path.append(state)
    assert all(allowed(a, b) for a, b in itertools.pairwise(path))
    assert allowed(state, S.DRAINING)
