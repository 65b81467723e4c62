"""The standard ``OTEL_*`` environment variables are honoured (issue 45): where the operator sets the OTLP
endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``) or the service name
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the gateway's spans go there under that name; the
gateway's own settings are the defaults only. Checked at a loopback OTLP receiver."""

from __future__ import annotations

import pytest

from gateway.tracing import Tracing, otel_tracer
from testing.otlp import ReceivedSpan, TraceReceiver, trace_receiver
from testing.poll import until
from testing.procs import free_port

OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SDK_DISABLED",
)  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


async def one_span(endpoint: str, receiver: TraceReceiver) -> ReceivedSpan:
    provider, tracer = otel_tracer(endpoint, "gw-1")
    tracer.start_span("probe").end()
    provider.shutdown()  # flushes the batch
    spans = await until(lambda: [s for s in receiver.spans if s.name == "probe"], 10, "the probe span")
    assert isinstance(spans, list) and isinstance(spans[0], ReceivedSpan)
    return spans[0]


async def test_without_otel_variables_the_settings_apply() -> None:
    with trace_receiver() as receiver:
        span = await one_span(receiver.endpoint, receiver)
    assert span.service == "llmgw-gateway"


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"])
async def test_otel_endpoint_and_service_name_win(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    with trace_receiver() as receiver:
        monkeypatch.setenv(variable, receiver.endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "team-gateway")
        span = await one_span(f"http://127.0.0.1:{free_port()}", receiver)  # the setting: nothing there
    assert span.service == "team-gateway"


async def test_service_name_from_resource_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,deployment.environment=prod")
    with trace_receiver() as receiver:
        span = await one_span(receiver.endpoint, receiver)
    assert span.service == "from-attrs"


def test_otel_sdk_disabled_turns_the_gateways_spans_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not Tracing(True, "http://127.0.0.1:4317", "gw-1").on
