"""The one reader of the fleet file for the workers and the gateways: one validator, one watcher.

:func:`read_fleet` is :func:`llmgw_contract.fleet.load_fleet` plus the checks both sides need beyond the
schema (today: every model's routing policy is one of :data:`ROUTING_POLICIES`), so the supervisor and the
gateways accept and refuse the same files. :class:`FleetFile` tells when the file changed on disk (its
mtime, size or inode); :class:`FleetWatch` adds the asyncio side the supervisor's reconcile loop waits on
(a flag raised by a change or by SIGHUP).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from llmgw_contract.fleet import Fleet, FleetError, load_fleet

log = logging.getLogger("llmgw.fleet")

ROUTING_POLICIES = frozenset({"round_robin", "least_inflight", "power_of_two", "session", "prefix_affinity"})
"""The routing policies a fleet may name; the gateway's registry (``gateway.routing``) has exactly these
(a test checks)."""

Stamp = tuple[int, int, int]


def check_policies(fleet: Fleet, origin: str = "<fleet>") -> Fleet:
    """The fleet, once every model's policy is a known one; else FleetError naming the field."""
    unknown = [f"  models.{i}.policy: unknown routing policy {m.policy!r}; known: {sorted(ROUTING_POLICIES)}"
               for i, m in enumerate(fleet.models) if m.policy not in ROUTING_POLICIES]  # fmt: skip
    if unknown:
        raise FleetError(f"{origin}: invalid fleet file:\n" + "\n".join(unknown))
    return fleet


def read_fleet(path: Path) -> Fleet:
    """The fleet file, validated as both the workers and the gateways require; raises FleetError."""
    return check_policies(load_fleet(path), str(path))


def file_stamp(path: Path) -> Stamp | None:
    """What tells one version of the file from another (None: it cannot be read now)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class FleetFile:
    """The fleet file and the stamp of its last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: Stamp | None = None

    def changed(self) -> bool:
        """True when the file's stamp differs from the last read's (a missing file is no change)."""
        current = file_stamp(self.path)
        return current is not None and current != self.seen

    def read(self) -> Fleet:
        """:func:`read_fleet`; the stamp is taken first, so a write during the read is seen later."""
        self.seen = file_stamp(self.path)
        return read_fleet(self.path)


class FleetWatch(FleetFile):
    """A :class:`FleetFile` with a flag raised when it should be read again (a change, or SIGHUP)."""

    def __init__(self, path: Path, poll_s: float = 1.0) -> None:
        super().__init__(path)
        self.poll_s = poll_s
        self.wanted = asyncio.Event()
        self.wanted.set()  # the first read

    def request(self, why: str) -> None:
        """Ask for a new read (SIGHUP, an operator)."""
        log.info("fleet file %s: re-read requested (%s)", self.path, why)
        self.wanted.set()

    async def poll(self) -> None:
        """Raise the flag whenever the file changed since the last read."""
        while True:
            await asyncio.sleep(self.poll_s)
            if self.changed() and not self.wanted.is_set():
                self.request("the file changed")
