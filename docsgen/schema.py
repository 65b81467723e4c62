"""Field tables from pydantic models: each field's type (with its constraints), default and description.

Shared by the fleet-file reference (nested models, one section each) and the settings reference.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from docsgen.markdown import cell, code

CONSTRAINTS: tuple[tuple[str, str], ...] = (
    ("gt", "> {}"),
    ("ge", "≥ {}"),
    ("lt", "< {}"),
    ("le", "≤ {}"),
    ("min_length", "at least {}"),
    ("max_length", "at most {}"),
    ("pattern", "matches `{}`"),
)
SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path", SecretStr: "secret"}


def constraint_texts(metadata: list[Any]) -> list[str]:
    """``≥ 1``, ``matches `^...$```: the annotated_types / pydantic constraints of a field or type."""
    found = []
    for item in metadata:
        for attr, form in CONSTRAINTS:
            value = getattr(item, attr, None)
            if value is not None:
                found.append(form.format(value))
        if isinstance(item, FieldInfo):
            found += constraint_texts(item.metadata)
    return found


def type_text(annotation: Any, link: Callable[[type[BaseModel]], str]) -> str:
    """A type as a reader says it: ``integer (≥ 1)``, ```auto` | number (> 0, ≤ 1)``, ``list of string``."""
    origin = get_origin(annotation)
    if annotation is None or annotation is type(None):
        return "null"
    if origin is Annotated:
        inner, *meta = get_args(annotation)
        limits = constraint_texts(meta)
        base = type_text(inner, link)
        return f"{base} ({', '.join(limits)})" if limits else base
    if origin in (Union, types.UnionType):
        return " \\| ".join(type_text(arg, link) for arg in get_args(annotation))
    if origin is Literal:
        return " \\| ".join(f"`{value}`" for value in get_args(annotation))
    if origin is list:
        return f"list of {type_text(get_args(annotation)[0], link)}"
    if origin is dict:
        key, value = get_args(annotation)
        return f"map of {type_text(key, link)} to {type_text(value, link)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return link(annotation)
    return SIMPLE.get(annotation, getattr(annotation, "__name__", str(annotation)))


def default_text(field: FieldInfo) -> str:
    """The default as Markdown: a literal, ``required``, or ``computed`` for a factory with inputs."""
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        factory: Any = field.default_factory
        if not isinstance(factory, type):
            return "computed"
        value = factory()
        return "see below" if isinstance(value, BaseModel) else code(repr(value))
    value = field.default
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, bool):
        return code(str(value).lower())
    return code(str(value))


@dataclass(frozen=True)
class FieldRow:
    """One field of a model, ready for a table."""

    name: str
    type: str
    default: str
    description: str

    def cells(self) -> list[str]:
        return [code(self.name), self.type, self.default, cell(self.description)]


def field_rows(
    model: type[BaseModel], link: Callable[[type[BaseModel]], str], name_of: Callable[[str], str] = str
) -> Iterator[FieldRow]:
    """Every field of ``model`` in declaration order; ``name_of`` turns a field name into its shown name."""
    for name, field in model.model_fields.items():
        full = field.annotation if not field.metadata else Annotated[(field.annotation, *field.metadata)]
        yield FieldRow(name_of(name), type_text(full, link), default_text(field), field.description or "")


def nested_models(model: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel], bool]]:
    """``(field, model, is_list)`` for each field whose type is a model or a list of models."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        is_list = get_origin(annotation) is list
        if is_list:
            annotation = get_args(annotation)[0]
            if get_origin(annotation) is Annotated:
                annotation = get_args(annotation)[0]
        for candidate in (annotation, *get_args(annotation)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                yield name, candidate, is_list
