"""deploy/nginx/ for real: nginx (the OS package) in front of real gateway processes (`llmgw-gateway`)
in front of the FAKE ENGINE, with real Redis. Streaming, TLS, rate limit, body cap, the request id in
the access log, no second try of a POST that was sent, and a gateway killed while requests flow."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import re
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from llmgw_tools.deploy.common import NGINX_TEMPLATE, REPO
from llmgw_tools.deploy.nginx import tls_lines
from llmgw_tools.stack.render import nginx_conf
from llmgw_tools.stack.stack import tool
from testing.gateway import register as publish_record
from testing.procs import Proc, free_port, http_ok, spawn, start_fake_engine, wait_until

MODEL = "fake-chat"
FLEET = f"models:\n  - name: {MODEL}\n    source: {{path: /nonexistent}}\n    policy: round_robin\n"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@dataclass
class Nginx:
    proc: Proc
    run: Path
    url: str

    @property
    def access_log(self) -> str:
        return (self.run / "nginx-access.log").read_text()


def check_config(conf: Path, run: Path) -> subprocess.CompletedProcess[str]:
    argv = [tool("nginx"), "-t", "-q", "-c", str(conf), "-p", str(run)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=20)


def write_conf(
    run: Path, upstreams: list[str], port: int, rate: str, burst: int, tls: str, trusted: tuple[str, ...] = ()
) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    conf = run / "nginx.conf"
    conf.write_text(
        nginx_conf(NGINX_TEMPLATE, f"127.0.0.1:{port}", upstreams, run, rate, burst, tls, trusted)
    )
    return conf


@contextlib.contextmanager
def nginx(
    run: Path,
    upstreams: list[str],
    rate: str = "500r/s",
    burst: int = 1000,
    tls: str = "",
    trusted: tuple[str, ...] = (),
) -> Iterator[Nginx]:
    port = free_port()
    conf = write_conf(run, upstreams, port, rate, burst, tls, trusted)
    checked = check_config(conf, run)
    assert checked.returncode == 0, checked.stderr
    proc = spawn([tool("nginx"), "-c", str(conf), "-p", str(run), "-g", "daemon off;"], port, run / "out.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_ok(f"{url}/nginx-health"), 10, "nginx")
        yield Nginx(proc, run, url)
    finally:
        proc.stop()


def register(redis_url: str, prefix: str, url: str) -> None:
    """Publish the replica as the supervisor does (on a thread of its own: callers may run a loop)."""
    record = publish_record(redis_url, prefix, MODEL, url, f"{MODEL}-0", concurrency=64, ttl_s=600)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, record).result()


def start_gateways(tmp: Path, redis_url: str, prefix: str, n: int) -> list[Proc]:
    fleet = tmp / "fleet.yaml"
    fleet.write_text(FLEET)
    env = {
        "LLMGW_REDIS_PREFIX": prefix,
        "LLMGW_REGISTRY_POLL_S": "0.2",
        "LLMGW_HEALTH_INTERVAL_S": "0.5",
        "LLMGW_LOG_LEVEL": "WARNING",
    }
    script = str(Path(sys.executable).parent / "llmgw-gateway")
    procs = []
    for i in range(n):
        port = free_port()
        argv = [script, "--fleet", str(fleet), "--redis-url", redis_url, "--port", str(port)]
        procs.append(spawn(argv, port, tmp / f"gateway-{i}.log", {**env, "LLMGW_GATEWAY_ID": f"gw-{i}"}))
    for p in procs:
        wait_until(lambda p=p: http_ok(f"{p.url}/ready"), 30, f"gateway on port {p.port}")  # type: ignore[misc]
    return procs


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = start_fake_engine(tmp_path_factory.mktemp("engine"), "--model", MODEL, "--delay-ms", "80")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory, redis_url: str, engine: Proc) -> Iterator[list[Proc]]:
    prefix = f"ngx{uuid.uuid4().hex[:8]}"
    register(redis_url, prefix, engine.url)
    procs = start_gateways(tmp_path_factory.mktemp("gateways"), redis_url, prefix, 2)
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory, gateways: list[Proc]) -> Iterator[Nginx]:
    with nginx(tmp_path_factory.mktemp("nginx"), [f"127.0.0.1:{g.port}" for g in gateways]) as n:
        yield n


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made with openssl at test time."""
    tmp = tmp_path_factory.mktemp("tls")
    crt, key = tmp / "tls.crt", tmp / "tls.key"
    argv = [
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-keyout", str(key), "-out", str(crt),
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=30)
    return crt, key


def assert_openai_error(body: bytes, code: str) -> None:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code


