"""Alerts delivered, for real: the project's alert rules in a real Prometheus, Debian's
prometheus-alertmanager with deploy/alertmanager/alertmanager.yml, and a webhook on loopback in this test.
A replica (the FAKE ENGINE, scraped as job vllm) is killed and kept down: LLMGWTargetDown reaches the
webhook within its `for:` plus one scrape and one evaluation interval (and Alertmanager's group_wait);
the replica comes back on its port and the webhook gets the alert resolved.

For `make test` the rules are a rendered copy whose `for:` of that one alert is shortened to ALERT_FOR
(the expression, labels and every other rule as shipped; a test below checks that); with
LLMGW_ALERTS_SHIPPED_FOR=1 the shipped `for:` (2 minutes) is kept. The Alertmanager config is rendered
the same way: the webhook's URL and the grouping timers for a test, the route and receivers as shipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from testing.poll import wait_until
from testing.procs import REPO, Proc, free_port, http_ok, spawn, start_fake_engine

ALERT = "LLMGWTargetDown"
RULES = REPO / "deploy/prometheus/rules/llmgw.yml"
ALERTMANAGER_CONFIG = REPO / "deploy/alertmanager/alertmanager.yml"
SCRAPE_S = 1.0
ALERT_FOR = "10s"
GROUP_WAIT_S = 1.0
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
MODEL = "fake-chat"


def duration_s(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]]


def shipped_for(alert: str) -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return str(next(r["for"] for g in groups for r in g["rules"] if r.get("alert") == alert))


def shortened_rules(text: str, alert: str, for_: str) -> dict[str, Any]:
    """The rules file with `for:` of ``alert`` set to ``for_``; nothing else changes."""
    rules = yaml.safe_load(text)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                rule["for"] = for_
    return dict(rules)


def test_test_copy_changes_only_the_one_for() -> None:
    shipped = yaml.safe_load(RULES.read_text())
    copy = shortened_rules(RULES.read_text(), ALERT, ALERT_FOR)
    for group, group_copy in zip(shipped["groups"], copy["groups"], strict=True):
        for rule, rule_copy in zip(group["rules"], group_copy["rules"], strict=True):
            if rule.get("alert") == ALERT:
                assert rule_copy == {**rule, "for": ALERT_FOR}
            else:
                assert rule_copy == rule


def test_the_config_alertmanager_checks(tmp_path: Path) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.fail("amtool (Debian's prometheus-alertmanager) is missing: run `make install`")
    done = subprocess.run([amtool, "check-config", str(ALERTMANAGER_CONFIG)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass
class Webhook:
    """Alertmanager's webhook receiver on loopback: every POSTed payload with the time it arrived."""

    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with hook.lock:
                    hook.received.append((time.monotonic(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler

    def first(self, status: str, after: float) -> float | None:
        """When the first payload with ``ALERT`` in ``status`` arrived after ``after``."""
        with self.lock:
            for at, payload in self.received:
                alerts = payload.get("alerts", [])
                if at >= after and any(
                    a["labels"].get("alertname") == ALERT and a["status"] == status for a in alerts
                ):
                    return at
        return None


@dataclass
class AlertPath:
    engine: Proc
    webhook: Webhook
    prometheus_url: str
    alert_for_s: float
    procs: list[Proc]


def render_alertmanager(tmp: Path, webhook_url: str) -> Path:
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    config["route"].update(group_wait=f"{GROUP_WAIT_S:g}s", group_interval="1s", repeat_interval="1h")
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = webhook_url
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def render_prometheus(tmp: Path, engine: Proc, alertmanager_port: int, alert_for: str) -> Path:
    rules = tmp / "rules.yml"
    rules.write_text(yaml.safe_dump(shortened_rules(RULES.read_text(), ALERT, alert_for)))
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S:g}s", "evaluation_interval": f"{SCRAPE_S:g}s"},
        "rule_files": [str(rules)],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
        },
        "scrape_configs": [
            {
                "job_name": "vllm",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{engine.port}"],
                        "labels": {"model": MODEL, "replica": f"{MODEL}-0"},
                    }
                ],
            }
        ],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_alert_path(
    tmp: Path, server: ThreadingHTTPServer, webhook: Webhook, procs: list[Proc]
) -> AlertPath:
    assert ALERTMANAGER is not None
    engine = start_fake_engine(tmp, "--model", MODEL)
    procs.append(engine)
    am_port, prom_port = free_port(), free_port()
    webhook_url = f"http://127.0.0.1:{server.server_address[1]}/alerts"
    am_argv = [
        ALERTMANAGER, f"--config.file={render_alertmanager(tmp, webhook_url)}",
        f"--storage.path={tmp / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
        "--cluster.listen-address=",
    ]  # fmt: skip
    procs.append(spawn(am_argv, am_port, tmp / "alertmanager.log"))
    shipped = os.environ.get("LLMGW_ALERTS_SHIPPED_FOR") == "1"
    alert_for = shipped_for(ALERT) if shipped else ALERT_FOR
    prom_argv = [
        "prometheus", f"--config.file={render_prometheus(tmp, engine, am_port, alert_for)}",
        f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
    ]  # fmt: skip
    procs.append(spawn(prom_argv, prom_port, tmp / "prometheus.log"))
    url = f"http://127.0.0.1:{prom_port}"
    wait_until(lambda: http_ok(f"http://127.0.0.1:{am_port}/-/ready"), 30, "alertmanager ready")
    wait_until(lambda: http_ok(f"{url}/-/ready"), 30, "prometheus ready")
    return AlertPath(engine, webhook, url, duration_s(alert_for), procs)


