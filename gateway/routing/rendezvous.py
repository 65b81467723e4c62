"""Rendezvous (highest-random-weight) hashing of a key over endpoint ids.

Each endpoint's score for a key is a 64-bit BLAKE2b hash of the key's digest and the endpoint's id; the
ranking is by score, highest first (ties, which need a 64-bit collision, by id). Only stdlib hashing is
used, never Python's salted ``hash()``, so every process on every host ranks the same key the same way
without sharing any state. Removing an endpoint only moves the keys that ranked it first, each to its
next in line; adding one only takes the keys it now ranks first for.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

from gateway.replicas.table import Endpoint

_PERSON = b"gw-hrw-v1"


def key_digest(key: bytes) -> bytes:
    """A fixed-size digest of the key, computed once per pick however many endpoints are scored."""
    return blake2b(key, digest_size=16, person=_PERSON).digest()


def score(digest: bytes, node_id: str) -> int:
    """The endpoint's weight for a key digest (from :func:`key_digest`): a stable 64-bit integer."""
    h = blake2b(digest, digest_size=8, person=_PERSON)
    h.update(node_id.encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "big")


def rank(key: bytes, candidates: Sequence[Endpoint]) -> list[Endpoint]:
    """The candidates in rendezvous order for ``key``: the preferred endpoint first."""
    digest = key_digest(key)
    return sorted(candidates, key=lambda e: (-score(digest, e.id), e.id))


def top(key: bytes, candidates: Sequence[Endpoint]) -> Endpoint:
    """The first endpoint of :func:`rank`, without sorting them all."""
    digest = key_digest(key)
    return min(candidates, key=lambda e: (-score(digest, e.id), e.id))
