"""A loopback OTLP/gRPC trace receiver: what vLLM's and the gateway's exporters send, kept as spans
(service name, span name, trace id, parent span id) for tests to read. It serves from its own threads, so
it answers whatever the test's event loop is doing."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from testing.procs import free_port


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str


@dataclass
class TraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    port: int = field(default_factory=free_port)
    spans: list[ReceivedSpan] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            service = attrs.get("service.name", "")
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    self.spans.append(
                        ReceivedSpan(
                            service, s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex()
                        )
                    )
        return trace_service_pb2.ExportTraceServiceResponse()

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]


@contextmanager
def trace_receiver() -> Iterator[TraceReceiver]:
    receiver = TraceReceiver()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{receiver.port}")
    server.start()
    try:
        yield receiver
    finally:
        server.stop(grace=None)
