"""What the replicas say of each model in their ``/v1/models`` (vLLM's own list): ``max_model_len``,
and for an adapter its ``parent`` (the base model) and ``root`` (its path), so that the gateway's
``/v1/models`` carries them too; an alias carries its target's.

:class:`ModelCards` is the store (pure); :class:`CardFetcher` fills it, off the request path: each
model's list is read from one routable replica that answers (those not ejected first), again when the
replica it came from leaves or restarts, and every ``refresh_s`` (runtime adapters come and go).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from gateway.replicas.table import Endpoint, ReplicaTable

log = logging.getLogger("llmgw.model_cards")
CARD_FIELDS = ("max_model_len", "parent", "root")


class ModelCards:
    """Each served id's card, as the last replica asked described it."""

    def __init__(self) -> None:
        self._cards: dict[str, dict[str, Any]] = {}

    def learn(self, body: object) -> None:
        """Take the entries of one replica's ``/v1/models`` answer (others are ignored)."""
        data = body.get("data") if isinstance(body, dict) else None
        for entry in data if isinstance(data, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                self._cards[entry["id"]] = {k: entry[k] for k in CARD_FIELDS if k in entry}

    def card(self, name: str, model: str) -> dict[str, Any]:
        """The fields for ``name`` (a public name, alias or adapter) of fleet model ``model``: an adapter's
        own card (its parent and root as the replica says); else the model's ``max_model_len`` with no
        parent and the model's public name as root (vLLM's root is a path on the replica's host)."""
        own = self._cards.get(name, {})
        if own.get("parent"):
            return dict(own)
        base = self._cards.get(model, {})
        found = {"max_model_len": base["max_model_len"]} if "max_model_len" in base else {}
        return {**found, "parent": None, "root": model}


class CardFetcher:
    """Fills :class:`ModelCards` from one answering routable replica of each model."""

    def __init__(
        self,
        cards: ModelCards,
        client: httpx.AsyncClient,
        table: ReplicaTable,
        headers: Callable[[Endpoint], dict[str, str]],
        refresh_s: float = 30.0,
        timeout_s: float = 2.0,
    ) -> None:
        self.cards, self.client, self.table, self.headers = cards, client, table, headers
        self.refresh_s, self.timeout_s = refresh_s, timeout_s
        self._seen: dict[str, tuple[str, str, float]] = {}

    def due(self, model: str, routable: list[Endpoint], now: float) -> bool:
        """Never read, read ``refresh_s`` ago, or the replica it was read from is no longer routable under
        the same instance (it left, or restarted: a fleet change may have changed its context length)."""
        seen = self._seen.get(model)
        if seen is None or now - seen[2] >= self.refresh_s:
            return True
        return not any((e.id, e.record.instance) == seen[:2] for e in routable)

    async def tick(self) -> None:
        """Each model that is due is read from its routable replicas in turn, those not ejected first,
        until one answers (a replica killed but still registered does not hold the card back)."""
        now = time.monotonic()
        for pool in self.table.pools():
            routable = [e for e in pool.endpoints if e.record.routable]
            if not routable or not self.due(pool.model, routable, now):
                continue
            for ep in sorted(routable, key=lambda e: not e.available):
                if await self.fetch(pool.model, ep, now):
                    break

    async def fetch(self, model: str, ep: Endpoint, now: float) -> bool:
        """Learn the cards of ``ep``'s ``/v1/models``; False when it did not answer them."""
        try:
            r = await self.client.get(f"{ep.url}/v1/models", headers=self.headers(ep), timeout=self.timeout_s)
            body = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, OSError, ValueError) as exc:
            log.info("model=%s replica=%s /v1/models not read: %r", model, ep.id, exc)
            return False
        if body is None:
            log.info("model=%s replica=%s /v1/models answered %d", model, ep.id, r.status_code)
            return False
        self.cards.learn(body)
        self._seen[model] = (ep.id, ep.record.instance, now)
        return True
