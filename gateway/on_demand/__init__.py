"""On-demand models: wake requests and the wait for a replica to become ready."""