def test_template_and_committed_container_configs_pass_nginx_t(
    tmp_path: Path, cert: tuple[Path, Path]
) -> None:
    crt, key = cert
    plain = write_conf(tmp_path / "plain", ["127.0.0.1:1", "127.0.0.1:2"], free_port(), "10r/s", 5, "")
    assert check_config(plain, tmp_path / "plain").returncode == 0
    tls = tls_lines(str(free_port()), crt, key)
    with_tls = write_conf(tmp_path / "tls", ["127.0.0.1:1"], free_port(), "10r/s", 5, tls)
    assert check_config(with_tls, tmp_path / "tls").returncode == 0
    # The files compose and Kubernetes mount, with only their host names and paths moved to this machine.
    for committed in (REPO / "deploy/compose/nginx.conf", REPO / "deploy/k8s/nginx/nginx.conf"):
        run = tmp_path / committed.parent.name
        run.mkdir(exist_ok=True)
        text = committed.read_text().replace("/tmp/nginx", str(run))
        text = text.replace("/etc/nginx/tls/tls.crt", str(crt)).replace("/etc/nginx/tls/tls.key", str(key))
        text = re.sub(r"server [a-z0-9.-]+:9000", "server 127.0.0.1:9000", text)
        text = text.replace("listen 8080;", f"listen 127.0.0.1:{free_port()};")
        text = text.replace("listen 8443 ssl;", f"listen 127.0.0.1:{free_port()} ssl;")
        (run / "nginx.conf").write_text(text)
        checked = check_config(run / "nginx.conf", run)
        assert checked.returncode == 0, f"{committed}: {checked.stderr}"


async def event_arrivals(url: str) -> list[float]:
    """Seconds from the request to each SSE event of an 8-token stream (the engine: one per 80 ms)."""
    body = {**CHAT, "stream": True, "max_tokens": 8}
    arrivals: list[float] = []
    async with httpx.AsyncClient(timeout=20) as c:
        start = time.monotonic()
        async with c.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    arrivals.append(time.monotonic() - start)
    return arrivals


def assert_incremental(arrivals: list[float]) -> None:
    assert len(arrivals) == 9  # 8 tokens and [DONE]
    assert arrivals[-1] - arrivals[0] > 0.4, arrivals  # one by one as written, not all at the end
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert sum(g > 0.04 for g in gaps) >= 6, gaps


async def test_sse_chunks_arrive_incrementally_through_nginx_and_gateway(front: Nginx) -> None:
    assert_incremental(await event_arrivals(front.url))


async def test_nginx_itself_does_not_buffer_sse(tmp_path: Path, engine: Proc) -> None:
    # The gateway also sends X-Accel-Buffering: no; the engine does not, so this checks nginx's own
    # configuration (buffering, gzip, cache) on its own.
    with nginx(tmp_path, [f"127.0.0.1:{engine.port}"]) as n:
        assert_incremental(await event_arrivals(n.url))


def test_request_id_goes_upstream_and_into_the_access_log(front: Nginx) -> None:
    rid = f"req-{uuid.uuid4().hex[:12]}"
    r = httpx.post(f"{front.url}/v1/chat/completions", json=CHAT, headers={"x-request-id": rid}, timeout=20)
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == rid  # the gateway got nginx's X-Request-Id and echoed it
    wait_until(lambda: rid in front.access_log, 5, "access log line")
    line = next(ln for ln in front.access_log.splitlines() if rid in ln)
    assert re.search(rf"request_id={rid} upstream=127\.0\.0\.1:\d+ upstream_status=200 ", line), line
    assert re.search(r"upstream_time=\d+\.\d{3} request_time=\d+\.\d{3}$", line), line
    anonymous = httpx.get(f"{front.url}/v1/models", timeout=10)
    assert re.fullmatch(r"[0-9a-f]{32}", anonymous.headers["x-request-id"])  # nginx's own $request_id


def test_body_over_the_cap_is_413_in_openai_shape(front: Nginx) -> None:
    r = httpx.post(
        f"{front.url}/v1/chat/completions",
        content=b"x" * (9 * 1024 * 1024),
        headers={"content-type": "application/json"},
        timeout=20,
    )
    assert r.status_code == 413
    assert_openai_error(r.content, "request_too_large")


def test_metrics_are_not_public(front: Nginx) -> None:
    # nginx reaches this test from 127.0.0.1, which may read them; the rule is checked in the config.
    assert httpx.get(f"{front.url}/metrics", timeout=10).status_code == 200
    assert "deny all;" in NGINX_TEMPLATE.read_text().split("location = /metrics", 1)[1].split("}", 1)[0]


