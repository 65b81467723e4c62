"""Test doubles and the harness, used by tests and benchmarks alike: the FAKE ENGINE (a fast
OpenAI-shaped stand-in for vLLM, named as such), the FAKE GPU ENGINE and FAKE nvidia-smi, fake workers,
and helpers that start real servers (Redis, gateways), find free ports and poll with a deadline."""
