"""The committed gRPC stubs are what grpcio-tools (the dev extra's version) generates from the committed
``externalscaler.proto``: regenerated into a scratch folder and compared byte for byte."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from testing.procs import REPO

PROTO = Path("workers/scale/proto/externalscaler.proto")
GENERATED = ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py")


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    (tmp_path / PROTO.parent).mkdir(parents=True)
    shutil.copy(REPO / PROTO, tmp_path / PROTO)
    argv = [sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--pyi_out=.",
            "--grpc_python_out=.", str(PROTO)]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in GENERATED:
        fresh = (tmp_path / PROTO.parent / name).read_text()
        assert fresh == (REPO / PROTO.parent / name).read_text(), (
            f"{name} is stale: regenerate (see the proto)"
        )
