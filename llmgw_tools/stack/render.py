"""Fills the {{NAME}} placeholders of the deploy templates (nginx, Prometheus)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

PLACEHOLDER = re.compile(r"\{\{[A-Z_]+\}\}")


def fill(template: str, values: Mapping[str, str]) -> str:
    for name, value in values.items():
        template = template.replace("{{" + name + "}}", value)
    missing = PLACEHOLDER.search(template)
    if missing:
        raise ValueError(f"template placeholder {missing.group(0)} has no value")
    return template


def real_ip_lines(trusted: Sequence[str]) -> str:
    """nginx's realip lines: the client address from X-Forwarded-For, believed only from ``trusted``."""
    if not trusted:
        return "    # no trusted proxy in front: $remote_addr is the client's own address"
    lines = [f"set_real_ip_from {cidr};" for cidr in trusted]
    lines += ["real_ip_header X-Forwarded-For;", "real_ip_recursive on;"]
    return "\n".join(f"    {line}" for line in lines)


def nginx_conf(
    template: Path,
    listen: str,
    upstreams: list[str],
    run_dir: Path,
    rate: str = "200r/s",
    burst: int = 400,
    tls: str = "",
    trusted_proxies: Sequence[str] = (),
) -> str:
    servers = "\n".join(f"        server {u} max_fails=1 fail_timeout=2s;" for u in upstreams)
    return fill(
        template.read_text(),
        {
            "RUN_DIR": str(run_dir),
            "UPSTREAMS": servers,
            "LISTEN": listen,
            "RATE_LIMIT": rate,
            "RATE_BURST": str(burst),
            "TLS": tls,
            "REAL_IP": real_ip_lines(trusted_proxies),
        },
    )


def prometheus_conf(
    template: Path, gateways: list[str], supervisor: str, sd_file: Path, rules_glob: str, interval: str = "5s"
) -> str:
    return fill(
        template.read_text(),
        {
            "SCRAPE_INTERVAL": interval,
            "RULES_GLOB": rules_glob,
            "GATEWAY_TARGETS": ", ".join(f'"{g}"' for g in gateways),
            "SUPERVISOR_TARGET": supervisor,
            "WORKER_SD_FILE": str(sd_file),
        },
    )
