"""The exact-mode evaluation's own pieces: vLLM's block keys computed without vLLM, its events decoded.

The golden values were produced by vLLM 0.32.0's own ``hash_block_tokens`` / ``maybe_convert_block_hash``
and ``KVEventBatch`` encoder (``bench/kv_events_eval.py cost`` re-checks the hashing against the venv's
vLLM on every run), so these tests pin the compatibility without importing vLLM.
"""

from __future__ import annotations

import msgspec

from bench.kv_events_eval import EventLog, block_keys
from llmgw_contract.kv_events import Batch, Cleared, Removed, Stored

TOKENS = list(range(300))

VLLM_BATCH = bytes.fromhex(
    "93cb3ff80000000000009388a474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573920b0cb170"
    "6172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739400010203aa626c6f636b5f73697a65cc80a76c"
    "6f72615f6964c0a66d656469756da3435055a96c6f72615f6e616d65c083a474797065ac426c6f636b52656d6f7665"
    "64ac626c6f636b5f686173686573910ba66d656469756da343505581a474797065b0416c6c426c6f636b73436c6561"
    "726564c0"
)


def test_block_keys_equal_vllms_for_both_sha256_algorithms() -> None:
    assert block_keys(TOKENS, "sha256") == [14163498385596709634, 9322746933207197552]
    assert block_keys(TOKENS, "sha256_cbor") == [3839963118782193235, 10425884253868746199]


def test_block_keys_chain_full_blocks_only() -> None:
    keys = block_keys(TOKENS)
    assert len(keys) == 2  # 300 tokens: two full 128-token blocks, the rest is not cached
    assert block_keys(TOKENS[:256]) == keys and block_keys(TOKENS[:255]) == keys[:1]
    changed = block_keys([1, *TOKENS[1:]])
    assert changed[0] != keys[0] and changed[1] != keys[1]  # a key names its whole prefix
    assert block_keys(TOKENS[:127]) == []


def test_another_seed_changes_every_key() -> None:
    """NONE_HASH comes from the seed: a gateway must use the replica's (PYTHONHASHSEED, else the default)."""
    assert not set(block_keys(TOKENS, seed="another")) & set(block_keys(TOKENS))


def test_a_vllm_batch_decodes_as_stored_removed_cleared() -> None:
    batch = msgspec.msgpack.Decoder(Batch).decode(VLLM_BATCH)
    stored, removed, cleared = batch.events
    assert isinstance(stored, Stored) and stored.block_hashes == [11, 12] and stored.block_size == 128
    assert stored.token_ids == [0, 1, 2, 3] and stored.parent_block_hash is None
    assert isinstance(removed, Removed) and removed.block_hashes == [11]
    assert isinstance(cleared, Cleared)


def test_event_log_holds_the_leading_keys_still_cached() -> None:
    log = EventLog()
    log.apply(0, Batch(1.0, [Stored([1, 2, 3], None, [], 128)]))
    assert log.holds([1, 2, 3, 4]) == 3
    log.apply(1, Batch(2.0, [Removed([2])]))
    assert log.holds([1, 2, 3]) == 1 and log.gaps == 0
    log.apply(3, Batch(3.0, [Cleared()]))
    assert log.holds([1]) == 0 and log.gaps == 1
    assert log.counts == {"stored": 3, "removed": 1, "cleared": 1}
