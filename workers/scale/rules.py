"""Each model's scaling rule by its fleet name, re-read when the fleet file changes (a stat per call)."""

from __future__ import annotations

import logging
from pathlib import Path

from llmgw_contract.fleet import FleetError
from llmgw_contract.fleet_file import FleetFile
from llmgw_contract.scaling import ScalingRule, scaling_rule

log = logging.getLogger("llmgw.scaler")


class FleetRules:
    """The rules of the fleet file at ``path``; a file that stops validating keeps the last good rules."""

    def __init__(self, path: Path) -> None:
        self.file = FleetFile(path)
        self.rules: dict[str, ScalingRule] = {}
        self.read()

    def read(self) -> None:
        """Read the file now (raises FleetError on the first read only)."""
        try:
            fleet = self.file.read()
        except FleetError as exc:
            if not self.rules:
                raise
            log.error("fleet file unusable, the last good rules stay: %s", exc)
            return
        self.rules = {m.name: scaling_rule(m) for m in fleet.models}

    def __call__(self) -> dict[str, ScalingRule]:
        if self.file.changed():
            self.read()
        return self.rules
