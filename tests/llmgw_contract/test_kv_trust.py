"""StreamTrust, the pure rules of when an agent trusts a replica's KV-event stream and when it probes."""

from __future__ import annotations

from llmgw_contract.kv_trust import APPROXIMATE, EXACT, FeedTiming, StreamTrust


def test_exact_only_while_connected_caught_up_and_answering() -> None:
    t = StreamTrust(FeedTiming(probe_s=1.0, silent_s=5.0))
    assert t.mode == APPROXIMATE and not t.probe_due(100.0)  # not connected: nothing to probe
    assert t.caught_up(10.0) is False  # connected and caught up: no silence ended
    assert t.mode == EXACT
    t.batch(10.5)
    assert not t.probe_due(11.4) and t.probe_due(11.5)  # a second without a batch
    assert t.unanswered() is True and t.mode == APPROXIMATE  # the silence begins: reset once
    assert t.unanswered() is False and not t.probe_due(99.0)  # still silent: no second reset
    assert t.caught_up(20.0) is True and t.mode == EXACT  # answered again: it ends the silence
    assert not t.probe_due(20.9)
    t.disconnected()
    assert t.mode == APPROXIMATE and not t.probe_due(50.0)
