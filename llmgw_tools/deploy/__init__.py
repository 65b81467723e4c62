"""Deployment renderers: Kubernetes manifests and compose services, rendered from the fleet file."""
