"""The vLLM command line and environment of one replica, from the fleet file (pure, no I/O)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from llmgw_contract.fleet import NO_MEDIA_DOMAIN, Defaults, Model
from llmgw_contract.kv_endpoints import KvEndpoints
from workers.replica.placement import place_replicas

BUDGET_FLAG = "--gpu-memory-utilization"


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """Where one replica runs: its id, port, device and memory budget."""

    model: Model
    index: int
    port: int
    devices: tuple[int, ...]
    host: str = "127.0.0.1"
    device_kind: str = "cpu"
    gpu_memory_utilization: float | None = None

    @property
    def device(self) -> int:
        """The first of its devices: the one whose memory gates its start."""
        return self.devices[0]

    @property
    def device_list(self) -> str:
        return ",".join(map(str, self.devices))

    @property
    def id(self) -> str:
        return f"{self.model.name}-{self.index}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def budget_label(self) -> str:
        if self.device_kind == "gpu":
            return f"gpu_memory_utilization={self.gpu_memory_utilization}"
        return f"kv_cache_gib={self.model.budget.kv_cache_gib or 1}"


@dataclass(frozen=True, slots=True)
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def engine_args(model: Model) -> list[str]:
    """vLLM's flags from the fleet file's engine section; ``/tokenizer_info`` is always on (read-only: the
    gateway forwards it, lm-eval's remote tokenizer reads it), and so is a media-domain allow-list (the
    fleet's, else deny-all: :data:`~llmgw_contract.fleet.NO_MEDIA_DOMAIN`)."""
    e = model.engine
    args = ["--dtype", e.dtype, "--tensor-parallel-size", str(e.tensor_parallel_size)]
    args.append("--enable-tokenizer-info-endpoint")
    if e.max_model_len:
        args += ["--max-model-len", str(e.max_model_len)]
    if e.enforce_eager:
        args.append("--enforce-eager")
    if e.load_format:
        args += ["--load-format", e.load_format]
    if e.tokenizer_mode:
        args += ["--tokenizer-mode", e.tokenizer_mode]
    if e.chat_template:
        args += ["--chat-template", e.chat_template]
    if e.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", e.tool_call_parser]
    if e.runner == "pooling":
        args += ["--runner", "pooling"]
    else:
        args += ["--max-num-seqs", str(max_num_seqs(model))]
    if e.lora_modules or e.runtime_lora:
        args.append("--enable-lora")
    if e.lora_modules:
        args += ["--lora-modules", *(f"{k}={v}" for k, v in e.lora_modules.items())]
    args += ["--allowed-media-domains", *(e.allowed_media_domains or [NO_MEDIA_DOMAIN])]  # none: deny-all
    return args


def max_num_seqs(model: Model) -> int:
    """vLLM's batch limit: the model's ``concurrency`` (what admission sends a replica), twice that for a
    model that migrates and runs several replicas. The headroom is for continuations: when a replica
    fails, its streams continue on the others at once, beside their own, instead of waiting in vLLM's
    queue until a running stream ends (docs/gateway/migration.md, "Stall")."""
    if model.migrates and model.replicas > 1:
        return 2 * model.concurrency
    return model.concurrency


def feature_env(model: Model) -> dict[str, str]:
    """vLLM features the fleet file turns on per model: the Responses-API store and runtime LoRA loading
    (whose endpoints only the gateway's admin API calls; the gateway never forwards them)."""
    env = {}
    if model.engine.responses_store:
        env["VLLM_ENABLE_RESPONSES_API_STORE"] = "1"
    if model.engine.runtime_lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return env


def source_args(model: Model, weights: Path | str) -> list[str]:
    args = ["--model", str(weights), "--served-model-name", model.name, *model.aliases]
    if model.source is not None and model.source.tokenizer:
        args += ["--tokenizer", model.source.tokenizer]
    return args


NVLINK_MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""Set in every GPU replica's environment: NVLink multicast off for NCCL, torch's symmetric memory and
NVSHMEM (tensor parallelism across cards of one host runs without it)."""


def device_env(spec: ReplicaSpec) -> dict[str, str]:
    """A GPU replica sees exactly its placement's devices (``CUDA_VISIBLE_DEVICES``, which overrides any the
    supervisor itself was started with) and runs with NVLink multicast off; a CPU replica gets its cores
    and KV cache size."""
    if spec.device_kind == "gpu":
        return {"CUDA_VISIBLE_DEVICES": spec.device_list, **NVLINK_MULTICAST_OFF}
    kv = spec.model.budget.kv_cache_gib or 1
    return {
        "VLLM_CPU_KVCACHE_SPACE": f"{kv:g}",
        "VLLM_CPU_OMP_THREADS_BIND": spec.device_list,
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }


def sleep_mode_args(spec: ReplicaSpec) -> tuple[list[str], dict[str, str]]:
    """vLLM's sleep mode for an on-demand model on a GPU: ``--enable-sleep-mode``, and the dev-mode server
    that serves ``/sleep``, ``/wake_up`` and ``/collective_rpc`` (only the supervisor calls them; the
    gateway never forwards them). Nothing elsewhere (vLLM's CPU build has no sleep mode)."""
    if spec.device_kind != "gpu" or not spec.model.on_demand:
        return [], {}
    return ["--enable-sleep-mode"], {"VLLM_SERVER_DEV_MODE": "1"}


LOAD_TRACKING_FLAG = "--enable-server-load-tracking"
"""vLLM's ``/load``: the requests its API server holds, the engine's or not yet (llmgw_contract/drain.py)."""


def build_launch(
    spec: ReplicaSpec,
    weights: Path | str,
    python: str = sys.executable,
    sleep_mode: bool = True,
    kv_events: KvEndpoints | None = None,
) -> Launch:
    """The vLLM command line and environment of one replica; ``sleep_mode=False`` leaves vLLM's sleep mode
    off even for an on-demand GPU model (where no agent of ours will call its endpoints). A model whose
    ``kv_index`` is exact publishes its KV events on ``kv_events`` (default: the supervisor's ipc
    endpoints of its port, :meth:`llmgw_contract.kv_feed.KvEndpoints.for_port`)."""
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", *source_args(spec.model, weights)]
    argv += ["--host", spec.host, "--port", str(spec.port), *engine_args(spec.model)]
    argv += [LOAD_TRACKING_FLAG]  # /load counts requests not in the engine yet: the drain reads it
    if spec.device_kind == "gpu" and spec.gpu_memory_utilization is not None:
        argv += [BUDGET_FLAG, f"{spec.gpu_memory_utilization:.3f}"]
    if spec.model.kv_index == "exact":
        endpoints = kv_events or KvEndpoints.for_port(spec.port)
        argv += ["--kv-events-config", endpoints.engine_config()]
    sleep_argv, sleep_env = sleep_mode_args(spec) if sleep_mode else ([], {})
    argv += sleep_argv
    argv += spec.model.engine.extra_args  # last, so that they override
    if spec.device_kind == "cpu":
        argv = ["taskset", "-c", spec.device_list, *argv]
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", **device_env(spec)}
    env.update(feature_env(spec.model))
    env.update(sleep_env)
    return Launch(argv, env)


def with_budget(launch: Launch, budget: float) -> Launch:
    """The same launch with every ``--gpu-memory-utilization`` set to ``budget`` (appended if absent)."""
    value = f"{budget:.3f}"
    argv, found = list(launch.argv), False
    for i, arg in enumerate(argv):
        if arg == BUDGET_FLAG and i + 1 < len(argv):
            argv[i + 1], found = value, True
        elif arg.startswith(BUDGET_FLAG + "="):
            argv[i], found = f"{BUDGET_FLAG}={value}", True
    return Launch(argv if found else [*argv, BUDGET_FLAG, value], dict(launch.env))


def plan_replicas(models: list[Model], defaults: Defaults, n_devices: int) -> list[ReplicaSpec]:
    """Every managed replica with a port (consecutive from ``base_port``) and its devices
    (:func:`workers.replica.placement.place_replicas` over devices 0 .. n_devices-1)."""
    placed = place_replicas(models, range(max(1, n_devices)))
    managed = [(m, i) for m in models if m.managed for i in range(m.replicas)]
    return [
        ReplicaSpec(m, i, defaults.base_port + n, placed[(m.name, i)], defaults.host, defaults.device,
                    m.budget.fixed_gpu_memory_utilization)
        for n, (m, i) in enumerate(managed)
    ]  # fmt: skip
