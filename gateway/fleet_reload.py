"""Follows the fleet file after start: when it changes on disk, the gateway learns added models, forgets
removed ones (their names answer 404 ``model_not_found``) and takes changed policies, without a restart.

:class:`FleetReload` is the one place that changes the gateway's fleet, names, policies and pools after
:func:`gateway.app.build_gateway`.  An invalid file is refused with the fleet's field-path error and the
gateway keeps the fleet it has.
"""

from __future__ import annotations

import logging

from gateway.replicas.discovery import Discovery
from gateway.state import Gateway
from gateway.upstream.credentials import CredentialError, credentials_for
from llmgw_contract.fleet import Fleet, FleetError
from llmgw_contract.fleet_file import FleetFile, file_stamp

log = logging.getLogger("llmgw.fleet")


class FleetReload:
    """A background step: re-read the fleet file when its stamp changes and apply it."""

    def __init__(self, gw: Gateway, discovery: Discovery) -> None:
        self.gw, self.discovery = gw, discovery
        self.file = FleetFile(gw.settings.fleet_file)
        self.file.seen = file_stamp(self.file.path)

    async def tick(self) -> None:
        if not self.file.changed():
            return
        try:
            fleet = self.file.read()
            credentials = credentials_for(self.gw.settings, fleet)
        except (FleetError, CredentialError) as exc:
            log.error("fleet change refused, keeping the current fleet: %s", exc)
            return
        self.gw.credentials = credentials
        self.apply(fleet)

    def apply(self, fleet: Fleet) -> None:
        gw = self.gw
        before = {m.name: m for m in gw.fleet.models}
        policies = dict(gw.policies)  # a removed model keeps its policy: requests in flight finish with it
        for m in fleet.models:
            prev = before.get(m.name)
            if prev is None or (prev.policy, prev.epsilon) != (m.policy, m.epsilon) or m.name not in policies:
                policies[m.name] = gw.policy_for(m)
        gw.fleet, gw.names, gw.policies = fleet, fleet.names(), policies
        gw.table.set_models(m.name for m in fleet.models)
        self.discovery.set_fleet(fleet)
        names = {m.name for m in fleet.models}
        log.info(
            "fleet reloaded: models=%s added=%s removed=%s",
            ",".join(sorted(names)),
            ",".join(sorted(names - before.keys())) or "none",
            ",".join(sorted(before.keys() - names)) or "none",
        )
