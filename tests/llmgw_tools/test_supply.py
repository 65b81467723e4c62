"""The license inventory and the SBOM (llmgw_tools/supply): licenses read from metadata as the module says,
the policy (no runtime dependency under GPL/AGPL only) on this environment, the committed inventory's runtime
set current, the runtime closure following markers and extras, and the SBOM valid CycloneDX 1.5, an image's
too (from metadata read inside it; the real gateway image's: tests/deploy/test_images_run.py)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import uuid
from datetime import UTC, datetime
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator  # type: ignore[import-untyped]
from packaging.requirements import Requirement
from referencing import Registry, Resource

from llmgw_tools.supply.cli import render, violations
from llmgw_tools.supply.image_sbom import from_probe
from llmgw_tools.supply.inventory import Component, closure, installed, inventory
from llmgw_tools.supply.licenses import License, read_license, strong_copyleft_only
from llmgw_tools.supply.sbom import sbom

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = Path(__file__).resolve().parent / "cyclonedx"


def metadata(**fields: str | list[str]) -> Message:
    msg = Message()
    for key, value in fields.items():
        for v in value if isinstance(value, list) else [value]:
            msg[key.replace("_", "-")] = v
    return msg


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"License_Expression": "MIT OR Apache-2.0", "License": "ignored"},
            License("MIT OR Apache-2.0", "MIT OR Apache-2.0"),
        ),
        ({"License": "Apache 2.0"}, License("Apache-2.0", "Apache-2.0")),
        ({"License": "MIT License\n\nPermission is hereby granted..."}, License("MIT", "MIT")),
        ({"License": "MPL-2.0 AND MIT"}, License("MPL-2.0 AND MIT", "MPL-2.0 AND MIT")),
        ({"Classifier": ["License :: OSI Approved :: BSD License"]}, License("BSD-3-Clause", "BSD-3-Clause")),
        (
            {
                "License": "UNKNOWN",
                "Classifier": ["License :: OSI Approved :: MIT License", "License :: Other"],
            },
            License(None, "MIT License; Other"),
        ),
        ({"License": "Intel End User License Agreement"}, License(None, "Intel End User License Agreement")),
        ({}, License(None, "UNKNOWN")),
    ],
)
def test_license_sources_in_order(fields: dict[str, Any], expected: License) -> None:
    assert read_license(metadata(**fields)) == expected


@pytest.mark.parametrize(
    ("license", "refused"),
    [
        (License("GPL-3.0-only", ""), True),
        (License("AGPL-3.0-or-later", ""), True),
        (License("MIT AND GPL-2.0-or-later", ""), True),
        (License("GPL-3.0-only OR MIT", ""), False),
        (License("LGPL-2.1-only", ""), False),
        (License("MPL-2.0 AND (Apache-2.0 OR MIT)", ""), False),
        (License(None, "GNU General Public License v3"), True),
        (License(None, "GNU Lesser General Public License v2 (LGPLv2)"), False),
        (License(None, "UNKNOWN"), False),
    ],
)
def test_strong_copyleft_only(license: License, refused: bool) -> None:
    assert strong_copyleft_only(license) is refused


@pytest.fixture(scope="module")
def dists() -> dict[str, importlib.metadata.Distribution]:
    return installed()


@pytest.fixture(scope="module")
def components(dists: dict[str, importlib.metadata.Distribution]) -> list[Component]:
    return inventory(dists)


def test_no_runtime_dependency_is_under_gpl_or_agpl_only(components: list[Component]) -> None:
    assert violations(components) == []
    assert {"fastapi", "redis", "uvicorn", "httptools"} <= {c.name for c in components if c.runtime}


def test_the_policy_sees_a_gpl_runtime_dependency() -> None:
    gpl = Component("x", "1", License("GPL-3.0-only", "GPL-3.0-only"), runtime=True)
    tool = Component("y", "1", License("GPL-3.0-only", "GPL-3.0-only"), runtime=False)
    assert violations([gpl, tool]) == ["x (GPL-3.0-only)"]


def test_committed_inventory_lists_this_runtime_set(components: list[Component]) -> None:
    """requirements/licenses.md's runtime table names the runtime set's distributions and licenses (versions
    may differ where this environment is not the lock's); `make licenses` rewrites it."""
    committed = (REPO / "requirements" / "licenses.md").read_text()
    runtime_part = committed.split("## Runtime set")[1].split("## Everything else")[0]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+) \| \S+ \| (.+) \|$", runtime_part, re.M)}
    live = render([c for c in components if c.runtime])
    live_rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+) \| \S+ \| (.+) \|$", live, re.M)}
    live_rows.pop("distribution")
    rows.pop("distribution")
    assert rows == live_rows


