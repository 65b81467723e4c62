"""The fleet at its maximum: every model at its scaling rule's ``max_replicas`` (pure), so that the planner
checks that the devices can hold every replica the rules may start, not only the ones the file starts."""

from __future__ import annotations

from llmgw_contract.fleet import Fleet
from llmgw_contract.scaling import scaling_rule


def at_maximum(fleet: Fleet) -> Fleet | None:
    """The fleet with each model's ``replicas`` raised to its maximum; None when no rule goes above."""
    grown = [m.model_copy(update={"replicas": scaling_rule(m).max_replicas}) for m in fleet.models]
    if all(g.replicas == m.replicas for g, m in zip(grown, fleet.models, strict=True)):
        return None
    return fleet.model_copy(update={"models": grown})
