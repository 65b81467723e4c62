"""Ports on this host: is one taken by a process we did not start?"""

from __future__ import annotations

import socket


def port_taken(host: str, port: int) -> bool:
    """True when something already listens on ``host:port`` (a bind with SO_REUSEADDR fails only then)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False
