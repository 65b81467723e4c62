"""The client-compatibility suite's short form (``make compat`` runs all of it): langchain-openai
(invoke, bind_tools), an OpenAI Agents SDK run with a function tool, and the anthropic SDK (count_tokens,
tool use), each in its pinned environment (.cache/compat-clients, made by `make test`), against the
shared real stack (real vLLM CPU replicas, two gateways behind nginx)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmgw_tools.stack.stack import Stack
from testing.procs import REPO
from tests.compat.run import SHORT, run, table

pytestmark = pytest.mark.e2e


def test_short_compat_suite_passes(stack: Stack) -> None:
    venvs = Path(os.environ.get("LLMGW_COMPAT_VENVS", REPO / ".cache"))
    models = Path(os.environ.get("LLMGW_MODELS_DIR", REPO / ".cache" / "models"))
    rows = run(stack.config.nginx_url, venvs, models, short=True, timeout_s=300)
    print(table(rows))
    ran = {(r["client"], r["check"]) for r in rows}
    assert ran == {
        ("langchain-openai", "invoke"),
        ("langchain-openai", "bind_tools"),
        ("openai-agents", "function tool"),
        ("anthropic", "count_tokens"),
        ("anthropic", "tool use"),
    }, table(rows)
    assert {r["client"] for r in rows} == set(SHORT) and all(r["ok"] for r in rows), table(rows)
