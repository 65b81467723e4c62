"""A stand-in for vLLM's KV-event publisher, in a process of its own: the same wire format (a PUB socket
sending ``(topic, 8-byte big-endian sequence, msgpack KVEventBatch)``, a ROUTER replay endpoint answering
``(b"", start)`` with every buffered batch from ``start`` and an end marker of sequence -1), the same
tagged msgpack events (``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``), without an engine. It
publishes what its stdin asks (one JSON object a line) and can fail the ways a real one does without a
disconnect: the process frozen (SIGSTOP, :meth:`KvPublisherDouble.freeze`) or its publishing thread
stuck (``mute``: nothing sent, the replay endpoint unanswered, the sockets open).

    python -m testing.kv_publisher EVENTS REPLAY    # ZMQ addresses to bind; prints "ready"
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from typing import Any

import msgspec
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class BlockStored(msgspec.Struct, omit_defaults=True, tag=True):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None


class BlockRemoved(msgspec.Struct, omit_defaults=True, tag=True):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, omit_defaults=True, tag=True):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


def event(command: dict[str, Any]) -> BlockStored | BlockRemoved | AllBlocksCleared:
    if "stored" in command:
        ids, size = command["tokens"], command["block_size"]
        return BlockStored(command["stored"], command.get("parent"), ids, size, None, "GPU", None)
    if "removed" in command:
        return BlockRemoved(command["removed"], "GPU")
    return AllBlocksCleared()


class Publisher:
    """The sockets, the replay buffer and the sequence, as vLLM's ZmqEventPublisher keeps them."""

    def __init__(self, events: str, replay: str, buffer_steps: int = 10_000) -> None:
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.bind(events)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.bind(replay)
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self.seq = 0
        self.encode = msgspec.msgpack.Encoder().encode

    def publish(self, command: dict[str, Any]) -> None:
        payload = self.encode(KVEventBatch(time.time(), [event(command)], 0))
        seq = self.seq.to_bytes(8, "big")
        self.pub.send_multipart((b"", seq, payload))
        self.buffer.append((self.seq, payload))
        self.seq += 1

    def serve_replay(self) -> None:
        client, _, start_bytes = self.router.recv_multipart()
        start = int.from_bytes(start_bytes, "big")
        for seq, payload in self.buffer:
            if seq >= start:
                self.router.send_multipart((client, b"", b"", seq.to_bytes(8, "big"), payload))
        self.router.send_multipart((client, b"", b"", END_SEQ, b""))


def serve(events: str, replay: str) -> None:
    publisher = Publisher(events, replay)
    stdin = sys.stdin.fileno()
    poller = zmq.Poller()
    poller.register(publisher.router, zmq.POLLIN)
    poller.register(stdin, zmq.POLLIN)
    muted, queued = False, deque[dict[str, Any]]()
    print("ready", flush=True)
    while True:
        ready = dict(poller.poll(100 if muted else None))
        if stdin in ready:
            line = sys.stdin.readline()
            if not line:
                return
            command = json.loads(line)
            if "mute" in command:
                muted = command["mute"]
            else:
                queued.append(command)
        if muted:
            continue
        while queued:
            publisher.publish(queued.popleft())
        if publisher.router in ready or publisher.router.poll(0):
            publisher.serve_replay()


class KvPublisherDouble:
    """Drives a ``python -m testing.kv_publisher`` process."""

    def __init__(self, events: str, replay: str) -> None:
        argv = [sys.executable, "-m", "testing.kv_publisher", events, replay]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def stored(self, hashes: list[int], parent: int | None, tokens: list[int], block_size: int) -> None:
        self.send({"stored": hashes, "parent": parent, "tokens": tokens, "block_size": block_size})

    def removed(self, hashes: list[int]) -> None:
        self.send({"removed": hashes})

    def mute(self, on: bool = True) -> None:
        """The publishing thread stuck (on) or going again (off): batches asked meanwhile are sent then."""
        self.send({"mute": on})

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.thaw()
        self.proc.kill()
        self.proc.wait(10)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
