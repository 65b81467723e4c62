"""A closed-loop HTTP/1.1 load generator that checks every response.

Raw asyncio with one keep-alive connection per simulated client, so that the generator itself
costs little CPU.  Each response is checked: status 200, a JSON body for non-streamed answers,
and for streams the number of SSE ``data:`` events (tokens + ``[DONE]``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0

    @property
    def ok(self) -> int:
        return len(self.latencies)

    @property
    def rps(self) -> float:
        return self.ok / max(1e-9, self.finished - self.started)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    path: str
    body: bytes
    stream: bool
    tokens: int
    api_key: str = ""
    """Sent as ``Authorization: Bearer`` when set (a gateway with keys on)."""

    def request(self) -> bytes:
        auth = f"authorization: Bearer {self.api_key}\r\n" if self.api_key else ""
        head = (
            f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n{auth}"
            "content-type: application/json\r\n"
            f"content-length: {len(self.body)}\r\n\r\n"
        )
        return head.encode() + self.body


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
    return status, headers


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str], first: list[float]) -> bytes:
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
        first.append(time.perf_counter())
        return body
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if not first:
            first.append(time.perf_counter())
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def check(target: Target, status: int, body: bytes) -> str | None:
    if status != 200:
        return f"status {status}: {body[:200]!r}"
    if not target.stream:
        try:
            json.loads(body)
        except ValueError:
            return "body is not JSON"
        return None
    events = body.count(b"data: ")
    if events != target.tokens + 1 or not body.rstrip().endswith(b"data: [DONE]"):
        return f"stream had {events} events, expected {target.tokens + 1}"
    return None


async def client(target: Target, deadline: float, budget: list[int], result: Result) -> None:
    reader, writer = await asyncio.open_connection(target.host, target.port)
    request = target.request()
    try:
        while budget[0] > 0 and time.perf_counter() < deadline:
            budget[0] -= 1
            t0 = time.perf_counter()
            writer.write(request)
            status, headers = await read_head(reader)
            first: list[float] = []
            body = await read_body(reader, headers, first)
            t1 = time.perf_counter()
            problem = check(target, status, body)
            if problem:
                result.errors.append(problem)
                continue
            result.latencies.append(t1 - t0)
            result.ttfts.append(first[0] - t0)
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        writer.close()


async def run(target: Target, concurrency: int, requests: int, max_seconds: float) -> Result:
    result = Result()
    budget = [requests]
    result.started = time.perf_counter()
    deadline = result.started + max_seconds
    await asyncio.gather(*(client(target, deadline, budget, result) for _ in range(concurrency)))
    result.finished = time.perf_counter()
    return result
