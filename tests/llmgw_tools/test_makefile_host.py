"""The quick start respects the host (issue 45): the Makefile installs OS packages only through
llmgw_tools/host/install-os-packages.sh, never runs apt-get, systemctl or sudo itself, and the script installs
only what is missing, says what and why before it does, uses sudo only when not root, and stops only the
services of packages it has just installed. The script runs here against stand-ins for apt-get, sudo,
systemctl, dpkg-query and id that only log their calls: nothing is installed and no service is touched."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "llmgw_tools" / "host" / "install-os-packages.sh"
HOST_COMMANDS = re.compile(
    r"(?<![\w./-])(apt-get|apt|systemctl|sudo|service|invoke-rc\.d|update-rc\.d|dpkg)(?![\w./-])"
)


def recipe_lines(makefile: str) -> list[str]:
    """The Makefile's recipe lines (tab-indented) with comments and echoed strings left out."""
    lines = [line for line in makefile.splitlines() if line.startswith("\t")]
    return [re.sub(r'echo "[^"]*"', "", line) for line in lines]


def test_makefile_runs_no_host_command_itself() -> None:
    offending = [line for line in recipe_lines((REPO / "Makefile").read_text()) if HOST_COMMANDS.search(line)]
    assert offending == []


def test_every_os_install_goes_through_the_helper() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "OS_INSTALL := llmgw_tools/host/install-os-packages.sh" in makefile
    for stamp in ("$(STAMPS)/os:", "$(STAMPS)/alertmanager:", "$(STAMPS)/podman:"):
        rule = makefile.split(stamp, 1)[1].split("\n\n", 1)[0]
        assert "$(OS_INSTALL)" in rule and "--why" in rule, stamp


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_dry_run_prints_no_host_command(tmp_path: Path) -> None:
    """`make -n` of every target that installs (stamps forced stale) prints no apt-get, systemctl or sudo
    outside the helper."""
    out = subprocess.run(
        ["make", "-n", "-B", f"STAMPS={tmp_path}", "install", "images-short", "test", "run"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "llmgw_tools/host/install-os-packages.sh" in out
    outside = [line for line in out.splitlines() if HOST_COMMANDS.search(re.sub(r'"[^"]*"', "", line))]
    assert outside == []


STUB = """#!/bin/bash
echo "{name} $*" >> "$CALLS"
{body}
"""


def stand_ins(tmp: Path, uid: int, installed: set[str], with_sudo: bool = True) -> dict[str, str]:
    """A PATH whose apt-get, sudo, systemctl, service, dpkg-query and id log to $CALLS and change nothing."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    bodies = {
        "apt-get": "exit 0",
        "systemctl": "exit 0",
        "service": "exit 0",
        "id": f"echo {uid}",
        "dpkg-query": 'case " $INSTALLED " in *" ${@: -1} "*) printf "install ok installed";; '
        "*) exit 1;; esac",
    }
    if with_sudo:
        bodies["sudo"] = 'exec "$@"'
    for name, body in bodies.items():
        stub = bin_dir / name
        stub.write_text(STUB.format(name=name, body=body))
        stub.chmod(0o755)
    systemd = tmp / "systemd"
    systemd.mkdir()
    for tool in ("bash", "env", "tail", "cat", "printf"):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return {
        "PATH": str(bin_dir),
        "CALLS": str(tmp / "calls"),
        "INSTALLED": " ".join(sorted(installed)),
        "LLMGW_SYSTEMD_RUN": str(systemd),
        "HOME": os.environ.get("HOME", "/tmp"),
    }


def run_script(
    tmp: Path, env: dict[str, str], *args: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    result = subprocess.run(
        ["bash", str(SCRIPT), "--record", str(tmp / "record"), *args],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    calls = Path(env["CALLS"]).read_text().splitlines() if Path(env["CALLS"]).exists() else []
    return result, [c for c in calls if not c.startswith(("id ", "dpkg-query "))]


SERVICES = ("--services", "redis-server nginx prometheus", "--why", "the stack runs its own")


def test_normal_user_sudo_installs_only_the_missing_and_stops_only_those(tmp_path: Path) -> None:
    env = stand_ins(tmp_path, uid=1000, installed={"nginx"})
    result, calls = run_script(tmp_path, env, *SERVICES, "redis-server", "nginx", "prometheus")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "==> the stack runs its own"
    assert (
        lines[1]
        == "==> installing OS packages with sudo (it may ask for your password): redis-server prometheus"
    )
    assert calls[:3] == [
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        "apt-get update -qq",
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends"
        " redis-server prometheus",
    ]
    assert [c for c in calls if "systemctl" in c] == [
        "sudo systemctl disable --now redis-server",
        "systemctl disable --now redis-server",
        "sudo systemctl disable --now prometheus",
        "systemctl disable --now prometheus",
    ]
    assert not any("nginx" in c for c in calls)  # the host's nginx: never touched
    assert (tmp_path / "record").read_text().split() == ["redis-server", "prometheus"]


def test_root_needs_no_sudo(tmp_path: Path) -> None:
    env = stand_ins(tmp_path, uid=0, installed=set())
    result, calls = run_script(tmp_path, env, "--why", "alerts", "--services", "prometheus-alertmanager",
                               "prometheus-alertmanager")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "as root" in result.stdout
    assert not any(c.startswith("sudo") for c in calls)
    assert "systemctl disable --now prometheus-alertmanager" in calls


def test_nothing_missing_runs_nothing(tmp_path: Path) -> None:
    env = stand_ins(tmp_path, uid=1000, installed={"redis-server", "nginx", "prometheus"})
    result, calls = run_script(tmp_path, env, *SERVICES, "redis-server", "nginx", "prometheus")
    assert (result.returncode, result.stdout, calls) == (0, "", [])


def test_no_sudo_prints_the_command_and_installs_nothing(tmp_path: Path) -> None:
    env = stand_ins(tmp_path, uid=1000, installed=set(), with_sudo=False)
    result, calls = run_script(tmp_path, env, *SERVICES, "redis-server")
    assert result.returncode == 1
    assert "apt-get install --no-install-recommends redis-server" in result.stderr
    assert calls == []


def test_services_not_named_are_not_stopped(tmp_path: Path) -> None:
    """Packages installed without --services (podman and friends) get no systemctl call."""
    env = stand_ins(tmp_path, uid=0, installed=set())
    log = tmp_path / "apt.log"
    result, calls = run_script(tmp_path, env, "--log", str(log), "--why", "containers", "podman", "buildah")
    assert result.returncode == 0, result.stderr
    assert not any("systemctl" in c or "service" in c for c in calls)