def write_dist(site: Path, name: str, requires: list[str]) -> importlib.metadata.Distribution:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    return importlib.metadata.PathDistribution(info)


def test_closure_follows_extras_and_markers(tmp_path: Path) -> None:
    dists = {
        "a": write_dist(tmp_path, "a", ["b", "c; extra == 'more'", "d; python_version < '3'"]),
        "b": write_dist(tmp_path, "b", []),
        "c": write_dist(tmp_path, "c", ["e"]),
        "d": write_dist(tmp_path, "d", []),
        "e": write_dist(tmp_path, "e", []),
        "f": write_dist(tmp_path, "f", []),
    }
    assert closure([Requirement("a")], dists) == {"a", "b"}
    assert closure([Requirement("a[more]"), Requirement("absent")], dists) == {"a", "b", "c", "e"}


def validate(doc: dict[str, Any]) -> None:
    schemas = {p.name: json.loads(p.read_text()) for p in SCHEMAS.glob("*.schema.json")}
    registry: Registry[Any] = Registry().with_resources(
        (f"http://cyclonedx.org/schema/{name}", Resource.from_contents(schema))
        for name, schema in schemas.items()
    )
    Draft7Validator(schemas["bom-1.5.SNAPSHOT.schema.json"], registry=registry).validate(doc)


def test_sbom_is_valid_cyclonedx_1_5(dists: dict[str, importlib.metadata.Distribution]) -> None:
    serial = uuid.UUID(int=1)
    doc = sbom(dists, datetime(2026, 12, 5, tzinfo=UTC), serial)
    validate(doc)
    assert doc["serialNumber"] == serial.urn and doc["metadata"]["timestamp"] == "2026-12-05T00:00:00Z"
    refs = [c["bom-ref"] for c in doc["components"]]
    assert len(refs) == len(set(refs)) > 100
    known = {*refs, doc["metadata"]["component"]["bom-ref"]}
    assert all(set(d["dependsOn"]) <= known and d["ref"] in known for d in doc["dependencies"])
    fastapi = next(c for c in doc["components"] if c["name"] == "fastapi")
    assert fastapi["purl"] == f"pkg:pypi/fastapi@{fastapi['version']}"
    assert fastapi["properties"] == [{"name": "llmgw:runtime", "value": "true"}]


def test_an_images_sbom_from_the_metadata_read_inside_it_is_valid_cyclonedx_1_5() -> None:
    """What the probe answers (two distributions of one name: the first on the image's sys.path wins)."""
    fastapi = "Metadata-Version: 2.1\nName: FastAPI\nVersion: 0.136.3\nLicense-Expression: MIT\n"
    fastapi += "Requires-Dist: starlette>=0.40\nRequires-Dist: uvicorn; extra == 'standard'\n"
    starlette = "Metadata-Version: 2.1\nName: starlette\nVersion: 1.10.0\nLicense: BSD-3-Clause\n"
    older = "Metadata-Version: 2.1\nName: starlette\nVersion: 0.1\n"
    found = {"dists": [fastapi, starlette, older], "debs": [["libc6", "2.36-9+deb12u13", "amd64"]]}
    dists, debs = from_probe(found)
    assert {name: d.version for name, d in dists.items()} == {"fastapi": "0.136.3", "starlette": "1.10.0"}
    doc = sbom(dists, os_packages=debs, image="localhost/llmgw-gateway:local")
    validate(doc)
    purls = {c["purl"] for c in doc["components"]}
    libc = "pkg:deb/debian/libc6@2.36-9%2Bdeb12u13?arch=amd64"
    assert purls == {"pkg:pypi/fastapi@0.136.3", "pkg:pypi/starlette@1.10.0", libc}
    assert {"ref": "pkg:pypi/fastapi@0.136.3", "dependsOn": ["pkg:pypi/starlette@1.10.0"]} in doc[
        "dependencies"
    ]
    assert doc["metadata"]["properties"] == [
        {"name": "llmgw:image", "value": "localhost/llmgw-gateway:local"}
    ]