async def test_rate_limit_answers_429_in_openai_shape(tmp_path: Path, gateways: list[Proc]) -> None:
    with nginx(tmp_path, [f"127.0.0.1:{gateways[0].port}"], rate="2r/s", burst=2) as n:
        async with httpx.AsyncClient(timeout=20) as c:
            replies = await asyncio.gather(*(c.get(f"{n.url}/v1/models") for _ in range(12)))
            health = await c.get(f"{n.url}/health")
    limited = [r for r in replies if r.status_code == 429]
    assert len(limited) >= 6 and any(r.status_code == 200 for r in replies)
    assert limited[0].headers["retry-after"] == "1"
    # nginx's own limit: nothing reached a gateway, so the official SDKs may retry, after this long
    assert limited[0].headers["x-should-retry"] == "true"
    assert limited[0].headers["retry-after-ms"] == "1000"
    assert limited[0].headers["content-type"] == "application/json"
    assert_openai_error(limited[0].content, "rate_limit_exceeded")
    assert health.status_code == 200  # health and readiness are outside the limit


async def burst(client: httpx.AsyncClient, url: str, n: int, forwarded_for: list[str]) -> list[int]:
    replies = await asyncio.gather(
        *(
            client.get(url, headers={"x-forwarded-for": forwarded_for[i % len(forwarded_for)]})
            for i in range(n)
        )
    )
    return [r.status_code for r in replies]


async def test_rate_limit_is_per_client_behind_a_trusted_proxy(tmp_path: Path, gateways: list[Proc]) -> None:
    """Behind a trusted proxy (127.0.0.1 here, a load balancer's range in a cluster) each client has its own
    budget, by the address the proxy put in X-Forwarded-For; a client that is not a trusted proxy
    (127.0.0.2) cannot escape its own budget by sending that header itself."""
    upstream = [f"127.0.0.1:{gateways[0].port}"]
    with nginx(tmp_path, upstream, rate="1r/m", burst=2, trusted=("127.0.0.1/32",)) as n:
        url = f"{n.url}/v1/models"
        async with httpx.AsyncClient(timeout=20) as proxy:
            first = await burst(proxy, url, 8, ["203.0.113.1"])
            # Another client behind the same proxy: a budget of its own, untouched by the first one's.
            second = await burst(proxy, url, 3, ["203.0.113.2"])
        untrusted = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(timeout=20, transport=untrusted) as spoofer:
            spoofed = await burst(spoofer, url, 8, [f"198.51.100.{i}" for i in range(8)])
        log = n.access_log
    assert first.count(200) == 3 and first.count(429) == 5  # 1 + burst 2, then limited
    assert second == [200, 200, 200]
    assert spoofed.count(200) == 3 and spoofed.count(429) == 5  # one budget, whatever the header says
    clients = {line.split(" ", 1)[0] for line in log.splitlines() if "/v1/models" in line}
    assert clients == {"203.0.113.1", "203.0.113.2", "127.0.0.2"}  # the access log names the real client


def test_rendered_configs_keep_the_client_address() -> None:
    from llmgw_contract.fleet import load_fleet
    from llmgw_tools.deploy.compose import ComposeOptions, render_compose
    from llmgw_tools.deploy.k8s import K8sOptions, render_k8s
    from llmgw_tools.deploy.nginx import container_nginx_conf

    plain = container_nginx_conf(NGINX_TEMPLATE, ["gateway:9000"])
    assert "\n    set_real_ip_from" not in plain and "limit_req_zone $binary_remote_addr" in plain
    behind = container_nginx_conf(NGINX_TEMPLATE, ["gateway:9000"], trusted_proxies=["10.0.0.0/8"])
    assert "set_real_ip_from 10.0.0.0/8;" in behind and "real_ip_header X-Forwarded-For;" in behind
    fleet = load_fleet(REPO / "fleet.yaml")
    k8s = render_k8s(fleet, "", K8sOptions(trusted_proxies=("10.0.0.0/8",)))
    assert "set_real_ip_from 10.0.0.0/8;" in k8s["nginx/nginx.conf"]
    compose = render_compose(fleet, o=ComposeOptions(trusted_proxies=("10.0.0.0/8",)))
    assert "set_real_ip_from 10.0.0.0/8;" in compose["deploy/compose/nginx.conf"]


def test_tls_server_block_serves_the_api(
    tmp_path: Path, gateways: list[Proc], cert: tuple[Path, Path]
) -> None:
    crt, key = cert
    tls_port = free_port()
    with nginx(tmp_path, [f"127.0.0.1:{gateways[0].port}"], tls=tls_lines(f"127.0.0.1:{tls_port}", crt, key)):
        base = f"https://127.0.0.1:{tls_port}"
        with httpx.Client(verify=ssl.create_default_context(cafile=str(crt)), timeout=20) as c:
            r = c.post(f"{base}/v1/chat/completions", json=CHAT)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "tok0 tok1 "
            with c.stream("POST", f"{base}/v1/chat/completions", json={**CHAT, "stream": True}) as s:
                events = [ln for ln in s.iter_lines() if ln.startswith("data: ")]
            assert events[-1] == "data: [DONE]"
        with pytest.raises(httpx.ConnectError):  # it is a real certificate check
            httpx.get(f"{base}/nginx-health", timeout=5)


