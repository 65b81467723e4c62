"""What build this is: the project's version (its installed distribution's metadata) and the git commit of
the source tree (``git rev-parse HEAD`` where the code runs from a checkout, else ``unknown``).

Both sides export it as the ``llmgw_build_info{version,commit}`` gauge (:func:`apply_conventions`) and
print it for ``--version`` (:func:`add_version_flag`, on every command-line entry point). Nothing is
computed at import.
"""

from __future__ import annotations

import argparse
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics

UNKNOWN = "unknown"
DISTRIBUTION = "llm-fleet-gateway"
"""The project's distribution name, as pyproject.toml's ``[project] name`` says (a test holds them equal)."""
SOURCE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class BuildInfo:
    version: str
    commit: str

    def line(self, prog: str) -> str:
        """``prog VERSION (commit COMMIT)``: what ``--version`` prints."""
        return f"{prog} {self.version} (commit {self.commit})"


def version() -> str:
    """The installed version of the project's distribution (:data:`DISTRIBUTION`), or ``unknown``."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN


def commit(source: Path = SOURCE) -> str:
    """The commit checked out at ``source`` (git, two seconds at most), or ``unknown`` outside a checkout."""
    if not (source / ".git").exists():
        return UNKNOWN
    try:
        out = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2
        )
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else UNKNOWN


def build_info() -> BuildInfo:
    return BuildInfo(version(), commit())


def apply_conventions(registry: CollectorRegistry, info: BuildInfo | None = None) -> Gauge:
    """The conventions of every registry the project exports: ``llmgw_build_info{version,commit} 1`` on
    ``registry``, and no ``_created`` series (prometheus_client's switch is process-wide; it is turned off
    here, when metrics are built, never at import)."""
    disable_created_metrics()  # type: ignore[no-untyped-call]
    info = info or build_info()
    gauge = Gauge(
        "llmgw_build_info",
        "Always 1; the labels say which build runs: the project's version and its git commit (or unknown).",
        ["version", "commit"],
        registry=registry,
    )
    gauge.labels(info.version, info.commit).set(1)
    return gauge


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """``--version``: prints :meth:`BuildInfo.line` and exits (computed only when asked for)."""
    parser.add_argument("--version", action=_VersionAction, help="print the version and commit, then exit")


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        kwargs.pop("default", None)
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(build_info().line(parser.prog))
        parser.exit()
