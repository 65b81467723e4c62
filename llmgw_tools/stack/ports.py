"""Free loopback ports: one from the kernel, a check that a given one binds, the start of the ephemeral range.

The one copy of these helpers; ``testing/procs.py`` and the Redis topology launcher use them.
"""

from __future__ import annotations

import socket
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
