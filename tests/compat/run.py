"""``make compat``: the clients agent builders use, each run in its own environment against a running
stack, and the compatibility table from what they report.

Each check script (tests/compat/checks/*_check.py) runs with its environment's Python
(``<venvs>/compat-<env>``, made by ``make compat-venvs`` from tests/compat/requirements/<env>.txt), prints
one ``RESULT {json}`` line per check, and exits 1 if one failed. This runner prints the table (markdown)
and writes the rows as JSON; it exits 1 unless every check passed."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULT = "RESULT "


@dataclass(frozen=True, slots=True)
class Client:
    """One client: its name, the environment it runs in, its check script, its packages (whose pinned
    versions the table shows)."""

    name: str
    env: str
    script: str
    packages: tuple[str, ...]


CLIENTS = (
    Client("langchain-openai", "clients", "langchain_openai_check.py", ("langchain-openai", "openai")),
    Client("openai-agents", "clients", "openai_agents_check.py", ("openai-agents", "openai")),
    Client("litellm", "clients", "litellm_check.py", ("litellm",)),
    Client("anthropic", "clients", "anthropic_check.py", ("anthropic",)),
    Client("llama-index", "llama-index", "llama_index_check.py", ("llama-index-llms-openai-like",)),
    Client("lm-eval", "lm-eval", "lm_eval_check.py", ("lm-eval",)),
    Client("guidellm", "guidellm", "guidellm_check.py", ("guidellm",)),
)
SHORT = ("langchain-openai", "openai-agents", "anthropic")
"""The clients of the short form (``make test``): tool calls through two agent frameworks, Anthropic's API."""


def versions(client: Client) -> str:
    """The client's packages as pinned in its environment's requirement file (``name==version``)."""
    pins = (HERE / "requirements" / f"{client.env}.txt").read_text().splitlines()
    return " ".join(p.strip() for p in pins if p.split("==")[0].strip() in client.packages)


def run_client(client: Client, venvs: Path, env: dict[str, str], timeout_s: float) -> list[dict[str, Any]]:
    """Run one client's checks; its rows (one failing row when the script could not report)."""
    python = venvs / f"compat-{client.env}" / "bin" / "python"
    pinned = versions(client)
    if not python.exists():
        why = f"no environment {python.parent.parent}: run `make compat-venvs`"
        return [{"client": client.name, "check": "(setup)", "ok": False, "detail": why, "versions": pinned}]
    try:
        done = subprocess.run(
            [str(python), str(HERE / "checks" / client.script)],
            cwd=HERE / "checks",
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        out, err = str(exc.stdout or ""), f"timed out after {timeout_s:.0f} s"
    rows = [json.loads(line[len(RESULT) :]) for line in out.splitlines() if line.startswith(RESULT)]
    if not rows:
        rows = [{"client": client.name, "check": "(run)", "ok": False, "detail": err[-600:]}]
    elif not all(r["ok"] for r in rows):
        sys.stderr.write(f"--- {client.name} stderr (tail)\n{err[-3000:]}\n")
    return [{**r, "versions": pinned} for r in rows]


def table(rows: list[dict[str, Any]]) -> str:
    """The compatibility table (markdown): client and pinned versions, check, result, what it showed."""
    lines = ["| client (pinned) | check | result | what the check saw |", "| --- | --- | --- | --- |"]
    for r in rows:
        detail = str(r["detail"]).replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {r['client']} ({r['versions']}) | {r['check']} | {'pass' if r['ok'] else 'FAIL'} | {detail} |"
        )
    return "\n".join(lines)


def run(
    base_url: str,
    venvs: Path,
    models_dir: Path,
    short: bool,
    only: tuple[str, ...] = (),
    timeout_s: float = 900,
) -> list[dict[str, Any]]:
    env = {
        **os.environ,
        "LLMGW_COMPAT_BASE_URL": base_url,
        "LLMGW_MODELS_DIR": str(models_dir),
        "LLMGW_COMPAT_SHORT": "1" if short else "",
        "PYTHONPATH": "",
    }
    chosen = [c for c in CLIENTS if (c.name in only if only else not short or c.name in SHORT)]
    rows: list[dict[str, Any]] = []
    for client in chosen:
        rows += run_client(client, venvs, env, timeout_s)
        print(f"{client.name}: {sum(r['ok'] for r in rows if r['client'] == client.name)} passed", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8080", help="the stack's nginx (make run)")
    p.add_argument("--venvs", type=Path, default=Path(".cache"), help="where compat-<env> environments are")
    p.add_argument(
        "--models-dir", type=Path, default=Path(os.environ.get("LLMGW_MODELS_DIR", ".cache/models"))
    )
    p.add_argument("--short", action="store_true", help="the short form (make test)")
    p.add_argument("--only", nargs="*", default=(), help="these clients only")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    a = p.parse_args(argv)
    rows = run(a.base_url, a.venvs.resolve(), a.models_dir.resolve(), a.short, tuple(a.only))
    print(table(rows))
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    failed = [f"{r['client']}: {r['check']}" for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
