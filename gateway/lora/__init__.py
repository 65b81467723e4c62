"""Runtime LoRA adapters: which replica loaded which adapter."""
