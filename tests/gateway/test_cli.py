"""``llmgw-gateway``'s start-up checks: an open proxy is never started by accident."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gateway.cli import open_bind_refusal
from gateway.settings import GatewaySettings
from testing.gateway import fleet_yaml
from testing.procs import REPO


def start(tmp_path: Path, host: str, **env: str) -> subprocess.CompletedProcess[str]:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_yaml([{"name": "m", "source": {"path": "/m"}}]))
    argv = [sys.executable, "-m", "gateway.cli", "--fleet", str(fleet), "--host", host, "--port", "1"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LLMGW_")} | env
    return subprocess.run(argv, cwd=REPO, env=environ, capture_output=True, text=True, timeout=30)


def test_a_non_loopback_bind_with_auth_off_is_refused(tmp_path: Path) -> None:
    """Defect 8: ``--host 0.0.0.0`` with keys off started silently, an open proxy."""
    result = start(tmp_path, "0.0.0.0")
    assert result.returncode == 2, result.stderr
    assert "LLMGW_ALLOW_OPEN=true" in result.stderr and "LLMGW_AUTH=true" in result.stderr


def test_loopback_auth_on_or_allow_open_may_serve(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_yaml([{"name": "m", "source": {"path": "/m"}}]))
    off = GatewaySettings(fleet_file=fleet)
    assert open_bind_refusal("127.0.0.1", off) is None and open_bind_refusal("::1", off) is None
    assert open_bind_refusal("localhost", off) is None
    assert open_bind_refusal("10.0.0.5", off) is not None and open_bind_refusal("gw.example", off) is not None
    assert open_bind_refusal("0.0.0.0", GatewaySettings(fleet_file=fleet, auth=True)) is None
    assert open_bind_refusal("0.0.0.0", GatewaySettings(fleet_file=fleet, allow_open=True)) is None