@pytest.fixture(scope="module")
def alert_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertPath]:
    if ALERTMANAGER is None or shutil.which("prometheus") is None:
        pytest.fail("prometheus / prometheus-alertmanager (Debian) missing: run `make install`")
    webhook = Webhook()
    server = ThreadingHTTPServer(("127.0.0.1", 0), webhook.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    procs: list[Proc] = []
    try:
        yield start_alert_path(tmp_path_factory.mktemp("alerts"), server, webhook, procs)
    finally:
        for proc in procs:
            proc.stop()
        server.shutdown()
        server.server_close()


def target_up(prometheus_url: str) -> bool:
    answer = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": 'up{job="vllm"}'}, timeout=5).json()
    return any(r["value"][1] == "1" for r in answer["data"]["result"])


def test_killed_replica_fires_then_resolves(alert_path: AlertPath) -> None:
    wait_until(lambda: target_up(alert_path.prometheus_url), 30, "the replica scraped")
    port = alert_path.engine.port
    alert_path.engine.kill()
    killed = time.monotonic()
    bound = alert_path.alert_for_s + 2 * SCRAPE_S + GROUP_WAIT_S
    wait_until(
        lambda: alert_path.webhook.first("firing", killed) is not None, bound + 60, f"{ALERT} delivered"
    )
    fired = alert_path.webhook.first("firing", killed)
    assert fired is not None
    print(f"{ALERT} delivered {fired - killed:.1f} s after the kill (for: {alert_path.alert_for_s:g} s)")
    # for: + one scrape (the failed one that sees it down) + one evaluation + group_wait, + 2 s to deliver.
    assert fired - killed <= bound + 2.0

    back = start_fake_engine(Path(alert_path.engine.log).parent, "--model", MODEL, port=port)
    alert_path.procs.append(back)
    revived = time.monotonic()
    wait_until(lambda: alert_path.webhook.first("resolved", revived) is not None, 60, f"{ALERT} resolved")
    resolved = alert_path.webhook.first("resolved", revived)
    assert resolved is not None
    print(f"{ALERT} resolved {resolved - revived:.1f} s after the replica came back")
