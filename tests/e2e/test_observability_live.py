"""THE PROOF of grafana/ and deploy/prometheus/rules/: against the real stack's Prometheus (5 s scrapes of
both gateways, the supervisor and every vLLM replica), after real traffic, every PromQL query of every
dashboard panel, template variable and alert rule answers without error and with at least one series.

- Grafana's variables are filled in (promql.GRAFANA_BUILTINS: $__rate_interval=1m, ...; $model = the chat
  model with two replicas, which gets streaming traffic; embeddings have no TTFT or inter-token latency).
- Alert rules are `<query> > <threshold>` (promql.split_threshold refuses anything else): the query alone is
  evaluated, because a healthy system must return data without firing.
- Skipped, and only these: panels whose description carries promql.DCGM_MARKER and rules annotated
  `requires: dcgm-exporter` (the NVIDIA DCGM exporter's GPU memory metrics; there is no GPU here).
- Queries that fall back to `or 0 * ...` for events that did not happen (retries, ejections, refusals) must
  still name real metrics: every metric name a query reads must be known to this Prometheus (scraped
  series or scrape metadata, which lists families that have no series yet).
- Nothing double counts: the requests Prometheus sums over the two gateways equal the requests sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmgw_tools.stack.stack import Stack
from testing.poll import until
from tests.observability.promql import (
    DCGM_MARKER,
    concrete,
    dashboard_files,
    exposed,
    label_values_as_query,
    load_alert_rules,
    load_dashboard,
    metric_names,
    panels,
    variable_query,
)

pytestmark = pytest.mark.e2e
CHAT = "smollm2-135m-instruct"
MODELS = {CHAT: 2, "gemma-3-270m": 1, "all-minilm-l6-v2": 1}
SYSTEM = "You are a terse assistant. Answer in one short sentence, without any preamble or apology."


@dataclass(frozen=True)
class Query:
    where: str
    expr: str


class Prometheus:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url

    async def get(self, path: str, **params: str) -> Any:
        r = await self.client.get(f"{self.url}{path}", params=params)
        body = r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        data = await self.get("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    async def scalar(self, expr: str) -> float:
        result = await self.query(expr)
        return float(result[0]["value"][1]) if result else 0.0

    async def known_names(self) -> set[str]:
        names = set(await self.get("/api/v1/label/__name__/values"))
        for family, entries in (await self.get("/api/v1/metadata")).items():
            # The family as its TYPE line names it (text format: `x_total`; OpenMetrics: `x`), and the
            # sample names OpenMetrics' family name implies.
            names |= {family} | {n for e in entries for n in exposed(family, e.get("type", "gauge"))}
        return names


def all_queries() -> tuple[list[Query], list[str]]:
    """Every query to prove, and the DCGM ones skipped (by their marker)."""
    todo: list[Query] = []
    skipped: list[str] = []
    for path in dashboard_files():
        d = load_dashboard(path)
        for variable in d.get("templating", {}).get("list", []):
            if variable.get("type") == "query":
                expr = label_values_as_query(variable_query(variable))
                todo.append(Query(f"{d['uid']} variable ${variable['name']}", expr))
        for panel in panels(d):
            for target in panel.get("targets", []):
                where = f"{d['uid']} panel {panel['id']} {panel['title']!r} {target['refId']}"
                if DCGM_MARKER in panel.get("description", ""):
                    skipped.append(where)
                else:
                    todo.append(Query(where, concrete(target["expr"], {"model": CHAT})))
    for rule in load_alert_rules():
        if rule.needs_dcgm:
            skipped.append(f"alert {rule.name}")
        else:
            todo.append(Query(f"alert {rule.name}", rule.query))
    return todo, skipped


async def gateway_requests(client: httpx.AsyncClient, stack: Stack) -> float:
    """llmgw_requests_total summed over the gateways, read from their /metrics directly."""
    total = 0.0
    for port in stack.config.gateway_ports:
        text = (await client.get(f"http://{stack.config.host}:{port}/metrics")).text
        for family in text_string_to_metric_families(text):
            if family.name == "llmgw_requests":
                total += sum(s.value for s in family.samples if s.name == "llmgw_requests_total")
    return total


async def drive_traffic(client: httpx.AsyncClient, base: str) -> dict[int, int]:
    """Chat (plain, concurrent, streaming), completions, embeddings and a few errors; status -> count."""

    def chat(model: str, i: int, stream: bool = False, max_tokens: int = 12) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Name one fact about the number {i}."},
            ],
            "max_tokens": max_tokens,
        }
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        return body

    async def post(path: str, body: dict[str, Any] | bytes) -> int:
        if isinstance(body, bytes):
            r = await client.post(f"{base}{path}", content=body, headers={"content-type": "application/json"})
            return r.status_code
        async with client.stream("POST", f"{base}{path}", json=body) as r:
            await r.aread()
            return r.status_code

    calls: list[tuple[str, dict[str, Any] | bytes]] = []
    calls += [("/chat/completions", chat(CHAT, i)) for i in range(10)]  # concurrent: in flight, queue
    calls += [("/chat/completions", chat(CHAT, i, stream=True, max_tokens=16)) for i in range(3)]
    calls += [
        ("/chat/completions", chat("gemma-3-270m", 1)),
        ("/completions", {"model": CHAT, "prompt": "Hi"}),
    ]
    calls += [("/chat/completions", chat("gemma-3-270m", 2, stream=True))]
    calls += [("/embeddings", {"model": "all-minilm-l6-v2", "input": ["hello", "world"]}) for _ in range(3)]
    calls += [("/chat/completions", chat("gpt-9", 0))]  # 404 unknown model
    calls += [("/chat/completions", b'{"model": "smollm2", "messages": ')]  # 400 malformed
    calls += [("/chat/completions", chat(CHAT, 0, max_tokens=100000))]  # 400 from vLLM
    statuses = await asyncio.gather(*(post(path, body) for path, body in calls))
    counts: dict[int, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts


async def evaluate(prom: Prometheus, queries: list[Query], series: dict[str, int]) -> dict[str, str]:
    """where -> why it failed (an error, or no series); empty when every query answered data. Records
    how many series each query answered in `series`."""
    failed = {}
    for q in queries:
        try:
            series[q.where] = len(await prom.query(q.expr))
        except RuntimeError as exc:
            failed[q.where] = f"{exc}"
            continue
        if not series[q.where]:
            failed[q.where] = f"no series: {q.expr}"
    return failed


async def test_every_dashboard_and_alert_query_returns_data(stack: Stack, base_url: str) -> None:
    started = time.monotonic()
    queries, skipped = all_queries()
    prom_url = f"http://{stack.config.host}:{stack.config.prometheus_port}"
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0)) as client:
        prom = Prometheus(client, prom_url)

        async def targets_up() -> bool:
            up = await prom.query('sum by (job) (up{job=~"gateway|supervisor|vllm"})')
            have = {r["metric"]["job"]: float(r["value"][1]) for r in up}
            return have == {"gateway": 2.0, "supervisor": 1.0, "vllm": float(sum(MODELS.values()))}

        await until(targets_up, 90, "every gateway, the supervisor and every vLLM replica up")

        before = await gateway_requests(client, stack)
        statuses = await drive_traffic(client, base_url)
        sent = sum(statuses.values())
        assert statuses == {200: sent - 3, 404: 1, 400: 2}, statuses
        after = await gateway_requests(client, stack)
        assert after - before == sent, "the gateways counted every request once"

        # Prometheus sums the two separately scraped gateways to exactly what they counted.
        async def scraped_everything() -> bool:
            return await prom.scalar("sum(llmgw_requests_total)") >= after

        await until(scraped_everything, 30, f"Prometheus to see {after:.0f} requests")
        assert await prom.scalar("sum(llmgw_requests_total)") == after
        assert await prom.scalar("count(count by (instance) (llmgw_requests_total))") == 2

        # Every query: poll until all answer (new series need two scrapes inside a rate window).
        failed: dict[str, str] = {}
        series: dict[str, int] = {}

        async def all_answer() -> bool:
            nonlocal failed
            failed = await evaluate(prom, queries, series)
            return not failed

        try:
            await until(all_answer, 60, "every query to return data")
        except AssertionError:
            pytest.fail(
                f"{len(failed)} of {len(queries)} queries without data or with errors:\n"
                + json.dumps(failed, indent=1)
            )

        # And none of them only by a fallback: every metric name they read is known to this Prometheus.
        known = await prom.known_names()
        unknown = {q.where: sorted(metric_names(q.expr) - known) for q in queries}
        assert {w: n for w, n in unknown.items() if n} == {}

        # The rules are loaded and evaluate cleanly; a healthy stack does not fire the availability alerts.
        groups = (await prom.get("/api/v1/rules"))["groups"]
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        assert set(rules) == {r.name for r in load_alert_rules()}
        assert {n: r.get("lastError") for n, r in rules.items() if r["health"] != "ok"} == {}
        ready = await prom.query("max by (model) (llmgw_ready_replicas)")
        assert {r["metric"]["model"] for r in ready} == set(MODELS)
        assert all(float(r["value"][1]) >= 1 for r in ready), ready
        assert await prom.scalar("max(llmgw_redis_degraded)") == 0
        firing = {r["name"] for r in rules.values() if r["state"] == "firing"}
        assert firing.isdisjoint({"LLMGWModelNoReadyReplica", "LLMGWRedisDegraded"}), firing

    alerts = sum(q.where.startswith("alert ") for q in queries)
    print("\n" + "\n".join(f"{n:3d} series  {where}" for where, n in series.items()))
    print(
        f"{len(queries)} queries returned data ({alerts} of them alert queries); {len(skipped)} skipped"
        f" (DCGM): {skipped}; requests sent {statuses}; firing now: {sorted(firing) or 'none'};"
        f" {time.monotonic() - started:.1f} s"
    )
