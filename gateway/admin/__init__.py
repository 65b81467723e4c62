"""The admin API (API keys, runtime LoRA adapters) behind the one admin check."""
