"""Brings the whole stack up in order, waits for readiness by polling, and takes it down in reverse."""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from llmgw_contract.fleet import Fleet
from llmgw_contract.fleet_file import read_fleet
from llmgw_contract.vllm_probe import API_KEY_ENV
from llmgw_tools.stack.keeper import KeepPolicy, keep
from llmgw_tools.stack.ports import HOST
from llmgw_tools.stack.redis import redis_server_argv
from llmgw_tools.stack.redis_topology import Topology, start
from llmgw_tools.stack.render import nginx_conf, prometheus_conf
from llmgw_tools.stack.services import Service, http_probe, tcp_probe
from workers.host.ports import port_taken

log = logging.getLogger("llmgw.stack")
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class StackConfig:
    fleet_file: Path = REPO / "fleet.yaml"
    run_dir: Path = REPO / ".run"
    models_dir: Path | None = None
    redis_port: int = 6390
    redis_topology: str = "single"
    """``single`` (a redis-server service on redis_port), ``sentinel`` or ``cluster`` (redis_topology.py)."""
    keys_redis_port: int = 6391
    gateway_ports: tuple[int, ...] = (9001, 9002)
    nginx_port: int = 8080
    prometheus_port: int = 9090
    supervisor_metrics_port: int = 9400
    host: str = "127.0.0.1"
    ready_deadline_s: float = 1200.0
    drain_grace_s: float = 30.0
    gateway_grace_s: float = 5.0
    gateway_env: dict[str, str] = field(default_factory=dict)
    workers_args: tuple[str, ...] = ()
    """More flags for the supervisor (``llmgw-workers``), e.g. a shorter restart back-off."""
    # vLLM's API key, fresh for each stack: only the gateways and the supervisor hold it.
    vllm_api_key: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)

    @property
    def redis_url(self) -> str:
        return f"redis://{self.host}:{self.redis_port}/0"

    @property
    def keys_redis_url(self) -> str:
        return f"redis://{self.host}:{self.keys_redis_port}/0"

    @property
    def nginx_url(self) -> str:
        return f"http://{self.host}:{self.nginx_port}"

    def ports_in_use(self) -> list[str]:
        """One line for each fixed port of the stack that another process on this host holds (a
        workstation's own Redis, nginx or Prometheus): the stack runs its own processes on ports of its
        own and never stops or borrows the host's, so it refuses to start and names the option instead
        (a probe would otherwise find the host's service ready in place of the stack's)."""
        wanted = [("the key store Redis", self.keys_redis_port, "--keys-redis-port")]
        if self.redis_topology == "single":
            wanted.append(("the state Redis", self.redis_port, "--redis-port"))
        wanted += [(f"gateway {i}", p, "--gateway-port") for i, p in enumerate(self.gateway_ports, start=1)]
        wanted += [
            ("nginx", self.nginx_port, "--port"),
            ("the supervisor", self.supervisor_metrics_port, "--supervisor-port"),
        ]
        if self.prometheus_port:
            wanted.append(("Prometheus", self.prometheus_port, "--prometheus-port"))
        return [
            f"port {port} ({name}) is in use by another process on this host: pick another with {flag}"
            for name, port, flag in wanted
            if port_taken(HOST, port)
        ]


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if found is None:
        raise RuntimeError(f"{name} is not installed (make run installs it from the OS packages)")
    return found


def script(name: str) -> str:
    return str(Path(sys.executable).parent / name)


