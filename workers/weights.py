"""Where a model's weights are: a prepared package folder, a local folder, or a Hugging Face id."""

from __future__ import annotations

from pathlib import Path

from contract.fleet import Model
from workers.models import default_models_dir, prepared_path


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
