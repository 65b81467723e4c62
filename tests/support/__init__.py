"""Helpers that start real servers for the tests (Redis, the FAKE ENGINE, gateways)."""
