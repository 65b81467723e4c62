"""The one admin check: an admin endpoint runs only for a request carrying ``LLMGW_ADMIN_KEY``.

The admin key is a gateway setting (from a Secret in rendered deployments), compared in constant time and
never logged; it does not call models, and API keys never pass this check. Without it set, every admin
endpoint answers 403 ``admin_disabled``.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping

from gateway.auth.redis_auth import bearer
from gateway.errors import Forbidden, Unauthorized
from gateway.state import Gateway

log = logging.getLogger("llmgw.admin")


class AdminDisabled(Forbidden):
    code = "admin_disabled"


def check_admin(gw: Gateway, headers: Mapping[str, str]) -> None:
    """Raises unless the request carries the admin key (403 when the gateway has none configured)."""
    admin = gw.settings.admin_key.get_secret_value() if gw.settings.admin_key else ""
    if not admin:
        raise AdminDisabled("the admin endpoints are off: this gateway has no LLMGW_ADMIN_KEY")
    given = bearer(headers)
    if not hmac.compare_digest(given.encode(), admin.encode()):
        log.warning("admin request refused: wrong admin key")
        raise Unauthorized("invalid admin key")
