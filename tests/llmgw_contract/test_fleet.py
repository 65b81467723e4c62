"""Fleet file validation: errors name the field path and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw_contract.fleet import FleetError, load_fleet, parse_fleet
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
        ("models:\n - name: a\n   endpoints: [{url: ftp://x, auth: none}]\n", "models.0.endpoints.0.url"),
        (
            "models:\n - name: a\n   endpoints: [http://10.0.0.1:8000]\n",
            "endpoint http://10.0.0.1:8000 has no credential setting",
        ),
        (
            "models:\n - name: a\n   endpoints: [{url: 'http://x'}]\n",
            "needs its own credential: api_key_env or api_key_file, or auth: none",
        ),
        (
            "models:\n - name: a\n   endpoints: [{url: 'http://x', api_key: sk-123}]\n",
            "models.0.endpoints.0.api_key: Extra inputs",  # never the key itself
        ),
        (
            "models:\n - name: a\n   endpoints: [{url: 'http://x', api_key_env: K, auth: none}]\n",
            "auth: none takes no key",
        ),
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
    fleet = parse_fleet(
        "models:\n - name: ext\n   endpoints:\n"
        "    - {url: 'http://10.0.0.1:8000', api_key_env: EXT_KEY}\n"
        "    - {url: 'http://10.0.0.2:8000', api_key_file: /run/secrets/ext}\n"
        "    - {url: 'http://10.0.0.3:8000', auth: none}\n"
    )
    assert not fleet.models[0].managed
    assert [e.url for e in fleet.models[0].endpoints] == [f"http://10.0.0.{i}:8000" for i in (1, 2, 3)]


def test_lora_adapters_resolve_to_their_base_model() -> None:
    fleet = parse_fleet(
        "models:\n - name: base\n   source: {path: /m}\n   engine: {lora_modules: {sql: /a}}\n"
    )
    assert fleet.names()["sql"].name == "base"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match="cannot read"):
        load_fleet(tmp_path / "nope.yaml")
