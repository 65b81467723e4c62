"""What `llmgw-stack` waits for before READY with the default fleet: every replica of the `always` models
ready, the on-demand model (Gemma) only published (asleep until a request wakes it)."""

from __future__ import annotations

from llmgw_tools.stack.stack import REPO, Stack, StackConfig


def test_the_default_fleet_waits_for_always_models_and_only_publishes_gemma() -> None:
    stack = Stack(StackConfig(fleet_file=REPO / "fleet.yaml"))
    assert stack.expected() == {"smollm2-135m-instruct": 2, "all-minilm-l6-v2": 1}
    assert stack.on_demand() == ["gemma-3-270m"]
