"""The gateways' shared in-flight counts, as the workers read them: the hash :attr:`RedisKeys.inflight`
holds one field per gateway, valued ``"<Redis ms> <JSON {replica id: requests in flight}>"`` (written by
the gateway's share script, ``gateway/inflight.py``). A value older than ``max_age_ms`` is a stopped
gateway's and counts nothing."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

MAX_AGE_MS = 2000
"""The gateways' default ``load_share_max_age_s``, in ms."""


def fresh_counts(values: Iterable[bytes | str], now_ms: int, max_age_ms: int = MAX_AGE_MS) -> Counter[str]:
    """Requests in flight per replica id, summed over the gateways' fresh values; malformed ones skipped."""
    total: Counter[str] = Counter()
    for value in values:
        text = value.decode() if isinstance(value, bytes) else value
        stamp, _, blob = text.partition(" ")
        try:
            if now_ms - int(stamp) > max_age_ms:
                continue
            total.update({str(k): int(v) for k, v in json.loads(blob).items() if int(v) > 0})
        except (ValueError, TypeError, AttributeError):
            continue
    return total
