"""What assembling a non-streamed answer that may move costs per request (issue 48 item 2: "a non-streamed
request's continuation is worth its price only if it is cheap or rare"), in one process, no I/O.

The replica's stream (the FAKE ENGINE's frames with token ids, testing/fake_tokens.py: the same bytes
that `make bench` reads) assembled into vLLM's whole answer: the general way (the recorder,
gateway/migration/record.py, fed as MigratingStream feeds it, in one read or a read per event as from a
replica generating, then the Assembler fed its client-shaped output, gateway/migration/assemble.py) and
:func:`~gateway.migration.assemble.at_once` (one pass over the bytes read to their end, no recorder).
All give the same bytes (checked here, and over many streams by
tests/gateway/migration/test_assemble_at_once.py). None counts the async plumbing of the reads.

    .venv/bin/python -m bench.whole_assembly                # µs per request, best of 5 runs
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from gateway.migration.assemble import Assembler, at_once
from gateway.migration.frames import EventSplitter
from gateway.migration.record import Recorder
from testing.fake_tokens import TokenFrames

Answer = tuple[bytes, int, int]


def stream(chat: bool, tokens: int) -> bytes:
    """The FAKE ENGINE's whole stream for a movable non-streamed request of ``tokens`` tokens."""
    req: dict[str, Any] = {"max_tokens": tokens, "stream_options": {"include_usage": True}, "prompt": "hi"}
    req["messages"] = [{"role": "user", "content": "Hello there, benchmark."}]
    frames = TokenFrames(req, chat, "fake-model", "bench-0", False)
    return b"".join([frames.token(j) for j in range(frames.n)] + frames.tail())


def general(chat: bool, keep_ids: bool, block: bytes) -> Answer:
    """The general way, as MigratingStream takes one read and gateway/pipeline/migrate.py assembles it."""
    recorder = Recorder(keep_ids=keep_ids)
    head, rest = recorder.bulk(EventSplitter().block(block))
    parts = [head, *(recorder.original(e + b"\n\n") for e in rest.split(b"\n\n") if e)]
    assembler = Assembler(chat, keep_ids)
    assembler.feed(b"".join(parts))
    return (assembler.body(recorder.usage()), *assembler.counts(recorder.usage()))


def per_event(chat: bool, keep_ids: bool, block: bytes) -> Answer:
    """The general way when each event is a read of its own (a replica generating: tokens come apart),
    as MigratingStream.next takes one whole event."""
    recorder, assembler = Recorder(keep_ids=keep_ids), Assembler(chat, keep_ids)
    for event in block.split(b"\n\n")[:-1]:
        assembler.feed(recorder.original(event + b"\n\n"))
    return (assembler.body(recorder.usage()), *assembler.counts(recorder.usage()))


def one_pass(chat: bool, keep_ids: bool, block: bytes) -> Answer:
    """gateway/pipeline/migrate.py's happy case: the bytes read to their end, assembled in one pass."""
    answer = at_once(chat, keep_ids, block)
    assert answer is not None
    return answer


def per_call_us(
    fn: Callable[[bool, bool, bytes], Answer], chat: bool, keep: bool, block: bytes, n: int
) -> float:
    """The best of 5 runs of ``n`` calls, µs a call."""
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn(chat, keep, block)
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[16, 256])
    p.add_argument("--calls", type=int, default=4000)
    a = p.parse_args()
    print("| API | tokens | return_token_ids | general way, one read µs | a read per event µs | at_once µs |")
    print("|---|---|---|---|---|---|")
    for chat in (True, False):
        for tokens in a.tokens:
            block = stream(chat, tokens)
            for keep in (False, True):
                answer = one_pass(chat, keep, block)
                assert general(chat, keep, block) == per_event(chat, keep, block) == answer
                n = max(50, a.calls * 16 // tokens)
                us = [f"{per_call_us(fn, chat, keep, block, n):.1f}" for fn in (general, per_event, one_pass)]
                print(f"| {'chat' if chat else 'completions'} | {tokens} | {keep} | {' | '.join(us)} |")


if __name__ == "__main__":
    main()
