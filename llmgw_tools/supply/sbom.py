"""A CycloneDX 1.5 JSON SBOM of the installed environment: the project as the described component, every
other installed distribution as a library component (package URL ``pkg:pypi/<name>@<version>``, its license
as llmgw_tools.supply.licenses reads it, and the property ``llmgw:runtime`` saying whether the runtime set
holds it), and the dependency graph the installed metadata gives (markers evaluated for this interpreter).

The same writer describes a container image (:mod:`llmgw_tools.supply.image_sbom`): its Python distributions,
read inside the image, and its Debian packages (``pkg:deb/debian/<name>@<version>?arch=<arch>``), with the
image's name as the metadata property ``llmgw:image``."""

from __future__ import annotations

import importlib.metadata
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from llmgw_tools.supply.inventory import PROJECT, Component, installed, inventory
from llmgw_tools.supply.licenses import SPDX_BY_NAME, License

SPEC_VERSION = "1.5"
SPDX_IDS = frozenset(SPDX_BY_NAME.values())


def purl(name: str, version: str) -> str:
    """The package URL of a PyPI distribution (canonical name, as the purl spec asks)."""
    return f"pkg:pypi/{canonicalize_name(name)}@{version}"


def licenses(license: License) -> list[dict[str, Any]]:
    """CycloneDX ``licenses``: an SPDX id this module knows, else an SPDX expression, else the free text."""
    if license.spdx in SPDX_IDS:
        return [{"license": {"id": license.spdx}}]
    if license.spdx is not None:
        return [{"expression": license.spdx}]
    return [{"license": {"name": license.text}}]


def component(c: Component) -> dict[str, Any]:
    ref = purl(c.name, c.version)
    return {
        "type": "library",
        "bom-ref": ref,
        "name": c.name,
        "version": c.version,
        "purl": ref,
        "licenses": licenses(c.license),
        "properties": [{"name": "llmgw:runtime", "value": str(c.runtime).lower()}],
    }


@dataclass(frozen=True)
class OsPackage:
    """A Debian package installed in an image (``dpkg-query``'s name, version and architecture)."""

    name: str
    version: str
    arch: str


def os_component(p: OsPackage) -> dict[str, Any]:
    ref = f"pkg:deb/debian/{p.name}@{quote(p.version, safe='.-_~')}?arch={p.arch}"
    return {"type": "library", "bom-ref": ref, "name": p.name, "version": p.version, "purl": ref}


def depends_on(dist: importlib.metadata.Distribution, refs: dict[str, str]) -> list[str]:
    """The refs of the installed distributions ``dist`` requires here (no extras: its base requirements)."""
    found = set()
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if (name := canonicalize_name(req.name)) in refs:
            found.add(refs[name])
    return sorted(found)


def sbom(
    dists: dict[str, importlib.metadata.Distribution] | None = None,
    now: datetime | None = None,
    serial: uuid.UUID | None = None,
    os_packages: list[OsPackage] | None = None,
    image: str | None = None,
) -> dict[str, Any]:
    """The SBOM of ``dists`` (default: ``installed()``) as a JSON-ready dict; ``now`` and ``serial`` given by
    tests, else the time and a random UUID; for an image, its Debian packages and its name as well."""
    dists = dists if dists is not None else installed()
    components = inventory(dists)
    refs = {c.name: purl(c.name, c.version) for c in components}
    version = dists[PROJECT].version if PROJECT in dists else "0"
    refs[PROJECT] = purl(PROJECT, version)
    doc: dict[str, Any] = {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": (serial or uuid.uuid4()).urn,
        "version": 1,
        "metadata": {
            "timestamp": (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "llmgw_tools.supply.sbom"}]},
            "component": {
                "type": "application",
                "bom-ref": refs[PROJECT],
                "name": PROJECT,
                "version": version,
                "purl": refs[PROJECT],
                "licenses": [{"license": {"id": "Apache-2.0"}}],
            },
        },
        "components": [component(c) for c in components] + [os_component(p) for p in os_packages or []],
        "dependencies": [
            {"ref": refs[name], "dependsOn": depends_on(dist, refs)} for name, dist in sorted(dists.items())
        ],
    }
    if image is not None:
        doc["metadata"]["properties"] = [{"name": "llmgw:image", "value": image}]
    return doc
