"""The settings reference: every ``LLMGW_*`` variable of the gateway's one settings class."""

from __future__ import annotations

from pydantic import BaseModel

from docsgen.markdown import page, source_of, table
from docsgen.schema import field_rows
from gateway.settings import GatewaySettings

INTRO = """The gateway (`llmgw-gateway`) reads its settings from `LLMGW_*` environment variables, one class
that fails fast: an invalid value stops the process at start with the reason. Times are seconds."""


def render() -> str:
    prefix = str(GatewaySettings.model_config.get("env_prefix", ""))

    def link(model: type[BaseModel]) -> str:
        return model.__name__

    rows = [row.cells() for row in field_rows(GatewaySettings, link, lambda name: prefix + name.upper())]
    return page(
        "Gateway settings (LLMGW_*)",
        source_of(GatewaySettings),
        INTRO,
        table(["variable", "type", "default", "meaning"], rows),
    )
