"""The edge: the ASGI fast path in front of FastAPI, the routes FastAPI serves, the OpenAPI document and
the one-write HTTP/1.1 server protocol."""
