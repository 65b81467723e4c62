"""Step 2b, media URLs: a request's image, audio, video and file URLs must not make a worker fetch an
internal address.

A URL in a media part (OpenAI's ``image_url``/``audio_url``/``video_url``/``file_url``, the Responses
API's ``input_image``, Anthropic's ``source.url``) is refused with 400 when its scheme is neither
``http(s)`` nor ``data``, or when its host resolves to a loopback, private, link-local, shared
(100.64/10, where some clouds keep their metadata), reserved, multicast or unspecified address, unless
the host is one of the operator's ``LLMGW_MEDIA_DOMAINS`` (or under one). The parsed payload is searched
whole, whatever the API (chat, completions, Responses, Messages, embeddings, pooling, score and rerank,
whose multimodal fields are ``text_1``/``data_2``/``query``/``documents``...), so an escaped key
(``"\\u0075rl"``) or a field of another API is seen as vLLM will see it. The worker resolves the name
again when it fetches, so the supervisor and the rendered deployments also give vLLM its own media-domain
allow-list (deny-all unless the fleet names hosts), and Kubernetes an egress policy. A body that holds
neither the bytes ``url`` nor any ``\\u`` escape cannot name a media key and is not walked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import MediaUrlRefused

URL_KEYS = frozenset({"url", "image_url", "audio_url", "video_url", "file_url"})
SHARED = ipaddress.ip_network("100.64.0.0/10")
RESOLVE_TIMEOUT_S = 2.0
MAX_DEPTH = 12


def may_hold_media(body: bytes) -> bool:
    """False only when no key of the JSON ``body`` can be a media key: every one contains ``url``, and a
    JSON string spells it either as those bytes or with a ``\\u`` escape (the cheap test before the
    walk, for a long token-id prompt)."""
    return b"url" in body or b"\\u" in body


def media_urls(payload: dict[str, Any]) -> list[str]:
    """Every URL under a media key anywhere in the request's (parsed) payload."""
    return list(_urls(payload, None, 0))


def _urls(node: dict[str, Any] | list[Any], key: str | None, depth: int) -> Iterator[str]:
    """The strings under a media key in ``node`` (a dict or list found under ``key``)."""
    if depth > MAX_DEPTH:
        return
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, str):
                if k in URL_KEYS:
                    yield v
            elif isinstance(v, dict | list):
                yield from _urls(v, k, depth + 1)
        return
    media = key in URL_KEYS
    for item in node:
        if isinstance(item, str):
            if media:
                yield item
        elif isinstance(item, dict | list):
            yield from _urls(item, key if media else None, depth + 1)


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


async def check_media(urls: Sequence[str], domains: frozenset[str]) -> None:
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
