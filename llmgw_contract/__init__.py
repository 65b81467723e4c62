"""What the gateway and the workers both rely on, and nothing else: the fleet file schema, the replica
registry (record, Redis key names, timing, publish/read/remove, the registration sidecar), the one parser
of vLLM's metrics text and the one drain. Imports neither ``gateway`` nor ``workers``."""
