"""The keyed-stream cost benchmark's short form (bench/keyed_stream_cost.py): a real gateway process, a
private redis-server and a FAKE ENGINE; every stream, keyed or not, ends with ``[DONE]``, and what the key
adds in Redis commands is bounded by its batches (one XADD a batch), not by its events (the engine sends
as fast as it can, so the batches are cut by size, not by time, on a machine of any speed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.keyed_stream_cost import bench, report


async def test_keyed_stream_cost_short_form(tmp_path: Path) -> None:
    args = argparse.Namespace(streams=16, concurrency=4, tokens=64, chunk_ms=0.0)
    rows = await bench(args, tmp_path)
    print(report(rows))
    plain, keyed, _ = rows
    assert all(r.incomplete == 0 and r.events == 16 * 65 for r in rows)
    extra = keyed.per_stream(keyed.redis.calls) - plain.per_stream(plain.redis.calls)
    assert 0 < extra < keyed.per_stream(keyed.events) / 3  # a command per event: 65 and more a stream
