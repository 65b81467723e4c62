"""Step 3, resolve: a public name, alias or LoRA adapter to the model whose replicas serve it."""

from __future__ import annotations

from collections.abc import Mapping

from contract.fleet import Model
from gateway.context import RequestContext
from gateway.errors import Forbidden, InvalidRequest, ModelNotFound

ENDPOINT_KINDS = {"chat/completions": "chat", "completions": "chat", "embeddings": "embedding"}


def resolve(ctx: RequestContext, names: Mapping[str, Model]) -> Model:
    model = names.get(ctx.model_name)
    if model is None:
        raise ModelNotFound(f"The model '{ctx.model_name}' does not exist", param="model")
    if not ctx.caller.may_use(model.name):
        raise Forbidden(f"this API key may not use the model '{ctx.model_name}'", param="model")
    if ENDPOINT_KINDS[ctx.endpoint] != model.kind:
        raise InvalidRequest(
            f"the model '{ctx.model_name}' serves {model.kind} requests, not /v1/{ctx.endpoint}",
            param="model",
        )
    ctx.model = model
    return model
