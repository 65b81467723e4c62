"""The one admin check: an admin endpoint runs only for a request carrying ``LLMGW_ADMIN_KEY``.

The admin key is a gateway setting (from a Secret in rendered deployments), compared in constant time and
never logged; it does not call models, and API keys never pass this check. Without it set, every admin
endpoint answers 403 ``admin_disabled``. :func:`operator_view` is the softer form for answers that only
add detail for the operator (``/ready``): the admin key, or a request straight from this host.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Mapping

from gateway.auth.redis_auth import bearer
from gateway.errors import Forbidden, Unauthorized
from gateway.state import Gateway

log = logging.getLogger("llmgw.admin")


class AdminDisabled(Forbidden):
    code = "admin_disabled"


def admin_key(gw: Gateway) -> str:
    """The configured admin key ("" when none)."""
    return gw.settings.admin_key.get_secret_value() if gw.settings.admin_key else ""


def check_admin(gw: Gateway, headers: Mapping[str, str]) -> None:
    """Raises unless the request carries the admin key (403 when the gateway has none configured)."""
    admin = admin_key(gw)
    if not admin:
        raise AdminDisabled("the admin endpoints are off: this gateway has no LLMGW_ADMIN_KEY")
    given = bearer(headers)
    if not hmac.compare_digest(given.encode(), admin.encode()):
        log.warning("admin request refused: wrong admin key")
        raise Unauthorized("invalid admin key")


PROXY_HEADERS = ("x-forwarded-for", "x-real-ip", "forwarded")
"""Set by nginx (and most proxies) on what it forwards: a request carrying one came through a proxy."""


def has_admin_key(gw: Gateway, headers: Mapping[str, str]) -> bool:
    """True when the request carries the admin key; never raises nor logs (no key: False)."""
    admin = admin_key(gw)
    try:
        given = bearer(headers)
    except Unauthorized:
        return False
    return bool(admin) and hmac.compare_digest(given.encode(), admin.encode())


def operator_view(gw: Gateway, headers: Mapping[str, str], peer: str | None) -> bool:
    """May this request see the operator's detail? With the admin key, or straight from this host: a
    loopback peer with none of the headers a proxy in front (nginx) sets."""
    if has_admin_key(gw, headers):
        return True
    try:
        local = peer is not None and ipaddress.ip_address(peer).is_loopback
    except ValueError:
        local = False
    return local and not any(h in headers for h in PROXY_HEADERS)
