"""The control plane: the fleet file, model preparation, and the vLLM replica supervisor."""
