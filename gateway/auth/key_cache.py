"""The keys one gateway verified lately, by the sha256 of their secret: bounded, each for ``ttl_s``.

Two uses. While the gateway is subscribed to the key store's change channel (gateway/auth/key_changes.py),
a key verified within ``ttl_s`` is served from here with no Redis round trip; every announced change
(a revoke, an import) empties the cache at once. While it is not subscribed (not yet, or the channel's
connection failed), a change could go unseen, so every lookup reads the store; the entries then serve only
as the outage fallback: a key verified within ``ttl_s`` keeps working while the store is unreachable.

An epoch guards both against a lookup that was in flight when a change arrived: an entry counts as fresh
only if it was verified in the current epoch, and every change, subscription and loss of subscription
starts a new one. So a revoked key is refused by every subscribed gateway as soon as the change reaches
it, and by a gateway cut off from the store (its subscription silently dead) within ``ttl_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.auth.keys import ApiKey

MAX_CACHED_KEYS = 100_000


@dataclass(frozen=True, slots=True)
class Entry:
    key: ApiKey
    verified_at: float
    epoch: int


class KeyCache:
    def __init__(self, ttl_s: float, max_keys: int = MAX_CACHED_KEYS) -> None:
        self.ttl_s, self.max_keys = ttl_s, max_keys
        self.epoch = 0
        self.subscribed = False
        self._entries: dict[str, Entry] = {}

    def fresh(self, digest: str, now: float) -> ApiKey | None:
        """The key, if the cache may answer for it without asking the store."""
        entry = self._entries.get(digest)
        if entry is None or not self.subscribed or entry.epoch != self.epoch:
            return None
        return entry.key if now - entry.verified_at <= self.ttl_s else None

    def fallback(self, digest: str, now: float) -> ApiKey | None:
        """The key, if it was verified within ``ttl_s`` (the store is unreachable)."""
        entry = self._entries.get(digest)
        return entry.key if entry is not None and now - entry.verified_at <= self.ttl_s else None

    def put(self, digest: str, key: ApiKey, now: float, epoch: int) -> None:
        """Remember a key the store returned to a lookup that began in ``epoch``."""
        if epoch != self.epoch:
            return  # a change arrived while the lookup ran: its answer may predate the change
        if len(self._entries) >= self.max_keys:
            self._entries.clear()
        self._entries[digest] = Entry(key, now, epoch)

    def forget(self, digest: str) -> None:
        self._entries.pop(digest, None)

    def changed(self) -> None:
        """A key changed in the store: nothing cached may be served any more."""
        self._entries.clear()
        self.epoch += 1

    def on_subscribed(self, subscribed: bool) -> None:
        """The channel's subscription began (changes before it may have been missed: a new epoch) or was
        lost (a new epoch, and no answers from the cache until subscribed again; the entries stay, for
        the outage fallback)."""
        self.subscribed = subscribed
        self.epoch += 1
