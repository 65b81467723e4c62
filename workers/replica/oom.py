"""Out-of-memory starts: recognise vLLM's messages in a failed start's log, choose the next budget,
and say what to change once the back-off has nowhere left to go.

vLLM (0.26) fails a start for lack of memory in two ways that call for opposite fixes:

* the **device** ran out (``torch.OutOfMemoryError: CUDA out of memory``, "Failed to load model - not
  enough GPU memory", "Free memory on device ... is less than desired GPU memory utilization", cuBLAS
  allocation failures): another tenant holds memory the budget counted on, so a *lower* budget can start.
  The supervisor retries with the budget lowered by 0.05 (:func:`next_budget`) down to a floor;
* the **budget** holds the weights but leaves no KV cache for one request ("No available memory for the
  cache blocks", "... KV cache is needed, which is larger than the available KV cache memory"): a lower
  budget leaves even less, so the supervisor does not back off and asks for a larger one instead.

Everything here is pure; the supervisor does the I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from workers.host.gpu import DeviceMemory, gib

BACKOFF_STEP = 0.05
VLLM_DEFAULT_BUDGET = 0.9
"""vLLM's own gpu_memory_utilization when none is given."""


class OomKind(StrEnum):
    DEVICE = "device"  # the device ran out: a lower budget can start
    BUDGET = "budget"  # the budget leaves no KV cache: a lower budget cannot help


# Most specific first: the budget messages also mention memory, and vLLM wraps CUDA's own text.
_BUDGET_PATTERNS = (
    r"No available memory for the cache blocks",
    r"larger than the available KV cache memory",
    r"not enough\b.*\bKV cache|KV cache\b.*\bnot enough",
    r"Cannot auto-fit max_model_len: not enough GPU memory",
)
_DEVICE_PATTERNS = (
    r"is less than desired GPU memory utilization",
    r"Failed to load model - not enough GPU memory",
    r"torch\.(?:cuda\.)?OutOfMemoryError",
    r"CUDA out of memory",
    r"CUBLAS_STATUS_ALLOC_FAILED",
    r"cudaErrorMemoryAllocation",
    r"CUDA error: out of memory",
)
_BUDGET_RE = [re.compile(p, re.IGNORECASE) for p in _BUDGET_PATTERNS]
_DEVICE_RE = [re.compile(p, re.IGNORECASE) for p in _DEVICE_PATTERNS]
_VLLM_FREE_RE = re.compile(r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\)")


@dataclass(frozen=True, slots=True)
class Oom:
    """An out-of-memory start: which kind, and the log line that says so."""

    kind: OomKind
    line: str

    @property
    def vllm_free_gib(self) -> float | None:
        """The free memory vLLM itself measured, when its message gives it."""
        m = _VLLM_FREE_RE.search(self.line)
        return float(m.group(1)) if m else None


def _last_match(lines: Sequence[str], patterns: Sequence[re.Pattern[str]]) -> str | None:
    for line in reversed(lines):
        if any(p.search(line) for p in patterns):
            return line.strip()
    return None


def detect_oom(log_tail: str) -> Oom | None:
    """The out-of-memory cause of a failed start, from the end of its log; None for other failures."""
    lines = log_tail.splitlines()
    budget = _last_match(lines, _BUDGET_RE)
    if budget is not None:
        return Oom(OomKind.BUDGET, _clip(budget))
    device = _last_match(lines, _DEVICE_RE)
    return Oom(OomKind.DEVICE, _clip(device)) if device is not None else None


def _clip(line: str, limit: int = 240) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def next_budget(oom: Oom, current: float, floor: float, step: float = BACKOFF_STEP) -> float | None:
    """The budget to retry with, or None: past the floor, or when a lower budget cannot help."""
    if oom.kind is OomKind.BUDGET:
        return None
    return next_backoff_budget(current, floor, step)


