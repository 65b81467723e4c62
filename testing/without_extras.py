"""Run a module as ``python -m`` does, in an interpreter where the optional extras' packages cannot be
imported: an import finder placed first refuses them (ImportError, as when they are not installed).

    python -m testing.without_extras gateway.cli --fleet fleet.yaml --port 9000
    python -m testing.without_extras script.py

The tests use it to show what runs with the base dependencies alone (the gateway image's)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType

BLOCKED = ("zmq", "msgspec", "tokenizers", "jinja2", "grpc", "google.protobuf", "opentelemetry")
"""The top-level modules of the tracing, workers and scaler extras (llmgw_contract/extras.py)."""


class Refuse(importlib.abc.MetaPathFinder):
    """Refuses every module in or under :data:`BLOCKED`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if any(fullname == name or fullname.startswith(name + ".") for name in BLOCKED):
            raise ImportError(f"{fullname} refused: its extra is not installed (testing.without_extras)")
        return None


def main() -> None:
    sys.meta_path.insert(0, Refuse())
    target, sys.argv = sys.argv[1], sys.argv[1:]
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
