"""Where a model's weights are: a prepared package folder, a local folder, or a Hugging Face id."""

from __future__ import annotations

import os
from pathlib import Path

from llmgw_contract.fleet import Model

_REPO_ROOT = Path(__file__).resolve().parents[2]


def default_models_dir() -> Path:
    """``$LLMGW_MODELS_DIR``, else ``<repo>/.cache/models``."""
    env = os.environ.get("LLMGW_MODELS_DIR")
    return Path(env).expanduser() if env else _REPO_ROOT / ".cache" / "models"


def prepared_path(package: str, models_dir: Path) -> Path:
    """Where ``package``'s model folder is (or will be) under ``models_dir``."""
    if not package or package.startswith(".") or "/" in package or os.sep in package:
        raise ValueError(f"bad package name {package!r}")
    return models_dir / package


def weights_for(model: Model, models_dir: Path | None = None) -> Path | str:
    src = model.source
    if src is None:
        raise ValueError(f"model {model.name!r} has no source: its replicas run elsewhere")
    if src.package is not None:
        return prepared_path(src.package, models_dir or default_models_dir())
    if src.path is not None:
        return src.path
    assert src.hf is not None
    return src.hf
