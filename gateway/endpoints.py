"""The allow-list: every path the gateway forwards to a replica, and how each one is read and routed.

Each fixed path is also served under a per-model base, ``/models/{model}`` + the path
(``/models/smollm2/tokenize``): the model comes from the path, for clients that derive model-less calls
from a base URL (lm-eval's remote tokenizer reads ``{base}/tokenizer_info`` and posts ``{base}/tokenize``).

Nothing outside this table reaches a replica: vLLM's server-changing endpoints (/sleep, /wake_up,
/collective_rpc, LoRA load/unload, /reset_prefix_cache, /pause, profiling, weight updates, ...) answer
404 at the gateway (tests/gateway/test_allow_list.py walks vLLM's own route table to prove it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Body = Literal["json", "multipart", "none"]
Dialect = Literal["openai", "anthropic"]
Stored = Literal["", "create", "lookup"]
CHAT: frozenset[str] = frozenset({"chat"})
POOLING: frozenset[str] = frozenset({"embedding"})
ANY: frozenset[str] = frozenset({"chat", "embedding"})


@dataclass(frozen=True, slots=True)
class Route:
    """One forwarded path. ``path`` is the public path template (``{response_id}`` is the only parameter);
    the replica gets the same path. ``kinds`` are the model kinds that serve it; ``stored`` marks the
    Responses API paths that create a stored response or look one up (response affinity). A path without
    a body that looks nothing up (``GET /tokenizer_info``) names its model in the query: ``?model=``."""

    path: str
    method: str = "POST"
    kinds: frozenset[str] = CHAT
    body: Body = "json"
    dialect: Dialect = "openai"
    stored: Stored = ""

    @property
    def name(self) -> str:
        """The short name in logs and metrics: the path without ``/v1/`` (``chat/completions``)."""
        return self.path.removeprefix("/v1/").lstrip("/")


ROUTES: tuple[Route, ...] = (
    Route("/v1/chat/completions"),
    Route("/v1/completions"),
    Route("/v1/embeddings", kinds=POOLING),
    Route("/v1/responses", stored="create"),
    Route("/v1/responses/{response_id}", method="GET", body="none", stored="lookup"),
    Route("/v1/responses/{response_id}/cancel", body="none", stored="lookup"),
    Route("/v1/messages", dialect="anthropic"),
    Route("/v1/messages/count_tokens", dialect="anthropic"),
    Route("/v1/rerank", kinds=POOLING),
    Route("/v2/rerank", kinds=POOLING),
    Route("/rerank", kinds=POOLING),
    Route("/v1/score", kinds=POOLING),
    Route("/score", kinds=POOLING),
    Route("/pooling", kinds=POOLING),
    Route("/classify", kinds=POOLING),
    Route("/tokenize", kinds=ANY),
    Route("/detokenize", kinds=ANY),
    Route("/tokenizer_info", method="GET", kinds=ANY, body="none"),
    Route("/v1/audio/transcriptions", body="multipart"),
    Route("/v1/audio/translations", body="multipart"),
)
FIXED = {(r.method, r.path): r for r in ROUTES if "{" not in r.path}
FIXED_TEMPLATES = {(r.method, r.path): r for r in ROUTES if "{" in r.path}
RESPONSES = "/v1/responses/"


def match(method: str, path: str) -> tuple[Route, str] | None:
    """The route of a request and its response id (``""`` when the path has none); None: not forwarded."""
    route = FIXED.get((method, path))
    if route is not None:
        return route, ""
    if not path.startswith(RESPONSES):
        return None
    rest = path[len(RESPONSES) :]
    rid, _, action = rest.partition("/")
    if not rid or not rid.isascii() or not rid.replace("_", "").replace("-", "").isalnum():
        return None
    template = RESPONSES + "{response_id}" + (f"/{action}" if action else "")
    route = FIXED_TEMPLATES.get((method, template))
    return (route, rid) if route is not None else None


MODEL_BASE = "/models/"
SCOPED = sorted(FIXED.items(), key=lambda item: -len(item[0][1]))  # the longest path first: /v1/score


def match_scoped(method: str, path: str) -> tuple[Route, str] | None:
    """A fixed route under a per-model base and the model it names: ``/models/{model}{route path}``.
    Model names may hold ``/``, so the route is the longest allow-listed path the request path ends
    with (``/models/m/v1/score`` is ``/v1/score`` for ``m``); None: not forwarded."""
    if not path.startswith(MODEL_BASE):
        return None
    rest = path[len(MODEL_BASE) :]
    for (route_method, route_path), route in SCOPED:
        if route_method == method and rest.endswith(route_path) and len(rest) > len(route_path):
            return route, rest[: -len(route_path)]
    return None
