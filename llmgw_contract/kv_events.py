"""What one replica's KV cache holds, as its vLLM KV events tell it, in the gateway's prefix keys (pure).

vLLM (``--kv-events-config``) publishes per engine step a msgpack batch of ``BlockStored`` (block hashes,
the parent's hash, the blocks' token ids), ``BlockRemoved`` (hashes) and ``AllBlocksCleared``, each batch
with a sequence number. :class:`BlockMirror` keeps the replica's blocks (parent and tokens) and, for each
stored block, the prefix keys (:mod:`llmgw_contract.prefix_chain`) whose text ends in that block: the chain's
tokens decoded to text, read back into messages (:class:`llmgw_contract.chat_frames.Frames`), cut into whole
chunks, less the keys its parents give. A key is held while some block gives it (counted per key); the
mirror answers each batch with a :class:`Delta`: keys added, keys removed, or a reset of all it held.

Order: a batch whose sequence number is not the next one is a *gap* (the caller asks vLLM's replay endpoint
for what is missing, or resets); sequence 0 after others is a restarted publisher (reset). A block whose
parent chain is unknown (stored before a reset) gives no keys: the mirror may miss what is cached, never
claim what is not. No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

import msgspec

from llmgw_contract.chat_frames import Frames
from llmgw_contract.prefix_chain import chain_keys

MASK64 = (1 << 64) - 1


class Stored(msgspec.Struct, tag="BlockStored"):
    """vLLM's BlockStored, the fields the mirror reads (msgspec skips the others)."""

    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_name: str | None = None
    extra_keys: list[list[object] | None] | None = None
    group_idx: int | None = None


class Removed(msgspec.Struct, tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    group_idx: int | None = None


class Cleared(msgspec.Struct, tag="AllBlocksCleared"):
    pass


class Batch(msgspec.Struct, array_like=True):
    """vLLM's KVEventBatch: (ts, events, data_parallel_rank?) as a msgpack array."""

    ts: float
    events: list[Stored | Removed | Cleared]
    data_parallel_rank: int | None = None


def decode_batch(payload: bytes) -> Batch:
    return msgspec.msgpack.decode(payload, type=Batch)


def as_int(h: int | bytes) -> int:
    return h if isinstance(h, int) else int.from_bytes(h, "big") & MASK64


ANY = -2


class Order(StrEnum):
    """What a batch's sequence number means for the mirror."""

    NEXT = "next"
    OLD = "old"  # seen already (a replay that overlaps): skip
    GAP = "gap"  # batches are missing: replay them, else reset
    RESTART = "restart"  # the publisher started again from 0: reset


@dataclass(frozen=True, slots=True)
class Delta:
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    reset: bool = False

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.reset)


@dataclass(frozen=True, slots=True)
class BlockKeyer:
    """A cached prompt's token ids -> its prefix keys (whole chunks; both readings of a default system
    prompt). ``decode`` is the model's tokenizer (special tokens kept)."""

    decode: Callable[[list[int]], str]
    frames: Frames | None
    chunk_bytes: int
    max_chunks: int

    @property
    def limit(self) -> int:
        return self.chunk_bytes * self.max_chunks

    def keys(self, tokens: list[int]) -> frozenset[str]:
        text = self.decode(tokens)
        readings = self.frames.read(text) if self.frames is not None else [text.rstrip("\ufffd")]
        out: set[str] = set()
        for reading in readings:
            raw = reading.encode("utf-8", "surrogatepass")[: self.limit]
            out.update(chain_keys(raw, self.chunk_bytes, self.max_chunks, full_only=True))
        return frozenset(out)


@dataclass(slots=True)
class Block:
    parent: int | None
    tokens: tuple[int, ...]
    keys: frozenset[str]
    """The keys whose text ends in this block: those of the cached prompt up to its end that its parent
    chain does not give (empty: an unknown chain, or a LoRA's block)."""
    depth: int
    """Tokens from the root to this block's end; -1 when the chain is unknown."""


@dataclass
class BlockMirror:
    """One replica's cache, from its events: its blocks, the keys they give, the last sequence number."""

    keyer: BlockKeyer
    blocks: dict[int, Block] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    """key -> how many blocks give it (a key is held while one does)."""
    last_seq: int = -1
    """The last batch applied; -1: none yet (the next is 0); :data:`ANY`: whichever comes next (after a
    loss that no replay could fill)."""

    def order(self, seq: int) -> Order:
        if seq == self.last_seq + 1 or (self.last_seq == ANY and seq >= 0):
            return Order.NEXT
        if seq == 0 and self.last_seq >= 0:
            return Order.RESTART
        return Order.OLD if seq <= self.last_seq else Order.GAP

    def reset(self, last_seq: int = -1) -> Delta:
        """Forget everything (restart, clear, lost events); the caller drops the replica's entries."""
        self.blocks.clear()
        self.held.clear()
        self.last_seq = last_seq
        return Delta(reset=True)

    def apply(self, seq: int, batch: Batch) -> Delta:
        """Apply one batch whose number :meth:`order` found NEXT (or any, after a reset)."""
        self.last_seq = seq
        added: list[str] = []
        removed: list[str] = []
        reset = False
        for ev in batch.events:
            if isinstance(ev, Cleared):
                self.reset(seq)
                added, removed, reset = [], [], True
            elif ev.group_idx not in (None, 0):
                continue
            elif isinstance(ev, Stored):
                added += self.store(ev)
            else:
                removed += self.remove(as_int(h) for h in ev.block_hashes)
        gone = [k for k in dict.fromkeys(removed) if k not in self.held]
        return Delta(tuple(k for k in dict.fromkeys(added) if k in self.held), tuple(gone), reset)

    def store(self, ev: Stored) -> list[str]:
        parent = None if ev.parent_block_hash is None else as_int(ev.parent_block_hash)
        size = ev.block_size
        plain = ev.lora_name is None and not any(ev.extra_keys or ())
        chain = self.chain(parent) if plain else None
        added: list[str] = []
        for i, h in enumerate(ev.block_hashes):
            tokens = tuple(ev.token_ids[i * size : (i + 1) * size])
            key = as_int(h)
            if key in self.blocks:
                parent = key
                chain = self.chain(key) if plain else None
                continue
            keys: frozenset[str] = frozenset()
            depth = -1
            if chain is not None:
                ids, known = chain
                ids = [*ids, *tokens]
                depth = len(ids)
                if depth - len(tokens) < self.keyer.limit:
                    keys = self.keyer.keys(ids) - known
                chain = (ids, known | keys)
            self.blocks[key] = Block(parent, tokens, keys, depth)
            for k in keys:
                self.held[k] = self.held.get(k, 0) + 1
                if self.held[k] == 1:
                    added.append(k)
            parent = key
        return added

    def chain(self, block: int | None) -> tuple[list[int], frozenset[str]] | None:
        """The token ids from the root to ``block``'s end and the keys its blocks give; None when some
        block on the way is unknown."""
        parts: list[tuple[int, ...]] = []
        keys: set[str] = set()
        while block is not None:
            b = self.blocks.get(block)
            if b is None or b.depth < 0:
                return None
            parts.append(b.tokens)
            keys |= b.keys
            block = b.parent
        return [t for part in reversed(parts) for t in part], frozenset(keys)

    def remove(self, hashes: Iterable[int]) -> list[str]:
        removed: list[str] = []
        for h in hashes:
            b = self.blocks.pop(h, None)
            if b is None:
                continue
            for k in b.keys:
                n = self.held.get(k, 0) - 1
                if n <= 0:
                    self.held.pop(k, None)
                    removed.append(k)
                else:
                    self.held[k] = n
        return removed
