"""A model's :class:`llmgw_contract.kv_events.BlockKeyer` from its files: the tokenizer (``tokenizer.json``)
and the chat template vLLM renders with (the fleet file's, else the folder's), found in its weights folder or,
for a Hugging Face repo id, in the Hugging Face cache vLLM downloaded it to."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from llmgw_contract.chat_frames import Frames, jinja_render
from llmgw_contract.kv_events import BlockKeyer


def special_tokens(conf: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in conf.items():
        if k.endswith("_token"):
            v = v.get("content") if isinstance(v, dict) else v
            if isinstance(v, str):
                out[k] = v
    return out


def model_folder(weights: Path) -> Path:
    """A model's files: ``weights`` itself when it is a folder, else (a Hugging Face repo id, as vLLM's
    ``--model`` takes it) its snapshot in the Hugging Face cache (``HF_HOME``, else ~/.cache/huggingface:
    the one vLLM loaded it from)."""
    if weights.is_dir():
        return weights
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    repo = home / "hub" / ("models--" + str(weights).replace("/", "--"))
    ref = repo / "refs" / "main"
    if ref.is_file():
        return repo / "snapshots" / ref.read_text().strip()
    snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    return snapshots[-1] if snapshots else weights


def load_keyer(
    model_dir: Path, chat_template: str | None, chunk_bytes: int, max_chunks: int
) -> BlockKeyer | None:
    """The model's :class:`BlockKeyer` from its weights folder or Hugging Face repo id (:func:`model_folder`:
    ``tokenizer.json``, the chat template of the fleet file or the folder); None when it has no such
    tokenizer or its template cannot be read back."""
    from tokenizers import Tokenizer

    model_dir = model_folder(model_dir)
    tok_file = model_dir / "tokenizer.json"
    if not tok_file.is_file():
        return None
    tokenizer = Tokenizer.from_file(str(tok_file))
    conf_file = model_dir / "tokenizer_config.json"
    conf = json.loads(conf_file.read_text()) if conf_file.is_file() else {}
    template = chat_template
    if template and "{" not in template and Path(template).is_file():
        template = Path(template).read_text()
    if not template and (model_dir / "chat_template.jinja").is_file():
        template = (model_dir / "chat_template.jinja").read_text()
    template = template or conf.get("chat_template")
    frames = Frames.learn(jinja_render(template, special_tokens(conf))) if isinstance(template, str) else None
    if isinstance(template, str) and frames is None:
        return None

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=False))

    return BlockKeyer(decode, frames, chunk_bytes, max_chunks)
