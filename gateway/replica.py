"""The replica record: what the supervisor publishes and the gateway routes to."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class ReplicaState(StrEnum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"


class ReplicaRecord(BaseModel):
    """One vLLM server of one model, as stored in the Redis registry (JSON, with a TTL)."""

    model_config = ConfigDict(frozen=True)

    id: str
    model: str
    url: str
    state: ReplicaState = ReplicaState.READY
    concurrency: int = 8
    served_name: str | None = None
    device: str = ""
    budget: str = ""

    @property
    def routable(self) -> bool:
        return self.state is ReplicaState.READY

    @property
    def upstream_model(self) -> str:
        """The model name the replica itself answers to."""
        return self.served_name or self.model
