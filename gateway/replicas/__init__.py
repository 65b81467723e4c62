"""The live view of the replicas: the table of endpoints, discovery from the registry, the health and
load monitor, ejection, the in-flight share between gateways and the fleet file's reload."""