class Stack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.fleet: Fleet = read_fleet(config.fleet_file)
        self.services: list[Service] = []
        self.topology: Topology | None = None
        self.redis_url = config.redis_url

    @property
    def logs(self) -> Path:
        return self.config.run_dir / "logs"

    def redis(self) -> Service:
        """The state Redis: registry, admission, in-flight counts, rate counters; never persisted."""
        c = self.config
        data = c.run_dir / "redis"
        data.mkdir(parents=True, exist_ok=True)
        argv = redis_server_argv(tool("redis-server"), c.redis_port, data, c.host)
        return Service("redis", argv, self.logs / "redis.log", tcp_probe(c.host, c.redis_port))

    def keys_redis(self) -> Service:
        """The key store: API keys only, every write appended to run_dir/redis-keys (survives restarts)."""
        c = self.config
        data = c.run_dir / "redis-keys"
        data.mkdir(parents=True, exist_ok=True)
        argv = redis_server_argv(tool("redis-server"), c.keys_redis_port, data, c.host, persistent=True)
        probe = tcp_probe(c.host, c.keys_redis_port)
        return Service("redis-keys", argv, self.logs / "redis-keys.log", probe)

    def workers(self) -> Service:
        c = self.config
        argv = [
            script("llmgw-workers"),
            "--fleet",
            str(c.fleet_file),
            "--redis-url",
            self.redis_url,
            "--log-dir",
            str(self.logs),
            "--drain-grace",
            str(c.drain_grace_s),
            "--sd-file",
            str(self.sd_file),
            "--metrics-port",
            str(c.supervisor_metrics_port),
            "--state-file",
            str(c.run_dir / "workers-state.json"),
        ]
        if c.models_dir is not None:
            argv += ["--models-dir", str(c.models_dir)]
        argv += c.workers_args
        probe = tcp_probe(c.host, c.supervisor_metrics_port)
        env = {API_KEY_ENV: c.vllm_api_key}  # vLLM reads it as its --api-key; the supervisor's probes send it
        return Service(
            "workers", argv, self.logs / "workers.log", probe, env, stop_grace_s=c.drain_grace_s + 20,
            death_signal=signal.SIGKILL,  # its replicas outlive it, adopted by the next supervisor
        )  # fmt: skip

    def gateway(self, index: int, port: int) -> Service:
        c = self.config
        env = {
            "LLMGW_FLEET_FILE": str(c.fleet_file),
            "LLMGW_REDIS_URL": self.redis_url,
            "LLMGW_KEYS_REDIS_URL": c.keys_redis_url,
            "LLMGW_GATEWAY_ID": f"gateway-{index}",
            "LLMGW_SHUTDOWN_GRACE_S": f"{c.gateway_grace_s:g}",
            "LLMGW_VLLM_API_KEY": c.vllm_api_key,
            **c.gateway_env,
        }
        argv = [script("llmgw-gateway"), "--host", c.host, "--port", str(port)]
        probe = http_probe(f"http://{c.host}:{port}/health")
        # open requests get their grace, then their planned end (10 s at most), before any SIGKILL
        log = self.logs / f"gateway-{index}.log"
        return Service(f"gateway-{index}", argv, log, probe, env, stop_grace_s=c.gateway_grace_s + 15)

    @property
    def sd_file(self) -> Path:
        return self.config.run_dir / "prometheus" / "workers.json"

    def nginx(self) -> Service:
        c = self.config
        run = c.run_dir / "nginx"
        run.mkdir(parents=True, exist_ok=True)
        conf = run / "nginx.conf"
        upstreams = [f"{c.host}:{p}" for p in c.gateway_ports]
        conf.write_text(
            nginx_conf(REPO / "deploy/nginx/nginx.conf.template", f"{c.host}:{c.nginx_port}", upstreams, run)
        )
        # -e: the start-up error log too is the stack's (nginx opens its built-in /var/log/nginx/error.log,
        # the host's, before it reads the configuration otherwise)
        argv = [tool("nginx"), "-c", str(conf), "-p", str(run), "-e", str(run / "nginx-error.log")]
        argv += ["-g", "daemon off;"]
        probe = http_probe(f"{c.nginx_url}/health")
        # A master killed -9 leaves its workers serving: SIGQUIT lets them finish their requests.
        return Service("nginx", argv, self.logs / "nginx.log", probe, quit_signal=signal.SIGQUIT)

    def prometheus(self) -> Service:
        c = self.config
        run = c.run_dir / "prometheus"
        run.mkdir(parents=True, exist_ok=True)
        if not self.sd_file.exists():
            self.sd_file.write_text("[]")
        conf = run / "prometheus.yml"
        gateways = [f"{c.host}:{p}" for p in c.gateway_ports]
        rules = str(REPO / "deploy/prometheus/rules/*.yml")
        sup = f"{c.host}:{c.supervisor_metrics_port}"
        conf.write_text(
            prometheus_conf(
                REPO / "deploy/prometheus/prometheus.yml.template", gateways, sup, self.sd_file, rules
            )
        )
        argv = [
            tool("prometheus"),
            f"--config.file={conf}",
            f"--storage.tsdb.path={run / 'data'}",
            f"--web.listen-address={c.host}:{c.prometheus_port}",
            "--web.enable-lifecycle",
        ]
        probe = http_probe(f"http://{c.host}:{c.prometheus_port}/-/ready")
        return Service("prometheus", argv, self.logs / "prometheus.log", probe)

    async def launch(self, service: Service, deadline_s: float = 60.0) -> None:
        started = time.monotonic()
        log.info("starting %s", service.name)
        await service.start()
        self.services.append(service)
        await service.wait_until_ready(deadline_s)
        log.info("%s ready in %.1f s", service.name, time.monotonic() - started)

    async def up(self) -> None:
        c = self.config
        self.logs.mkdir(parents=True, exist_ok=True)
        await self.start_redis()
        await self.launch(self.keys_redis())
        await self.launch(self.workers())
        for i, port in enumerate(c.gateway_ports, start=1):
            await self.launch(self.gateway(i, port))
        await self.launch(self.nginx())
        if c.prometheus_port:
            await self.launch(self.prometheus())
        await self.wait_for_fleet()

    async def start_redis(self) -> None:
        """The state Redis: a supervised service (single), or a Sentinel or Cluster topology whose nodes
        fail over by themselves (started here, stopped by :meth:`down`)."""
        kind = self.config.redis_topology
        if kind == "single":
            await self.launch(self.redis())
            return
        log.info("starting redis (%s)", kind)
        self.topology = await asyncio.to_thread(start, kind, self.config.run_dir / f"redis-{kind}")
        self.redis_url = self.topology.url
        log.info("redis (%s) ready: %s", kind, self.redis_url)

    def service(self, name: str) -> Service:
        """A running service by name (``redis``, ``redis-keys``, ``gateway-1``, ``nginx``, ...)."""
        for s in self.services:
            if s.name == name:
                return s
        raise KeyError(f"no service {name!r}; have {', '.join(s.name for s in self.services)}")

    async def restart(self, name: str, deadline_s: float = 60.0) -> None:
        """Start a service again with its own command line (after a crash or a kill); wait until ready."""
        service = self.service(name)
        await service.stop()
        await service.start()
        await service.wait_until_ready(deadline_s)
        log.info("%s restarted", name)

    def expected(self) -> dict[str, int]:
        """Ready replicas wanted per ``always`` model (on-demand models only need to be published)."""
        return {m.name: m.replicas if m.managed else 1 for m in self.fleet.models if not m.on_demand}

    def on_demand(self) -> list[str]:
        return [m.name for m in self.fleet.models if m.on_demand and m.replicas]

    @property
    def gateway_ready_url(self) -> str:
        """The first gateway's /ready, straight from this host: its detail (models, states) is not given
        through nginx without the admin key (gateway/admin/auth.py's ``operator_view``)."""
        return f"http://{self.config.host}:{self.config.gateway_ports[0]}/ready"

    def ready_urls(self) -> list[str]:
        """Every gateway's /ready, straight from this host (the detail is not given through nginx)."""
        return [f"http://{self.config.host}:{p}/ready" for p in self.config.gateway_ports]

    def fleet_line(self, detail: dict[str, Any]) -> tuple[str, bool]:
        """One gateway's view of the fleet as a log line, and whether it is whole: every replica of every
        ``always`` model ready, every on-demand model published (asleep until a request wakes it, or
        awake)."""
        want, lazy = self.expected(), self.on_demand()
        models = detail.get("models", {})
        have = {m: v.get("ready_replicas", 0) for m, v in models.items()}
        states = {m: str(models.get(m, {}).get("state", "unavailable")) for m in lazy}
        line = ", ".join([f"{m} {have.get(m, 0)}/{n}" for m, n in want.items()] +
                         [f"{m} {s}" for m, s in states.items()])  # fmt: skip
        published = all(s in ("asleep", "awake") for s in states.values())
        return line, published and all(have.get(m, 0) >= n for m, n in want.items())

    async def wait_for_fleet(self) -> None:
        """Poll every gateway's /ready detail until each of them sees the whole fleet (nginx may send the
        first request to any of them)."""
        seen = ""
        deadline = time.monotonic() + self.config.ready_deadline_s
        async with httpx.AsyncClient(timeout=5.0) as client:
            while time.monotonic() < deadline:
                self.check_alive()
                views = [self.fleet_line(await ready_detail(client, url)) for url in self.ready_urls()]
                line = " | ".join(v[0] for v in views)
                if line != seen:
                    log.info("replicas ready (per gateway): %s", line)
                    seen = line
                if all(whole for _, whole in views):
                    return
                await asyncio.sleep(1.0)
        raise RuntimeError(
            f"the fleet was not ready after {self.config.ready_deadline_s:.0f} s; see {self.logs}"
        )

    def check_alive(self) -> None:
        dead = [s.name for s in self.services if not s.alive]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited; see {self.logs}")

    async def keep(self, policy: KeepPolicy | None = None) -> None:
        """After READY: restart any service that dies (:func:`llmgw_tools.stack.keeper.keep`), until
        cancelled (``down`` cancels it first)."""
        await asyncio.gather(*(keep(s, policy or KeepPolicy()) for s in self.services))

    def reload(self) -> None:
        """SIGHUP: the supervisor re-reads the fleet file (the gateways follow the file by themselves);
        no service is restarted."""
        for s in self.services:
            if s.name == "workers" and s.alive:
                s.signal_group(signal.SIGHUP)
        log.info("SIGHUP: the supervisor re-reads %s; every service keeps running", self.config.fleet_file)

    async def down(self) -> None:
        for service in reversed(self.services):
            log.info("stopping %s", service.name)
            await service.stop()
        self.services.clear()
        if self.topology is not None:
            log.info("stopping redis (%s)", self.topology.kind)
            await asyncio.to_thread(self.topology.stop)
            self.topology = None


async def ready_detail(client: httpx.AsyncClient, url: str) -> dict[str, dict[str, dict[str, Any]]]:
    try:
        r = await client.get(url)
        data = r.json()
    except (httpx.HTTPError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
