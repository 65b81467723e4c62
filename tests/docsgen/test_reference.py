"""The reference pages under docs/reference/ are generated from the code and committed; they must be
current, complete (every field, variable, command option, metric and alert), and stale ones reported."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from docsgen import REPO, alerts_ref, cli_ref, fleet_ref, metrics_ref
from docsgen.__main__ import main as docsgen_main
from docsgen.pages import PAGES, REGENERATE, rendered, stale, write
from gateway.settings import GatewaySettings
from llmgw_contract.fleet import Fleet, parse_fleet


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return rendered()


def test_committed_reference_pages_are_current(pages: dict[str, str]) -> None:
    for path, text in pages.items():
        committed = REPO / path
        assert committed.is_file(), f"{path} is missing: regenerate with `{REGENERATE}`"
        assert committed.read_text() == text, f"{path} is stale: regenerate with `{REGENERATE}`"


def test_a_stale_or_missing_page_is_reported_and_rewritten(pages: dict[str, str], tmp_path: Path) -> None:
    assert stale(pages, tmp_path) == list(pages)
    assert write(pages, tmp_path) == list(pages)
    first = PAGES[0][0]
    (tmp_path / first).write_text(pages[first] + "an edit by hand\n")
    assert stale(pages, tmp_path) == [first]
    assert write(pages, tmp_path) == [first]
    assert stale(pages, tmp_path) == []


def test_check_exits_1_and_names_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("docsgen.__main__.stale", lambda pages: ["docs/reference/fleet.md"])
    assert docsgen_main(["--check"]) == 1
    assert REGENERATE in capsys.readouterr().err


def test_fleet_reference_has_every_field_with_a_description(pages: dict[str, str]) -> None:
    text = pages["docs/reference/fleet.md"]
    for _, cls in fleet_ref.sections(Fleet, ""):
        for name, field in cls.model_fields.items():
            assert f"| `{name}` |" in text, f"{cls.__name__}.{name} missing from the fleet reference"
            assert field.description, f"{cls.__name__}.{name} has no description: add a docstring under it"


def test_fleet_reference_example_and_the_guide_s_example_are_valid_fleets() -> None:
    parse_fleet(fleet_ref.example(), "generated example")
    guide = (REPO / "docs" / "fleet-file.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", guide, re.S)
    assert block is not None
    fleet = parse_fleet(block.group(1), "docs/fleet-file.md")
    assert yaml.safe_load(block.group(1))["models"][0]["name"] == fleet.models[0].name


def test_settings_reference_has_every_variable_with_a_description(pages: dict[str, str]) -> None:
    text = pages["docs/reference/settings.md"]
    for name, field in GatewaySettings.model_fields.items():
        assert f"| `LLMGW_{name.upper()}` |" in text
        assert field.description, f"GatewaySettings.{name} has no description: add a docstring under it"


def test_cli_reference_has_every_script_and_every_option(pages: dict[str, str]) -> None:
    text = pages["docs/reference/cli.md"]
    for name, target in cli_ref.scripts().items():
        assert f"## `{name}` {{#{name}}}" in text
        parsers = [cli_ref.capture(target)]
        parsers += [sub for _, sub in cli_ref.subcommands(parsers[0])]
        for parser in parsers:
            for action in parser._actions:
                for option in action.option_strings:
                    assert option in text, f"{name}: option {option} missing"


def test_capturing_a_parser_runs_nothing_of_the_command() -> None:
    parser = cli_ref.capture("gateway.cli:main")
    assert parser.prog == "llmgw-gateway"
    assert "--port" in parser.format_usage()


def test_metrics_reference_has_every_registered_metric(pages: dict[str, str]) -> None:
    text = pages["docs/reference/metrics.md"]
    names = [m._name for _, _, factory in metrics_ref.registries() for m in metrics_ref.registered(factory())]
    assert len(names) > 20
    for name in names:
        assert f"`{name}" in text


def test_alerts_reference_has_every_rule(pages: dict[str, str]) -> None:
    text = pages["docs/reference/alerts.md"]
    rules = alerts_ref.rules()
    assert rules
    for rule in rules:
        assert f"## `{rule['alert']}`" in text
        assert rule["expr"].strip() in text
