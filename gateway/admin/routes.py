"""The admin API, behind the one admin check (``gateway.admin.auth``): API keys (``/admin/keys``) and
LoRA adapters loaded at run time (``/admin/lora``)."""

from __future__ import annotations

from fastapi import FastAPI

from gateway.admin.keys import add_key_routes
from gateway.admin.lora import add_lora_routes
from gateway.state import Gateway


def add_admin_routes(app: FastAPI, gw: Gateway) -> None:
    add_key_routes(app, gw)
    add_lora_routes(app, gw)
