"""The project's images are built from the lock on a pinned base: every FROM in deploy/docker names its
image by digest, and every ``pip install`` there installs either hashed requirements (``--require-hashes
--no-deps``) from a file that `make lock` writes, whose pins and hashes are the lock's, or the project itself
(``--no-deps``, not editable), or torch's CPU build by exact version (the one package the lock leaves out).
Static: no podman needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.version import Version

from tests.test_lock import LOCK, read_lock

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "deploy" / "docker"
DOCKERFILES = sorted(p for p in DOCKER.glob("Dockerfile.*") if p.suffix != ".dockerignore")
DIGEST = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+?)@sha256:[0-9a-f]{64}(\s+AS\s+\S+)?\s*$", re.I)
PROJECT = "pip install --no-deps --no-build-isolation ."
TORCH = 'pip install --extra-index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"'


def instructions(path: Path) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    return [i.strip() for i in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines() if i.strip()]


def pip_installs(path: Path) -> list[str]:
    """Each ``pip install ...`` command of the Dockerfile's RUN instructions."""
    found = []
    for instruction in instructions(path):
        if instruction.upper().startswith("RUN "):
            for command in re.split(r"&&|;|\|\|", instruction[4:]):
                command = " ".join(command.split())
                if command.startswith(("pip install", "python -m pip install")):
                    found.append(command)
    return found


def lock_writes() -> set[str]:
    """The requirement files `make lock` writes (its ``-o`` outputs)."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^lock:.*?\n((?:\t.*\n|  .*\n)+)", makefile, re.M)
    assert recipe is not None
    return set(re.findall(r"-o (requirements/\S+\.txt)", recipe.group(1)))


def test_there_are_the_three_dockerfiles() -> None:
    assert [p.name for p in DOCKERFILES] == ["Dockerfile.gateway", "Dockerfile.scaler", "Dockerfile.vllm-cpu"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_every_from_is_pinned_by_digest(path: Path) -> None:
    froms = [i for i in instructions(path) if i.upper().startswith("FROM ")]
    assert froms and all(DIGEST.match(f) for f in froms), froms


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_every_pip_install_is_hashed_from_the_lock(path: Path) -> None:
    written = lock_writes()
    hashed = 0
    for command in pip_installs(path):
        if command in (PROJECT, TORCH):
            continue
        assert "--require-hashes" in command and "--no-deps" in command, command
        files = re.findall(r"-r (\S+)", command)
        assert files and set(files) <= written - {"requirements/lock.txt"}, command
        hashed += 1
    assert hashed == 1 and PROJECT in pip_installs(path)
    assert TORCH not in pip_installs(path) or path.name == "Dockerfile.vllm-cpu"


def test_the_image_requirements_are_the_locks_pins_and_hashes() -> None:
    lock = read_lock(LOCK.read_text())
    images = sorted(lock_writes() - {"requirements/lock.txt"})
    assert images == [
        "requirements/image-build.txt", "requirements/image-gateway.txt",
        "requirements/image-scaler.txt", "requirements/image-vllm-cpu.txt",
    ]  # fmt: skip
    for name in images:
        entries = read_lock((REPO / name).read_text())
        assert entries, name
        for package, (version, hashes) in entries.items():
            assert package in lock and lock[package][0] == version, f"{name}: {package}=={version}"
            assert hashes and set(hashes) <= set(lock[package][1]), f"{name}: {package} hashes"


def test_the_gateway_image_has_none_of_the_extras() -> None:
    """The gateway image's packages: the runtime dependencies alone (tracing, workers, scaler are extras)."""
    gateway = set(read_lock((REPO / "requirements" / "image-gateway.txt").read_text()))
    extras = {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-grpc", "grpcio", "protobuf"}
    extras |= {"pyzmq", "msgspec", "tokenizers", "jinja2"}
    assert "fastapi" in gateway and not gateway & extras
    assert not [p for p in gateway if p.startswith("opentelemetry")]


def test_read_lock_and_the_pattern_see_what_they_should() -> None:
    assert DIGEST.match("FROM python:3.11-slim@sha256:" + "a" * 64)
    assert not DIGEST.match("FROM python:3.11-slim")
    assert Version("1.0") == read_lock("a==1.0 \\\n    --hash=sha256:" + "b" * 64 + "\n")["a"][0]
