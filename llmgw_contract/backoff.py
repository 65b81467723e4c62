"""The one exponential back-off (tenacity's ``wait_exponential``), for callers that count failures
themselves instead of wrapping a call in a retry loop: replica ejection, replica restarts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from tenacity import RetryCallState, wait_exponential


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before the n-th consecutive retry: ``base_s`` × 2^(n-1), capped at ``max_s``."""

    base_s: float = 1.0
    max_s: float = 30.0
    _wait: wait_exponential = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_wait", wait_exponential(multiplier=self.base_s, max=self.max_s))

    def delay(self, failures: int) -> float:
        state = RetryCallState(cast("object", None), None, (), {})  # type: ignore[arg-type]
        state.attempt_number = max(1, failures)
        return float(self._wait(state))
