"""What every client check shares (each check runs in its client's own environment, with only the
standard library besides the client): where the stack is, the tool the tool-call checks offer, and
one ``RESULT {json}`` line per check that the runner (tests/compat/run.py) reads."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

BASE = os.environ.get("LLMGW_COMPAT_BASE_URL", "http://127.0.0.1:8080").rstrip("/")
MODELS_DIR = os.environ.get("LLMGW_MODELS_DIR", ".cache/models")
SHORT = os.environ.get("LLMGW_COMPAT_SHORT", "") == "1"
CHAT, GEMMA, EMBED = "smollm2", "gemma3", "minilm"
EMBED_DIM = 384
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "the city's name"}},
    "required": ["city"],
}


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"Sunny, 21 degrees Celsius in {city}."


def report(client: str, check: str, fn: Callable[[], str]) -> bool:
    """Run one check; print its RESULT line (ok, detail, seconds)."""
    start = time.perf_counter()
    try:
        detail, ok = fn(), True
    except Exception as exc:
        detail, ok = f"{type(exc).__name__}: {exc}"[:400], False
        traceback.print_exc(file=sys.stderr)
    row: dict[str, Any] = {
        "client": client,
        "check": check,
        "ok": ok,
        "detail": detail,
        "seconds": round(time.perf_counter() - start, 2),
    }
    print("RESULT " + json.dumps(row), flush=True)
    return ok


def run_all(client: str, checks: dict[str, Callable[[], str]], short: tuple[str, ...] = ()) -> None:
    """Every check (only those named in ``short`` when LLMGW_COMPAT_SHORT=1); exit 1 if any failed."""
    chosen = {k: v for k, v in checks.items() if not SHORT or k in short}
    results = [report(client, name, fn) for name, fn in chosen.items()]
    sys.exit(0 if all(results) else 1)
