"""The CLI reference: the argument parser of every console script that ``pyproject.toml`` declares.

Each script's ``main`` is called with ``--help`` while ``ArgumentParser.parse_args`` is replaced by a
catch that hands back the parser it was called on, so the page shows the very parser the command
uses, and nothing of the command runs past building it. ``LLMGW_*`` variables are hidden meanwhile, the
CPU count named and the usage lines wrapped at a fixed width, so the page does not depend on where it
is generated.
"""

from __future__ import annotations

import argparse
import importlib
import os
import tomllib
from collections.abc import Iterator
from typing import Any, NoReturn
from unittest import mock

from docsgen import REPO
from docsgen.markdown import cell, code, heading, page, table

WIDTH = 100
SOURCE = "the `[project.scripts]` of `pyproject.toml` and each command's argument parser"
INTRO = """Every command the package installs, with every option, from the parser the command itself
builds. Each also answers `--help`."""


class CpuCount(int):
    """What ``os.cpu_count()`` returns while a parser is captured: a default taken from it reads as such."""

    def __str__(self) -> str:
        return "the number of CPUs"

    __repr__ = __str__


class Captured(Exception):
    """Raised in place of parsing: carries the parser a command built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def scripts() -> dict[str, str]:
    """Console script name -> ``module:function``, in pyproject's order."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project["scripts"])


def capture(target: str) -> argparse.ArgumentParser:
    """The parser that ``module:function`` builds and parses its arguments with."""
    module_name, _, function_name = target.partition(":")
    main = getattr(importlib.import_module(module_name), function_name)

    def catch(parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        raise Captured(parser)

    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMGW_")}
    with (
        mock.patch.dict(os.environ, env, clear=True),
        mock.patch.object(argparse.ArgumentParser, "parse_args", catch),
        mock.patch.object(os, "cpu_count", lambda: CpuCount(2)),
    ):
        try:
            main(["--help"])
        except Captured as found:
            return found.parser
    raise RuntimeError(f"{target} returned without parsing its arguments")


def expanded_help(action: argparse.Action, prog: str) -> str:
    """An option's help with argparse's ``%(default)s``-style fields filled in, as ``--help`` does."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    return action.help % params


def default_of(action: argparse.Action) -> str:
    """The default as ``--help`` would mean it: nothing for flags and unset values."""
    value = action.default
    if isinstance(action, argparse._StoreConstAction | argparse._CountAction):
        return ""
    if value is None or value is argparse.SUPPRESS or value is False:
        return ""
    if isinstance(action.type, argparse.FileType):
        return "standard output" if "w" in action.type._mode else "standard input"
    if value == "":
        return "empty"
    if isinstance(value, list | tuple):
        value = " ".join(str(v) for v in value)
    return code(str(value).replace(str(REPO), "<repo>"))


def option_rows(parser: argparse.ArgumentParser) -> Iterator[list[str]]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(action.option_strings) or (action.metavar or action.dest)
        choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
        yield [code(str(names)), default_of(action), cell(expanded_help(action, parser.prog) + choices)]


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += list(action.choices.items())
    return found


def summaries(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Subcommand name -> the help its ``add_parser(help=...)`` gave."""
    found: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update({a.dest: a.help or "" for a in action._choices_actions})
    return found


def usage(parser: argparse.ArgumentParser) -> str:
    """The usage line as ``--help`` prints it, wrapped at a fixed width (not the terminal's)."""
    formatter = argparse.HelpFormatter(prog=parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def parser_section(
    parser: argparse.ArgumentParser, level: int, title: str, anchor: str, summary: str = ""
) -> list[str]:
    lines = [heading(level, title, anchor), ""]
    if summary or parser.description:
        lines += [cell(parser.description or summary), ""]
    lines += ["```text", usage(parser), "```", ""]
    rows = list(option_rows(parser))
    if rows:
        lines += [*table(["argument", "default", "meaning"], rows), ""]
    helps = summaries(parser)
    for name, sub in subcommands(parser):
        title_of_sub = f"`{title.strip('`')} {name}`"
        lines += parser_section(sub, level + 1, title_of_sub, f"{anchor}-{name}", helps.get(name, ""))
    return lines


def render() -> str:
    body: list[str] = []
    found = scripts()
    body += table(
        ["command", "entry point", "what it does"],
        [
            [f"[{code(name)}](#{name})", code(target), cell(capture(target).description or "")]
            for name, target in found.items()
        ],
    )
    body.append("")
    for name, target in found.items():
        body += parser_section(capture(target), 2, f"`{name}`", name)
    return page("Command-line reference", SOURCE, INTRO, body)
