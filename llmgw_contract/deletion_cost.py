"""A model pod's ``controller.kubernetes.io/pod-deletion-cost`` follows its load, so that when KEDA's HPA
scales a Deployment down the ReplicaSet removes the idlest pod first (its preStop drain then finishes what
is in flight).

:class:`DeletionCost` PATCHes the pod's annotation through the in-cluster API (the pod's service account
token, its CA, ``KUBERNETES_SERVICE_HOST``/``_PORT``, the pod's name from ``POD_NAME`` and namespace from
the service account's files), only when the cost changed since the last patch that succeeded. Outside a
pod (no ``KUBERNETES_SERVICE_HOST``) :meth:`DeletionCost.from_env` gives None: nothing is patched. The
registration sidecar (:mod:`llmgw_contract.sidecar`) calls :meth:`DeletionCost.follow` every heartbeat with
the requests its vLLM server runs and queues. The pod's service account needs ``patch`` on ``pods`` (the
rendered ``models/rbac.yaml``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

log = logging.getLogger("llmgw.register")

ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PATCH_TYPE = "application/merge-patch+json"


def patch_body(cost: int) -> bytes:
    """The merge patch that sets the annotation (its value a string, as annotations are)."""
    return json.dumps({"metadata": {"annotations": {ANNOTATION: str(cost)}}}).encode()


@dataclass(slots=True)
class DeletionCost:
    """Keeps one pod's deletion cost current (see the module doc)."""

    api: str
    """The API server's base URL (``https://host:port``; a loopback ``http://`` one in tests)."""
    namespace: str
    pod: str
    token_file: Path
    verify: str | bool = True
    """The CA bundle that signs the API server's certificate (the service account's ``ca.crt``)."""
    sent: int | None = field(default=None)
    """The cost of the last patch that succeeded (None: none yet)."""
    failing: bool = False

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] = os.environ, account: Path = SERVICE_ACCOUNT
    ) -> DeletionCost | None:
        """The pod's, when running in one (``KUBERNETES_SERVICE_HOST`` and ``POD_NAME`` set); else None."""
        host, pod = env.get("KUBERNETES_SERVICE_HOST"), env.get("POD_NAME")
        if not host or not pod:
            return None
        port = env.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host  # an IPv6 service address
        ns_file = account / "namespace"
        namespace = env.get("POD_NAMESPACE") or (ns_file.read_text().strip() if ns_file.exists() else "")
        if not namespace:
            log.warning("pod=%s: no POD_NAMESPACE nor %s, its deletion cost is not kept", pod, ns_file)
            return None
        ca = account / "ca.crt"
        return cls(
            f"https://{host}:{port}", namespace, pod, account / "token", str(ca) if ca.exists() else True
        )

    @property
    def url(self) -> str:
        return f"{self.api}/api/v1/namespaces/{self.namespace}/pods/{self.pod}"

    async def follow(self, cost: int) -> bool:
        """Patch the annotation to ``cost`` unless it already holds it; True when a patch succeeded. A
        failure is logged once (until a patch succeeds again) and left for the next call to retry."""
        if cost == self.sent:
            return False
        token = self.token_file.read_text().strip()  # re-read: projected tokens rotate
        headers = {"Authorization": f"Bearer {token}", "Content-Type": PATCH_TYPE}
        try:
            async with httpx.AsyncClient(verify=self.verify, timeout=5.0) as client:
                resp = await client.patch(self.url, content=patch_body(cost), headers=headers)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            if not self.failing:
                log.warning("pod=%s deletion cost not patched (retried each heartbeat): %s", self.pod, exc)
            self.failing = True
            return False
        self.sent, self.failing = cost, False
        return True
