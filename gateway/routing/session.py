"""Session affinity: requests of one session go to one replica, chosen by rendezvous hashing.

The session key (the gateway takes it from the ``x-session-id`` header, else the request's ``user``
field) is ranked over the candidates' ids with :mod:`gateway.routing.rendezvous`; the first in the
ranking wins. Every gateway replica therefore picks the same replica for a session without any shared
state, and when that replica is not a candidate (ejected, draining, gone) the session moves to the next
in its ranking, and moves back once it returns. Load is not considered for keyed requests. A request
without a session key (``None`` or empty) goes to the least loaded replica (ties to the lowest id).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.replicas.table import Endpoint
from gateway.routing.base import Policy, RouteRequest
from gateway.routing.least_inflight import least_loaded_stable
from gateway.routing.rendezvous import top


class SessionAffinity(Policy):
    name = "session"

    def pick(self, candidates: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        if not request.session_key:
            return least_loaded_stable(candidates)
        return top(request.session_key.encode("utf-8", "surrogatepass"), candidates)
