"""The supply chain's records: the license inventory and the CycloneDX SBOM of the installed environment."""
