"""What assembling a non-streamed answer that may move costs per request (issue 48 item 2: "a non-streamed
request's continuation is worth its price only if it is cheap or rare"), in one process, no I/O.

The replica's stream (the FAKE ENGINE's frames with token ids, testing/fake_tokens.py: the same bytes
that `make bench` reads) assembled into vLLM's whole answer two ways: the general way (the recorder as
MigratingStream feeds it one read, gateway/migration/record.py, then the Assembler fed its client-shaped
output, gateway/migration/assemble.py) and :func:`~gateway.migration.assemble.at_once` (one pass over a
stream that came whole, no recorder). Both must give the same bytes (checked here, and over many streams
by tests/gateway/migration/test_assemble_at_once.py). Neither counts the stream's async plumbing
(MigratingStream's reads, its watchdog, the deadline), which only the general way pays.

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


def one_pass(chat: bool, keep_ids: bool, block: bytes) -> Answer:
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
    print("| API | tokens | return_token_ids | general way µs | at_once µs | ratio |")
    print("|---|---|---|---|---|---|")
    for chat in (True, False):
        for tokens in a.tokens:
            block = stream(chat, tokens)
            for keep in (False, True):
                assert general(chat, keep, block) == one_pass(chat, keep, block)
                n = max(50, a.calls * 16 // tokens)
                slow, fast = (
                    per_call_us(general, chat, keep, block, n),
                    per_call_us(one_pass, chat, keep, block, n),
                )
                api = "chat" if chat else "completions"
                print(f"| {api} | {tokens} | {keep} | {slow:.1f} | {fast:.1f} | {fast / slow:.2f} |")


if __name__ == "__main__":
    main()
