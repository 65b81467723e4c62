"""Idempotency keys: a request sent again with the same ``Idempotency-Key`` never runs a second
generation (store.py: the record in Redis; gateway/pipeline/keyed.py: the request path around it)."""
