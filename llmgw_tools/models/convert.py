"""GGUF to a Hugging Face folder (safetensors, float32) that vLLM serves.

The conversion runs in a child process (like ``python -m llmgw_tools.models.convert GGUF OUT``) so that torch
and transformers, and the ~1-2 GiB the dequantized model takes, never stay in the caller (the worker
supervisor).  The child prints one line per event on stdout; :func:`convert_gguf` forwards them.

GGUF files say whether their tokenizer adds BOS (``tokenizer.ggml.add_bos_token``); transformers' GGUF
tokenizer conversion drops that, and Gemma without its BOS degenerates into a repetition loop.  The
child restores it in the post-processor and ``tokenizer_config.json`` and checks it on the saved folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from llmgw_tools.models.packages import PrepareError, Progress

_REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPE = 1  # bump when what a preparation writes changes: folders made by an older recipe are rebuilt
_CHILD_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}  # HF_HUB_DISABLE_PROGRESS_BARS also silences transformers' tqdm bars


def convert_gguf(gguf: Path, out: Path, progress: Progress) -> None:
    """Convert ``gguf`` into the (new or empty) folder ``out``, in a child process."""
    env = {**os.environ, **_CHILD_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    # -m would import it twice
    entry = "from llmgw_tools.models.convert import main; raise SystemExit(main())"
    cmd = [sys.executable, "-c", entry, str(gguf), str(out)]
    with tempfile.TemporaryFile("w+") as err:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env) as child:
            assert child.stdout is not None
            for line in child.stdout:
                progress(line.rstrip())
        if child.returncode != 0:
            err.seek(0)
            tail = "\n".join(err.read().strip().splitlines()[-20:])
            raise PrepareError(f"converting {gguf.name} failed (exit {child.returncode}):\n{tail}")


def gguf_adds_bos(gguf: Path) -> bool:
    """Whether the GGUF's tokenizer adds BOS (``tokenizer.ggml.add_bos_token``, false when absent)."""
    from gguf import GGUFReader

    field = GGUFReader(str(gguf)).fields.get("tokenizer.ggml.add_bos_token")
    return bool(field.contents()) if field is not None else False


def first_token_is_bos(tokenizer: Any) -> bool:
    ids: list[int] = tokenizer("hi").input_ids
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def _load_model(gguf: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, GgufConfig

    # transformers 5 keeps GGUF weights quantized (and refuses to save them) unless told to dequantize.
    config = GgufConfig(dequantize=True)
    return AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, quantization_config=config
    )


def _drop_quantization(model: Any) -> None:
    """Forget that the weights came from GGUF so ``save_pretrained`` writes plain safetensors."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False


def _tidy_tokenizer_config(out: Path, adds_bos: bool) -> None:
    """Say ``add_bos_token`` explicitly, and drop the loading flag transformers saves with it."""
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    for flag in ("local_files_only", "is_local"):
        config.pop(flag, None)
    if adds_bos:
        config["add_bos_token"] = True
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _convert_tokenizer(gguf: Path, out: Path, say: Progress) -> bool:
    from transformers import AutoTokenizer

    say("loading tokenizer")
    tokenizer: Any = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    adds_bos = gguf_adds_bos(gguf)
    if adds_bos and not first_token_is_bos(tokenizer):
        say("GGUF adds BOS but the converted tokenizer does not: restoring BOS")
        tokenizer.add_bos_token = True  # the setter rebuilds the post-processor with BOS first
    tokenizer.save_pretrained(str(out))
    _tidy_tokenizer_config(out, adds_bos)
    return adds_bos


def _check_saved(out: Path, adds_bos: bool, say: Progress) -> None:
    from transformers import AutoConfig, AutoTokenizer

    say("checking the saved folder loads")
    AutoConfig.from_pretrained(str(out))
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    if adds_bos and not first_token_is_bos(tokenizer):
        raise PrepareError(f"saved tokenizer in {out} does not add BOS")


def convert_in_process(gguf: Path, out: Path, say: Progress) -> None:
    """The conversion itself (what the child runs)."""
    out.mkdir(parents=True, exist_ok=True)
    adds_bos = _convert_tokenizer(gguf, out, say)
    say("loading GGUF weights and dequantizing to float32")
    model = _load_model(gguf)
    _drop_quantization(model)
    say("writing model.safetensors")
    model.save_pretrained(str(out))
    del model
    _check_saved(out, adds_bos, say)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Convert one GGUF file into a Hugging Face folder.")
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    convert_in_process(args.gguf, args.out, lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
