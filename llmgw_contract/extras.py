"""The optional extras (pyproject.toml's ``optional-dependencies``) and the check that a feature's extra is
installed, made where the feature is turned on: a missing one stops the start with a message that names
the extra and how to install it, not an ImportError from deep inside a request or a task.

- ``tracing``: the gateway's OpenTelemetry spans over OTLP/gRPC (``LLMGW_TRACING=true``).
- ``workers``: the exact prefix index's KV feeds (vLLM's KV events over ZMQ, the model's tokenizer and chat
  template read back): ``llmgw-workers`` and the registration sidecar's ``--kv-events``.
- ``scaler``: KEDA's external scaler over gRPC (``llmgw-scaler``).

The gateway itself imports none of them unless tracing is on."""

from __future__ import annotations

import importlib.util

DISTRIBUTION = "llm-gateway"
EXTRAS: dict[str, tuple[str, ...]] = {
    "tracing": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.grpc"),
    "workers": ("zmq", "msgspec", "tokenizers", "jinja2"),
    "scaler": ("grpc", "google.protobuf"),
}
"""Each extra and the modules that show it is installed."""


class MissingExtra(ValueError):
    """A feature was turned on without its extra (a ValueError: settings validation reports it as one)."""


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (none when it is installed)."""
    missing = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # a parent package missing (or refused)
            found = False
        if not found:
            missing.append(module)
    return missing


def require_extra(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtra` when ``feature`` (how the user turned it on) lacks ``extra``."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtra(
            f"{feature} needs the optional extra {extra!r}, which is not installed (no {', '.join(missing)}):"
            f" pip install '{DISTRIBUTION}[{extra}]'"
        )
