"""The request pipeline: ``proxy.py`` walks one request through the seven steps (authenticate, parse,
resolve, admit, pick, forward, finish); intake, watch, forward, relay and settle are its parts."""
