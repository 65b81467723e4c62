"""Fleet file validation: errors name the field path and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.fleet import FleetError, load_fleet, parse_fleet
from testing.procs import REPO


def test_default_fleet_is_valid() -> None:
    fleet = load_fleet(REPO / "fleet.yaml")
    names = fleet.names()
    assert names["smollm2"].name == "smollm2-135m-instruct"
    assert names["gemma3"].name == "gemma-3-270m"
    assert fleet.model("smollm2-135m-instruct").replicas == 2
    assert names["minilm"].kind == "embedding"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("models: []", "models: List should have at least 1 item"),
        ("models:\n - name: a\n", "models.0: Value error, give either source"),
        (
            "models:\n - name: a\n   source: {package: x, path: /y}\n",
            "models.0.source: Value error, give exactly one",
        ),
        (
            "models:\n - name: a\n   source: {package: x}\n   replicas: -1\n",
            "models.0.replicas: Input should be greater",
        ),
        (
            "models:\n - name: a\n   source: {package: x}\n   policy: Round Robin\n",
            "models.0.policy: String should match pattern",
        ),
        (
            "models:\n - name: a\n   source: {package: x}\n   engine: {tensor_parallel_size: 2}\n"
            "   placement: {devices: [2]}\n",
            "each replica needs tensor_parallel_size (2) distinct devices",
        ),
        (
            "models:\n - name: a\n   source: {package: x}\n   budget: {gpu_memory_utilization: 1.5}\n",
            "models.0.budget.gpu_memory_utilization",
        ),
        ("models:\n - name: a\n   source: {package: x}\n   colour: red\n", "models.0.colour: Extra inputs"),
        (
            "models:\n - name: a\n   source: {package: x}\n"
            " - name: b\n   aliases: [a]\n   source: {package: y}\n",
            "name 'a' of model 'b' is already used by model 'a'",
        ),
        ("models:\n - name: a\n   endpoints: [ftp://x]\n", "models.0.endpoints.0"),
        ("models: [", "not valid YAML"),
        (
            "models:\n - name: a\n   source: {package: x}\n   engine: {load_format: dummy}\n"
            "   sleep: {level: 2}\n",
            "models.0: Value error, sleep.level: 2 drops the weights",
        ),
        ("models:\n - name: a\n   source: {package: x}\n   sleep: {level: 3}\n", "models.0.sleep.level"),
        (
            "defaults: {sleep_host_ram_gib: -1}\nmodels:\n - name: a\n   source: {package: x}\n",
            "defaults.sleep_host_ram_gib: Input should be greater than or equal to 0",
        ),
    ],
)
def test_errors_name_field_and_reason(text: str, fragment: str) -> None:
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "f.yaml")
    assert fragment in str(err.value)
    assert str(err.value).startswith("f.yaml")


def test_external_endpoints_model_is_not_managed() -> None:
    fleet = parse_fleet("models:\n - name: ext\n   endpoints: [http://10.0.0.1:8000]\n")
    assert not fleet.models[0].managed


def test_lora_adapters_resolve_to_their_base_model() -> None:
    fleet = parse_fleet(
        "models:\n - name: base\n   source: {path: /m}\n   engine: {lora_modules: {sql: /a}}\n"
    )
    assert fleet.names()["sql"].name == "base"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match="cannot read"):
        load_fleet(tmp_path / "nope.yaml")
