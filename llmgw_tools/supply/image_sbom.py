"""A container image's SBOM (``make sbom``, for each project image built here): what is installed, read
inside the image (``podman run --rm``: every Python distribution's metadata, as ``importlib.metadata`` finds
it on the image's ``sys.path``, and the Debian packages ``dpkg-query`` lists where the base has dpkg), then
written by :func:`llmgw_tools.supply.sbom.sbom`, the environment's writer, from those metadata files."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from llmgw_tools.supply.sbom import OsPackage, sbom

PROBE = r"""
import importlib.metadata, json, shutil, subprocess
dists = [d.read_text("METADATA") or d.read_text("PKG-INFO") or "" for d in importlib.metadata.distributions()]
debs = []
if shutil.which("dpkg-query"):
    fmt = "${Package}\t${Version}\t${Architecture}\t${db:Status-Abbrev}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True).stdout
    debs = [line.split("\t")[:3] for line in out.splitlines() if line.endswith("\tii ")]
print(json.dumps({"dists": dists, "debs": debs}))
"""
"""Runs with the image's own Python (its entry point replaced): no project code needed inside."""


class DumpedDistribution(importlib.metadata.Distribution):
    """A distribution known by its metadata file's text only (read inside an image)."""

    def __init__(self, metadata_text: str) -> None:
        self.text = metadata_text

    def read_text(self, filename: str) -> str | None:
        return self.text if filename in ("METADATA", "PKG-INFO") else None

    def locate_file(self, path: str | os.PathLike[str]) -> Path:
        return Path("/nonexistent") / path  # nothing of it is on this machine


def from_probe(found: dict[str, Any]) -> tuple[dict[str, importlib.metadata.Distribution], list[OsPackage]]:
    """The probe's answer as ``installed()`` gives an environment's (the first of a name on the image's
    ``sys.path`` wins), and its Debian packages."""
    dists: dict[str, importlib.metadata.Distribution] = {}
    for text in found["dists"]:
        dist = DumpedDistribution(text)
        if name := dist.metadata["Name"]:
            dists.setdefault(canonicalize_name(name), dist)
    return dists, [OsPackage(*fields) for fields in found["debs"]]


def probe(image: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run :data:`PROBE` in ``image`` (no network, removed after; podman's environment ``env``, default
    this process's) and return its answer."""
    argv = ["podman", "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", PROBE]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120, env=env).stdout
    answer: dict[str, Any] = json.loads(out)
    return answer


def image_sbom(image: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The CycloneDX SBOM of ``image``: its Python distributions and Debian packages."""
    dists, debs = from_probe(probe(image, env))
    return sbom(dists, os_packages=debs, image=image)
