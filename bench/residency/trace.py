"""The residency benchmark's trace (pure, seeded): requests to N models over a few simulated minutes.

Parameters (:class:`TraceParams`, every one documented there): Poisson arrivals at ``rate`` requests/s
spread over the first N-1 models by a Zipf law of exponent ``zipf_s`` (model ``m0`` the most popular);
``bursts`` bursts of ``burst_rate`` requests/s for ``burst_s`` on a model drawn uniformly (a rare model's
burst is what makes room hard); ``gaps`` idle gaps of ``gap_s`` with no request at all; and the last model,
``returner``, asked ``return_requests`` times at ``return_at_s`` and again ``hour_s`` later: an hour,
time-compressed so that the 10-minute trace holds it (the idle timeout is compressed by the same factor).
Each request decodes for ``service_s`` after its first token."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class TraceParams:
    models: int = 8
    duration_s: float = 600.0
    rate: float = 1.0
    """Background requests/s over all models but the returner."""
    zipf_s: float = 1.1
    bursts: int = 8
    burst_s: float = 10.0
    burst_rate: float = 3.0
    """Requests/s on the burst's model during a burst."""
    gaps: int = 2
    gap_s: float = 40.0
    return_at_s: float = 30.0
    hour_s: float = 300.0
    """One hour of the returner's absence, compressed to this many trace seconds."""
    return_requests: int = 4
    service_s: float = 2.0
    """Seconds each request decodes after its first token (a parameter: not measured)."""
    seed: int = 44

    @property
    def compression(self) -> float:
        """Real seconds per trace second for the returner's hour (applied to the idle timeout as well)."""
        return HOUR_S / self.hour_s

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Request:
    t: float
    model: str
    service_s: float


def names(n: int) -> list[str]:
    return [f"m{i}" for i in range(n)]


def zipf_weights(n: int, s: float) -> list[float]:
    raw = [1.0 / (k**s) for k in range(1, n + 1)]
    return [w / sum(raw) for w in raw]


def poisson(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    """Arrival times of a Poisson process of ``rate``/s in [start, end)."""
    out: list[float] = []
    t = start
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= end:
            return out
        out.append(t)
    return out


def generate(p: TraceParams) -> list[Request]:
    """The trace for ``p``, sorted by time (the same ``p`` gives the same trace)."""
    rng = random.Random(p.seed)
    models = names(p.models)
    popular, returner = models[:-1], models[-1]
    weights = zipf_weights(len(popular), p.zipf_s)
    gaps = [(t, t + p.gap_s) for t in sorted(rng.uniform(60, p.duration_s - p.gap_s) for _ in range(p.gaps))]
    times = poisson(rng, p.rate, 0, p.duration_s)
    out = [Request(t, rng.choices(popular, weights)[0], p.service_s) for t in times]
    for _ in range(p.bursts):
        start, who = rng.uniform(0, p.duration_s - p.burst_s), rng.choice(popular)
        out += [Request(t, who, p.service_s) for t in poisson(rng, p.burst_rate, start, start + p.burst_s)]
    out = [r for r in out if not any(a <= r.t < b for a, b in gaps)]
    for at in (p.return_at_s, p.return_at_s + p.hour_s):
        out += [Request(at + 0.5 * i, returner, p.service_s) for i in range(p.return_requests)]
    return sorted(out, key=lambda r: (r.t, r.model))