def needed_bytes(budget: float, total_bytes: int, reserve_bytes: int) -> int:
    """What a replica takes from its device: its budget of the total plus the reserve outside it."""
    return math.ceil(budget * total_bytes) + reserve_bytes


def largest_fitting_budget(
    free_bytes: int, total_bytes: int, reserve_bytes: int, step: float = 0.01
) -> float:
    """The largest budget on a ``step`` grid whose :func:`needed_bytes` fits in ``free_bytes`` (>= 0)."""
    room = max(0.0, (free_bytes - reserve_bytes) / total_bytes)
    return round(math.floor(round(room / step, 9)) * step, 6)


@dataclass(frozen=True, slots=True)
class StartReport:
    """Why a replica was given up on, in one line that names the model, the budget, the free memory and
    what to change."""

    replica: str
    model: str
    device: int
    budgets_tried: tuple[float, ...]
    floor: float
    free: DeviceMemory | None
    reserve_bytes: int
    oom: Oom | None = None
    waited_s: float | None = None

    @property
    def budget(self) -> float:
        return self.budgets_tried[-1] if self.budgets_tried else VLLM_DEFAULT_BUDGET

    def _free(self) -> str:
        if self.free is None:
            return "free memory unknown (no nvidia-smi reading)"
        used = f"; other processes held {gib(self.free.used_bytes)} GiB" if self.free.used_bytes else ""
        return f"gpu:{self.device} had {self.free.describe()} before the start{used}"

    def _fits(self) -> str:
        if self.free is None:
            return ""
        fit = largest_fitting_budget(self.free.free_bytes, self.free.total_bytes, self.reserve_bytes)
        return f"what is free holds a budget of at most {fit:.2f}; "

    def message(self) -> str:
        head = f"replica={self.replica} model={self.model} gpu:{self.device}"
        tried = ", ".join(f"{b:.2f}" for b in self.budgets_tried) or "none"
        if self.waited_s is not None:
            need = needed_bytes(self.budget, self.free.total_bytes if self.free else 0, self.reserve_bytes)
            reserve = gib(self.reserve_bytes)
            return (
                f"{head} NOT STARTED: waited {self.waited_s:.0f} s for memory; gpu_memory_utilization "
                f"{self.budget:.2f} needs {gib(need)} GiB ({self.budget:.2f} x total + {reserve} GiB "
                f"reserve) but {self._free()}. Change: {self._fits()}stop what else holds memory on "
                f"gpu:{self.device}, lower the budgets on it (llmgw-plan), or move the model "
                "(placement.devices)."
            )
        said = f" vLLM said: {self.oom.line!r}." if self.oom else ""
        if self.oom is not None and self.oom.kind is OomKind.BUDGET:
            return (
                f"{head} STOPPED: gpu_memory_utilization {self.budget:.2f} holds the weights but no KV cache "
                f"for one max_model_len request (tried {tried}); a lower budget cannot help; "
                f"{self._free()}.{said} Change: raise budget.gpu_memory_utilization (llmgw-plan prints "
                "the least that holds max_model_len x concurrency), or lower engine.max_model_len."
            )
        return (
            f"{head} STOPPED: out of memory at gpu_memory_utilization {self.budget:.2f} (tried {tried}; "
            f"floor {self.floor:.2f}); {self._free()}.{said} Change: {self._fits()}free memory on "
            f"gpu:{self.device} or move the model (placement.devices); lower "
            f"budget.min_gpu_memory_utilization below {self.floor:.2f} only if a smaller KV cache will do "
            "(llmgw-plan shows what each budget holds)."
        )


def next_backoff_budget(current: float, floor: float, step: float = 0.05) -> float | None:
    """The budget to retry with after an out-of-memory start, or None once it would go below ``floor``."""
    if step <= 0:
        raise ValueError("step must be positive")
    nxt = round(current - step, 6)
    return nxt if nxt >= floor - 1e-9 and nxt > 0 else None
