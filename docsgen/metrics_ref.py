"""The metrics reference: every metric the gateway and the supervisor register, read off their registries."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from docsgen.markdown import cell, code, heading, page, source_of, table
from gateway.metrics import GatewayMetrics
from llmgw_contract.replica_metrics import SupervisorMetrics

INTRO = """What the gateway (`llmgw_*`, on each gateway's `/metrics`) and the supervisor or the registration
sidecar (`llmgw_supervisor_*`, port 9400) export, read off the registries they register on. vLLM's own
`vllm:*` metrics are scraped from the replicas and never re-exported. A counter is exposed with `_total`
appended, a histogram as `_bucket`, `_sum` and `_count`."""
SUFFIX = {"counter": "_total"}


def registries() -> list[tuple[str, str, Callable[[], CollectorRegistry]]]:
    """``(title, anchor, registry factory)`` of every process kind that exports metrics."""
    return [
        ("Gateway", "gateway", lambda: GatewayMetrics().registry),
        ("Supervisor and registration sidecar", "supervisor", lambda: SupervisorMetrics().registry),
    ]


def registered(registry: CollectorRegistry) -> Iterator[MetricWrapperBase]:
    """The metric objects on a registry, in registration order (the registry keeps no public list)."""
    for collector in registry._collector_to_names:
        if isinstance(collector, MetricWrapperBase):
            yield collector


def row(metric: MetricWrapperBase) -> list[str]:
    kind = str(metric._type)
    labels = ", ".join(metric._labelnames)
    return [
        code(metric._name + SUFFIX.get(kind, "")),
        kind,
        code(labels) if labels else "",
        cell(metric._documentation),
    ]


def render() -> str:
    body: list[str] = []
    for title, anchor, factory in registries():
        rows = sorted((row(m) for m in registered(factory())), key=lambda r: r[0])
        body += [heading(2, title, anchor), "", *table(["metric", "type", "labels", "meaning"], rows), ""]
    return page("Metrics reference", source_of(GatewayMetrics, SupervisorMetrics), INTRO, body)
