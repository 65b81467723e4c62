"""Step 3b, stored responses: a request that names a stored response (``previous_response_id``, or the
GET and cancel paths) is pinned to the replica that holds it; when that replica has left, the client is
told so (404 ``response_replica_gone``) instead of getting an answer from a replica that lacks it.

The record (gateway/responses_api/affinity.py) names the owner tenant too. With API keys on it is the
proof of ownership: a response without one (expired after ``responses_ttl_s``, or never recorded) is
not known to anyone (404), since the replica would serve it to any tenant that names its id.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gateway.errors import NoReadyReplica, ResponseNotFound, ResponseReplicaGone
from gateway.redis_clients import REDIS_DOWN
from gateway.replicas.table import Endpoint, ModelPool
from gateway.responses_api.affinity import ResponseAffinity, response_id_in
from gateway.values import RequestContext
from llmgw_contract.fleet import Model

log = logging.getLogger("llmgw.proxy")


def stores(names: Mapping[str, Model]) -> list[str]:
    """The models whose replicas keep responses (the fleet's ``engine.responses_store``)."""
    return sorted({m.name for m in names.values() if m.engine.responses_store})


async def locate(ctx: RequestContext, names: Mapping[str, Model], affinity: ResponseAffinity) -> None:
    """A GET or cancel (before resolve): the model and ``ctx.pinned`` from the response's record."""
    if not ctx.api.stored or not ctx.response_id or ctx.api.body != "none":
        return
    try:
        await locate_by_id(ctx, names, affinity)
    except REDIS_DOWN:
        raise NoReadyReplica("stored responses cannot be located while Redis is unreachable") from None


async def locate_by_id(ctx: RequestContext, names: Mapping[str, Model], affinity: ResponseAffinity) -> None:
    allowed = [m for m in stores(names) if ctx.caller.may_use(m)]
    found = await affinity.find(allowed, ctx.response_id, ctx.caller.tenant) if allowed else None
    if found is None:
        raise ResponseNotFound(f"no stored response '{ctx.response_id}' is known", param="response_id")
    ctx.model_name, ctx.pinned = found


async def locate_previous(
    ctx: RequestContext, model: Model, affinity: ResponseAffinity, owners: bool
) -> None:
    """A follow-up (``previous_response_id``, after resolve: ``model`` serves it): ``ctx.pinned`` from the
    response's record. A response another tenant owns does not exist for this one. With no record
    (expired, or made elsewhere): with ``owners`` (keys on) nobody's, else normal routing (the replica
    answers). Redis unreachable: with ``owners`` 503 (nothing proves the owner), else normal routing."""
    if not ctx.api.stored or not ctx.response_id or ctx.api.body == "none":
        return
    try:
        record = await affinity.owned(model.name, ctx.response_id)
    except REDIS_DOWN as exc:
        if owners:
            raise NoReadyReplica("stored responses cannot be located while Redis is unreachable") from None
        log.warning("request_id=%s previous response not located (Redis: %s)", ctx.request_id, exc)
        return
    if record is None and not owners:
        return
    if record is None or record[1] != ctx.caller.tenant:
        raise ResponseNotFound(
            f"no stored response '{ctx.response_id}' is known", param="previous_response_id"
        )
    ctx.pinned = record[0]


def pinned_candidates(ctx: RequestContext, pool: ModelPool, tried: list[Endpoint]) -> list[Endpoint]:
    """The one replica that may serve a pinned request; raises when it left or cannot take it now."""
    assert ctx.pinned is not None
    replica, instance = ctx.pinned
    ep = next((e for e in pool.endpoints if e.id == replica), None)
    if ep is None or (instance and ep.record.instance and ep.record.instance != instance):
        raise ResponseReplicaGone(
            f"the stored response '{ctx.response_id}' was held by replica '{replica}', which has left"
            " (or restarted); stored responses live in one replica's memory and this one is lost",
            param="previous_response_id" if ctx.api.body == "json" else "response_id",
        )
    if ep in tried or not ep.available:
        raise ctx.progress.upstream_error or NoReadyReplica(
            f"the replica '{replica}' holding response '{ctx.response_id}' is not ready; retry later",
            retry_after=2.0,
        )
    return [ep]


async def remember(ctx: RequestContext, affinity: ResponseAffinity, data: bytes) -> bool:
    """Record which replica made a stored response (by the id in ``data``); True once recorded or when
    there is nothing to record, False while the id has not been seen yet."""
    assert ctx.progress.replica is not None and ctx.model is not None
    if ctx.api.stored != "create" or ctx.progress.status != 200 or not ctx.model.engine.responses_store:
        return True
    rid = response_id_in(data)
    if not rid:
        return False
    try:
        await affinity.record(
            ctx.model.name,
            rid,
            (ctx.progress.replica.id, ctx.progress.replica.record.instance),
            ctx.caller.tenant,
        )
    except REDIS_DOWN as exc:
        log.warning("request_id=%s response=%s holder not recorded (Redis: %s)", ctx.request_id, rid, exc)
    return True
