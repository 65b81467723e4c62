"""The embedded default stack on one machine: Redis, workers, gateway replicas, nginx, Prometheus."""