class Closer:
    """An upstream that reads a request and closes the connection without answering."""

    def __init__(self) -> None:
        self.requests = 0
        self.port = free_port()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
        writer.close()


async def test_a_post_sent_upstream_is_never_sent_again(tmp_path: Path, engine: Proc) -> None:
    closer = Closer()
    server = await asyncio.start_server(closer.handle, "127.0.0.1", closer.port)
    # The closer first: round robin gives it the first request, the engine the second.
    with nginx(tmp_path, [f"127.0.0.1:{closer.port}", f"127.0.0.1:{engine.port}"]) as n:
        async with httpx.AsyncClient(timeout=20) as c:
            before = (await c.get(f"{engine.url}/stats")).json()["served"]
            post = await c.post(f"{n.url}/v1/chat/completions", json=CHAT)
            after = (await c.get(f"{engine.url}/stats")).json()["served"]
    server.close()
    assert closer.requests == 1
    # the gateway had the request (it may have dispatched it): a 502 that tells the SDKs not to retry
    assert post.status_code == 502
    assert post.headers["x-should-retry"] == "false" and "retry-after" not in post.headers
    assert_openai_error(post.content, "gateway_failed")
    assert after == before  # nginx did not hand the POST to the other upstream


async def test_no_gateway_reachable_is_a_503_the_sdks_may_retry(tmp_path: Path) -> None:
    """Every gateway refuses the connection: nothing was sent, so nginx's 503 says retry, and when."""
    with nginx(tmp_path, [f"127.0.0.1:{free_port()}"]) as n:
        async with httpx.AsyncClient(timeout=20) as c:
            post = await c.post(f"{n.url}/v1/chat/completions", json=CHAT)
    assert post.status_code == 503
    assert post.headers["x-should-retry"] == "true"
    assert post.headers["retry-after-ms"] == "1000" and post.headers["retry-after"] == "1"
    assert_openai_error(post.content, "gateway_unavailable")


async def test_a_get_is_retried_on_the_next_upstream(tmp_path: Path, engine: Proc) -> None:
    closer = Closer()
    server = await asyncio.start_server(closer.handle, "127.0.0.1", closer.port)
    with nginx(tmp_path, [f"127.0.0.1:{closer.port}", f"127.0.0.1:{engine.port}"]) as n:
        async with httpx.AsyncClient(timeout=20) as c:
            r = await c.get(f"{n.url}/v1/models")
    server.close()
    assert closer.requests == 1 and r.status_code == 200


@dataclass
class Outcome:
    started: float
    ok: bool
    detail: str


async def load(url: str, until: float, workers: int = 4) -> list[Outcome]:
    out: list[Outcome] = []

    async def worker(c: httpx.AsyncClient) -> None:
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                r = await c.post(f"{url}/v1/chat/completions", json=CHAT)
                out.append(Outcome(started, r.status_code == 200, f"{r.status_code} {r.text[:120]}"))
            except httpx.HTTPError as exc:
                out.append(Outcome(started, False, repr(exc)))

    async with httpx.AsyncClient(timeout=20) as c:
        await asyncio.gather(*(worker(c) for _ in range(workers)))
    return out


async def test_one_gateway_killed_new_requests_keep_succeeding(
    tmp_path: Path, redis_url: str, engine: Proc
) -> None:
    prefix = f"kill{uuid.uuid4().hex[:8]}"
    register(redis_url, prefix, engine.url)
    victim, survivor = start_gateways(tmp_path, redis_url, prefix, 2)
    try:
        upstreams = [f"127.0.0.1:{victim.port}", f"127.0.0.1:{survivor.port}"]
        with nginx(tmp_path / "nginx", upstreams, rate="100000r/s", burst=100000) as n:  # no rate limit here
            start = time.monotonic()
            flowing = asyncio.create_task(load(n.url, until=start + 4.5))
            await asyncio.sleep(1.0)
            await asyncio.to_thread(victim.kill, signal.SIGKILL)
            killed = time.monotonic()
            outcomes = await flowing
            errors = (n.run / "nginx-error.log").read_text()
    finally:
        victim.stop()
        survivor.stop()
    # nginx did meet the dead gateway (connection refused) and passed those requests to the survivor.
    assert f'upstream: "http://127.0.0.1:{victim.port}' in errors
    before = [o for o in outcomes if o.started < start + 0.8]
    after = [o for o in outcomes if o.started >= killed]
    assert before and all(o.ok for o in before), [o.detail for o in before if not o.ok]
    # Past nginx's fail_timeout (2 s) the dead gateway is tried again, and the retry covers that too.
    assert len(after) > 20 and max(o.started for o in after) > killed + 2.5
    assert [o.detail for o in after if not o.ok] == []
