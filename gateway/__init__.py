"""The data plane: an async OpenAI-compatible gateway in front of vLLM replicas."""
