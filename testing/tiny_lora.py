"""Writes a tiny LoRA adapter for a Llama-architecture model (SmolLM2) in PEFT's on-disk format, without
PEFT: ``adapter_config.json`` plus ``adapter_model.safetensors`` with rank-``r`` A/B matrices for
q_proj and v_proj of every layer. B is small random noise, so the adapter changes the output a little;
what the tests need is that vLLM loads it and serves it under its own name."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def write_tiny_lora(base: Path, out: Path, rank: int = 8, seed: int = 0) -> Path:
    cfg = json.loads((base / "config.json").read_text())
    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    head_dim = cfg.get("head_dim") or hidden // cfg["num_attention_heads"]
    outs = {"q_proj": cfg["num_attention_heads"] * head_dim, "v_proj": cfg["num_key_value_heads"] * head_dim}
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for i in range(layers):
        for proj, width in outs.items():
            prefix = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=gen) * 0.01
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(width, rank, generator=gen) * 0.01
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": sorted(outs),
        "base_model_name_or_path": str(base),
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=1))
    return out


if __name__ == "__main__":
    import sys

    print(write_tiny_lora(Path(sys.argv[1]), Path(sys.argv[2])))
