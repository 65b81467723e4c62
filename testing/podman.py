"""Containers for the deployment tests, run with podman through the project's settings
(deploy/podman/containers.conf, read through CONTAINERS_CONF, as the Makefile does). Every container a
test starts carries the label ``llmgw.test=<run id>`` so that one call removes all of them."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from testing.poll import wait_until
from testing.procs import REPO

CONTAINERS_CONF = REPO / "deploy" / "podman" / "containers.conf"
NO_PODMAN = (
    "podman is not installed and could not be installed here (`make images` installs Debian's podman "
    "through apt): the container tests skip"
)


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman_available() -> bool:
    return shutil.which("podman") is not None


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    """Run one podman command; its stdout, or an AssertionError with its stderr."""
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, env=podman_env(), timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def require_image(image: str) -> None:
    if not image_exists(image):
        raise AssertionError(f"image {image} is missing: run `make images` (or `make images-short`)")


def image_exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], env=podman_env(), check=False).returncode == 0


@dataclass
class Containers:
    """The containers of one test run: started on the host network (loopback only), removed together."""

    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def name(self, role: str) -> str:
        return f"llmgw-test-{self.run_id}-{role}"

    def run(self, role: str, image: str, *argv: str, options: tuple[str, ...] = ()) -> str:
        """Start a detached container named for ``role``; returns its name."""
        name = self.name(role)
        podman(
            "run", "-d", "--name", name, "--label", f"llmgw.test={self.run_id}", "--network", "host",
            *options, image, *argv,
        )  # fmt: skip
        return name

    def inspect(self, role: str) -> dict[str, Any]:
        data = json.loads(podman("inspect", self.name(role)))
        return dict(data[0])

    def pid(self, role: str) -> int:
        return int(self.inspect(role)["State"]["Pid"])

    def logs(self, role: str) -> str:
        done = subprocess.run(
            ["podman", "logs", "--tail", "30", self.name(role)], capture_output=True, text=True,
            env=podman_env(), check=False,
        )  # fmt: skip
        return done.stdout + done.stderr

    def crash(self, role: str) -> int:
        """SIGKILL the container's main process from the host, as a crash would (not `podman kill`, which is
        a stop by hand); returns the restart count before, for :meth:`wait_restarted`."""
        before = int(self.inspect(role)["RestartCount"])
        os.kill(self.pid(role), 9)
        return before

    def wait_restarted(self, role: str, before: int, deadline_s: float) -> None:
        def back() -> bool:
            state = self.inspect(role)
            return int(state["RestartCount"]) > before and bool(state["State"]["Running"])

        wait_until(back, deadline_s, f"{role} restarted by its restart policy")

    def stop(self, role: str, timeout_s: int = 20) -> float:
        """`podman stop` (SIGTERM, then SIGKILL after ``timeout_s``); returns the seconds it took."""
        start = time.monotonic()
        podman("stop", "-t", str(timeout_s), self.name(role), timeout=timeout_s + 30)
        return time.monotonic() - start

    def remove_all(self) -> None:
        ids = podman("ps", "-aq", "--filter", f"label=llmgw.test={self.run_id}", check=False).split()
        if ids:
            podman("rm", "-f", "-t", "2", *ids, check=False, timeout=120)


def free_subnet() -> str:
    """A /24 under 10.0.0.0/8 that no host route, address or podman network uses, for a test's own network."""
    taken = subprocess.run(["ip", "-4", "-o", "route"], capture_output=True, text=True, check=False).stdout
    taken += podman("network", "ls", "--format", "{{range .Subnets}}{{.Subnet}} {{end}}", check=False)
    for _ in range(200):
        prefix = f"10.{random.randrange(100, 250)}.{random.randrange(0, 256)}."
        if prefix not in taken:
            return f"{prefix}0/24"
    raise RuntimeError("no free 10.x.y.0/24 for a test network")


@dataclass
class PodmanNetwork:
    """A podman network with its own subnet, made for one test run and removed after it."""

    name: str
    subnet: str

    @classmethod
    def create(cls, name: str) -> PodmanNetwork:
        subnet = free_subnet()
        podman("network", "create", "--subnet", subnet, name)
        return cls(name, subnet)

    def remove(self) -> None:
        podman("network", "rm", "-f", self.name, check=False)
