"""The declared dependencies hold: every third-party module the packages import (at module level or inside
a function) comes from a distribution pyproject.toml declares (the runtime dependencies or the tracing,
workers and scaler extras, which llmgw_contract/extras.py checks by the same modules), and each floor the
code is known to need is the declared lower bound or below it."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "workers", "llmgw_contract", "llmgw_tools")
FIRST_PARTY = {*PACKAGES, "testing", "bench", "docsgen", "tests"}
VLLM_PROVIDED = {"torch", "transformers", "gguf"}
"""Imported only inside llmgw_tools/models/convert.py's functions (the model preparation): vLLM's CPU build,
which the Makefile installs beside the project, brings torch and transformers; the Makefile installs gguf."""


def project_table() -> dict[str, object]:
    table: dict[str, object] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return table


def requirements(group: str | None = None) -> dict[str, Requirement]:
    """The runtime dependencies (``group=None``) or one optional extra's, by canonical name."""
    table = project_table()
    if group is None:
        listed = table["dependencies"]
    else:
        extras = table["optional-dependencies"]
        assert isinstance(extras, dict)
        listed = extras[group]
    assert isinstance(listed, list)
    reqs = [Requirement(text) for text in listed]
    return {canonicalize_name(r.name): r for r in reqs}


RUNTIME_EXTRAS = ("tracing", "workers", "scaler")


def runtime_requirements() -> dict[str, Requirement]:
    """The runtime dependencies and the runtime extras' (llmgw_contract/extras.py), by canonical name."""
    found = requirements()
    for extra in RUNTIME_EXTRAS:
        found |= requirements(extra)
    return found


def floor(req: Requirement) -> Version | None:
    """The lower bound of a requirement (``>=`` or ``==``), None if it has none."""
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def third_party_imports() -> dict[str, list[str]]:
    """Top-level module name -> the files of the packages that import it (absolute imports only)."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for top in {name.split(".")[0] for name in names}:
                    if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                        found.setdefault(top, []).append(str(path.relative_to(REPO)))
    return found


@pytest.fixture(scope="module")
def imports() -> dict[str, list[str]]:
    return third_party_imports()


def top_level_modules(distribution: str) -> set[str]:
    """The top-level modules an installed distribution provides, from its RECORD (``google`` for protobuf,
    ``yaml`` and ``_yaml`` for PyYAML); read for the declared distributions only, which is fast."""
    files = importlib.metadata.distribution(distribution).files or []
    tops = {f.parts[0] for f in files if len(f.parts) > 1 or f.suffix in (".py", ".so")}
    return {t.split(".")[0] for t in tops if not t.endswith((".dist-info", ".data")) and t != ".."}


def undeclared(imports: dict[str, list[str]], declared: set[str]) -> dict[str, list[str]]:
    """The imported modules no declared distribution provides (torch, transformers, gguf excepted)."""
    provided = set().union(*(top_level_modules(name) for name in declared))
    return {m: files for m, files in imports.items() if m not in provided and m not in VLLM_PROVIDED}


def test_every_third_party_import_is_a_declared_dependency(imports: dict[str, list[str]]) -> None:
    assert undeclared(imports, set(runtime_requirements())) == {}


def test_each_runtime_extra_provides_the_modules_its_start_up_check_names() -> None:
    """llmgw_contract/extras.py refuses a feature whose extra's modules are missing: they are the extra's."""
    from llmgw_contract.extras import EXTRAS

    assert set(EXTRAS) == set(RUNTIME_EXTRAS)
    for extra, modules in EXTRAS.items():
        provided = set().union(*(top_level_modules(name) for name in requirements(extra)))
        assert {m.split(".")[0] for m in modules} <= provided, extra


def test_the_check_sees_an_import_nobody_declared(imports: dict[str, list[str]]) -> None:
    without_starlette = set(runtime_requirements()) - {"starlette"}
    assert set(undeclared(imports, without_starlette)) == {"starlette"}
    assert top_level_modules("protobuf") == {"google"}


def test_undeclared_vllm_modules_are_imported_lazily_by_model_preparation_only(
    imports: dict[str, list[str]],
) -> None:
    """torch, transformers and gguf stay out of every import path but ``llmgw-prepare``'s conversion."""
    for module, files in imports.items():
        if module in VLLM_PROVIDED:
            assert set(files) == {"llmgw_tools/models/convert.py"}, module
    tree = ast.parse((REPO / "llmgw_tools" / "models" / "convert.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not {n.split(".")[0] for n in names} & VLLM_PROVIDED


def test_uvicorn_floor_has_the_protocol_hook_one_write_overrides() -> None:
    """gateway/edge/one_write.py overrides ``HttpToolsProtocol._start_asgi_task`` (uvicorn 0.45.0 and later:
    before, the override would silently never run)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert callable(getattr(HttpToolsProtocol, "_start_asgi_task", None))
    assert floor(requirements()["uvicorn"]) >= Version("0.45.0")  # type: ignore[operator]


def test_redis_floor_has_aclose_and_survives_a_cancelled_waiter() -> None:
    """Every asyncio client is closed with ``aclose()``, which redis-py has from 5.0.1; on 5.0.1 a cancelled
    admission waiter hangs (tests/gateway/admission/test_living_grants.py, run on the lowest versions):
    5.0.2 is the first that passes."""
    import redis.asyncio

    assert callable(getattr(redis.asyncio.Redis, "aclose", None))
    assert floor(requirements()["redis"]) >= Version("5.0.2")  # type: ignore[operator]


def test_pytest_asyncio_floor_reads_the_test_loop_scope_option() -> None:
    """``asyncio_default_test_loop_scope`` in [tool.pytest.ini_options] is read from pytest-asyncio 0.26."""
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "asyncio_default_test_loop_scope" in options
    assert floor(requirements("dev")["pytest-asyncio"]) >= Version("0.26")  # type: ignore[operator]


def test_every_declared_dependency_has_a_floor() -> None:
    unbounded = [name for name, req in runtime_requirements().items() if floor(req) is None]
    assert unbounded == []
