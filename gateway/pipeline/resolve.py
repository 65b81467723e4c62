"""Step 3, resolve: a public name, alias or LoRA adapter (declared in the fleet, or loaded at run time)
to the model whose replicas serve it."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.errors import Forbidden, InvalidRequest, ModelNotFound
from gateway.lora.adapters import RuntimeAdapter
from gateway.values import RequestContext
from llmgw_contract.fleet import Model


def resolve(
    ctx: RequestContext, names: Mapping[str, Model], adapters: Mapping[str, RuntimeAdapter] | None = None
) -> Model:
    model = names.get(ctx.model_name)
    adapter = adapters.get(ctx.model_name) if model is None and adapters else None
    if adapter is not None:
        model = names.get(adapter.model)
        ctx.holders = adapter.holders
    if model is None:
        raise ModelNotFound(f"The model '{ctx.model_name}' does not exist", param="model")
    if not ctx.caller.may_use(model.name):
        raise Forbidden(f"this API key may not use the model '{ctx.model_name}'", param="model")
    if model.kind not in ctx.api.kinds:
        raise InvalidRequest(
            f"the model '{ctx.model_name}' serves {model.kind} requests, not {ctx.api.path}",
            param="model",
        )
    if ctx.calls_tools and not serves_tools(model):
        raise InvalidRequest(
            f"the model '{ctx.model_name}' is not served with a tool-call parser, so it cannot take a "
            "request with tools (unless tool_choice is none): set engine.tool_call_parser for model "
            f"'{model.name}' in the fleet file (e.g. hermes; see docs/gateway/agents.md)",
            param="tools",
        )
    ctx.model = model
    return model


def serves_tools(model: Model) -> bool:
    """True unless the gateway knows the model's replicas run without a tool-call parser: supervised
    replicas get one only from ``engine.tool_call_parser`` (or ``--tool-call-parser`` in extra_args);
    servers run elsewhere (``endpoints``) are taken at their word."""
    engine = model.engine
    return not model.managed or bool(engine.tool_call_parser) or "--tool-call-parser" in engine.extra_args
