"""Step 2b, media URLs: a request's image, audio, video and file URLs must not make a worker fetch an
internal address.

A URL in a media part (OpenAI's ``image_url``/``audio_url``/``video_url``/``file_url``, the Responses
API's ``input_image``, Anthropic's ``source.url``) is refused with 400 when its scheme is neither
``http(s)`` nor ``data``, or when its host resolves to a loopback, private, link-local, shared
(100.64/10, where some clouds keep their metadata), reserved, multicast or unspecified address, unless
the host is one of the operator's ``LLMGW_MEDIA_DOMAINS`` (or under one). A request without media parts
costs one substring search. The worker resolves the name again when it fetches, so the rendered
deployments also give vLLM pods an egress policy and vLLM's own media-domain allow-list.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import MediaUrlRefused

URL_KEYS = frozenset({"url", "image_url", "audio_url", "video_url", "file_url"})
SHARED = ipaddress.ip_network("100.64.0.0/10")
RESOLVE_TIMEOUT_S = 2.0
MAX_DEPTH = 8


def media_urls(payload: dict[str, Any]) -> list[str]:
    """Every URL under a media key in the request's messages or input."""
    return [u for key in ("messages", "input") for u in _urls(payload.get(key), None, 0)]


def _urls(node: Any, key: str | None, depth: int) -> Iterator[str]:
    if depth > MAX_DEPTH:
        return
    if isinstance(node, str):
        if key in URL_KEYS:
            yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _urls(v, k if isinstance(k, str) else None, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield from _urls(item, key if key in URL_KEYS else None, depth + 1)


def refused_address(address: str) -> bool:
    """True for an address a worker must never be made to fetch from."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_reserved
        or ip.is_multicast
        or ip.is_unspecified
        or (isinstance(ip, ipaddress.IPv4Address) and ip in SHARED)
    )


def allowed_domain(host: str, domains: frozenset[str]) -> bool:
    return any(host == d or host.endswith("." + d) for d in domains)


async def check_media(urls: list[str], domains: frozenset[str]) -> None:
    """Raises MediaUrlRefused for the first URL a worker must not fetch."""
    for url in urls:
        await check_url(url, domains)


async def check_url(url: str, domains: frozenset[str]) -> None:
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme == "data":
        return
    host = (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host:
        raise MediaUrlRefused(f"media URL {url[:200]!r}: only http(s) and data URLs are allowed")
    if allowed_domain(host, domains):
        return
    for address in await resolve(host, url):
        if refused_address(address):
            raise MediaUrlRefused(
                f"media URL {url[:200]!r} resolves to {address}, an internal address; ask the operator to"
                " allow its domain (LLMGW_MEDIA_DOMAINS)"
            )


async def resolve(host: str, url: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        raise MediaUrlRefused(f"media URL {url[:200]!r}: its host cannot be resolved") from None
    return [str(info[4][0]) for info in infos]
