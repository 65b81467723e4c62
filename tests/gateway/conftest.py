"""Fixtures every gateway test folder shares: a fresh Redis key prefix per test (on the session's real
Redis, tests/conftest.py) and an HTTP client for a gateway under test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client
