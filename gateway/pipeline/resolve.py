"""Step 3, resolve: a public name, alias or LoRA adapter (declared in the fleet, or loaded at run time)
to the model whose replicas serve it."""

from __future__ import annotations

from collections.abc import Mapping

from contract.fleet import Model
from gateway.errors import Forbidden, InvalidRequest, ModelNotFound
from gateway.lora.adapters import RuntimeAdapter
from gateway.values import RequestContext


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
    ctx.model = model
    return model
