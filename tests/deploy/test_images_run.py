"""The short form of the container runs (`make test`): the gateway image and the Redis stand-in, built
by `make images-short`, run with podman on the host network (loopback), with the FAKE ENGINE (a host
process) as the one replica and the image's registration sidecar publishing it. One request through the
gateway container with the openai SDK, the image's security settings as run, a crash of the gateway
container that its restart policy repairs, and the time SIGTERM takes to stop it. Skips, saying why,
only where podman is not installed (the Makefile installs it through apt). The image's SBOM (`make sbom`,
read inside it) names the locked fastapi and none of the extras' packages."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from llmgw_contract.extras import EXTRAS
from llmgw_tools.supply.image_sbom import image_sbom
from testing.podman import NO_PODMAN, Containers, podman_available, podman_env, require_image
from testing.poll import wait_until
from testing.procs import Proc, free_port, http_ok, start_fake_engine
from tests.test_dependencies import requirements
from tests.test_lock import LOCK, read_lock

pytestmark = pytest.mark.skipif(not podman_available(), reason=NO_PODMAN)

GATEWAY_IMAGE = "localhost/llmgw-gateway:local"
REDIS_IMAGE = "localhost/llmgw-standin-redis:7.4"
MODEL = "fake-chat"


@dataclass
class Stack:
    containers: Containers
    engine: Proc
    gateway_url: str


def start_stack(tmp: Path, boxes: Containers) -> Stack:
    password = secrets.token_hex(16)
    redis_port, gateway_port, metrics_port = free_port(), free_port(), free_port()
    redis_url = f"redis://:{password}@127.0.0.1:{redis_port}/0"
    boxes.run(
        "redis", REDIS_IMAGE, "redis-server", "--bind", "127.0.0.1", "--port", str(redis_port),
        "--save", "", "--appendonly", "no", "--requirepass", password, options=("--read-only",),
    )  # fmt: skip
    engine = start_fake_engine(tmp, "--model", MODEL, "--tokens", "5")
    record = {"id": f"{MODEL}-0", "model": MODEL, "url": engine.url, "concurrency": 4, "device": "cpu"}
    boxes.run(
        "register", GATEWAY_IMAGE, "python", "-m", "llmgw_contract.sidecar", "--record", json.dumps(record),
        "--redis-url", redis_url, "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port),
        options=("--read-only",),
    )  # fmt: skip
    fleet = tmp / "fleet.yaml"
    fleet.write_text(f"models:\n  - name: {MODEL}\n    source: {{path: /nonexistent}}\n")
    fleet.chmod(0o644)
    boxes.run(
        "gateway", GATEWAY_IMAGE, "llmgw-gateway", "--host", "127.0.0.1", "--port", str(gateway_port),
        options=(
            "--read-only", "--tmpfs", "/tmp", "--restart", "always",
            "-v", f"{fleet}:/etc/llmgw/fleet.yaml:ro", "-e", "LLMGW_FLEET_FILE=/etc/llmgw/fleet.yaml",
            "-e", f"LLMGW_REDIS_URL={redis_url}",
        ),
    )  # fmt: skip
    url = f"http://127.0.0.1:{gateway_port}"
    try:
        wait_until(lambda: http_ok(f"{url}/ready"), 60, "the gateway container ready (a replica routable)")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{boxes.logs('gateway')}\n{boxes.logs('register')}") from exc
    return Stack(boxes, engine, url)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_image(GATEWAY_IMAGE)
    require_image(REDIS_IMAGE)
    boxes = Containers()
    engine: Proc | None = None
    try:
        built = start_stack(tmp_path_factory.mktemp("images"), boxes)
        engine = built.engine
        yield built
    finally:
        boxes.remove_all()
        if engine is not None:
            engine.stop()


def chat(url: str) -> str:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=20)
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    return answer.choices[0].message.content or ""


def test_request_answered_through_the_gateway_container(stack: Stack) -> None:
    assert chat(stack.gateway_url)


def test_gateway_runs_read_only_as_its_own_user(stack: Stack) -> None:
    info = stack.containers.inspect("gateway")
    assert info["Config"]["User"] == "10001:10001"
    assert info["HostConfig"]["ReadonlyRootfs"] is True


def test_crashed_gateway_is_restarted_and_answers(stack: Stack) -> None:
    before = stack.containers.crash("gateway")
    stack.containers.wait_restarted("gateway", before, 30)
    wait_until(lambda: http_ok(f"{stack.gateway_url}/ready"), 60, "the restarted gateway ready")
    assert chat(stack.gateway_url)


def test_sigterm_stops_the_gateway_within_its_grace(stack: Stack) -> None:
    seconds = stack.containers.stop("gateway", timeout_s=20)
    info = stack.containers.inspect("gateway")
    print(f"gateway container stopped on SIGTERM in {seconds:.1f} s, exit code {info['State']['ExitCode']}")
    assert info["State"]["ExitCode"] == 0, stack.containers.logs("gateway")
    assert seconds < 20


def test_the_gateway_images_sbom_has_the_locked_fastapi_and_none_of_the_extras() -> None:
    require_image(GATEWAY_IMAGE)
    doc = image_sbom(GATEWAY_IMAGE, podman_env())
    python = {c["name"]: c["version"] for c in doc["components"] if c["purl"].startswith("pkg:pypi/")}
    assert python["fastapi"] == str(read_lock(LOCK.read_text())["fastapi"][0])
    extras = {name for extra in EXTRAS for name in requirements(extra)}
    assert not extras & set(python) and not [n for n in python if n.startswith("opentelemetry")]
    assert any(c["purl"].startswith("pkg:deb/debian/openssl@") for c in doc["components"])
