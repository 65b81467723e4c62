"""nginx configurations for containers, from the one template in deploy/nginx/ (via nginx_conf)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llmgw_tools.stack.render import nginx_conf

CONTAINER_RUN_DIR = Path("/tmp/nginx")
CONTAINER_TLS_DIR = Path("/etc/nginx/tls")
HTTP_PORT = 8080
HTTPS_PORT = 8443

# The nginx image writes logs where the template says ({{RUN_DIR}}/nginx-*.log): link those names to the
# container's stdout and stderr first, so that `docker compose logs` and `kubectl logs` show them.
START_NGINX = (
    f"mkdir -p {CONTAINER_RUN_DIR} "
    f"&& ln -sf /dev/stdout {CONTAINER_RUN_DIR}/nginx-access.log "
    f"&& ln -sf /dev/stderr {CONTAINER_RUN_DIR}/nginx-error.log "
    "&& exec nginx -g 'daemon off;'"
)


def tls_lines(listen: str, cert: Path, key: Path) -> str:
    """The TLS part of the server block: an `ssl` listener beside the plain one, modern protocols only."""
    lines = [
        f"listen {listen} ssl;",
        f"ssl_certificate {cert};",
        f"ssl_certificate_key {key};",
        "ssl_protocols TLSv1.2 TLSv1.3;",
        "ssl_prefer_server_ciphers off;",
        "ssl_session_cache shared:tls:10m;",
        "ssl_session_timeout 1h;",
        "ssl_session_tickets off;",
    ]
    return "\n".join(f"        {line}" for line in lines)


def container_nginx_conf(
    template: Path,
    upstreams: list[str],
    rate: str = "200r/s",
    burst: int = 400,
    trusted_proxies: Sequence[str] = (),
) -> str:
    """nginx.conf for the nginx container of compose and Kubernetes: 8080 plain, 8443 TLS. Behind a load
    balancer that adds X-Forwarded-For, pass its address range as ``trusted_proxies``."""
    tls = tls_lines(str(HTTPS_PORT), CONTAINER_TLS_DIR / "tls.crt", CONTAINER_TLS_DIR / "tls.key")
    return nginx_conf(
        template, str(HTTP_PORT), upstreams, CONTAINER_RUN_DIR, rate, burst, tls, trusted_proxies
    )
