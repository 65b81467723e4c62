"""The fleet file: one YAML document that declares every model the gateway serves.

The supervisor, the planner, the gateway and the deployment renderers all read this one schema, so
nothing drifts between a laptop and a cluster. Validation errors name the field path and the reason
(see :func:`load_fleet`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from llmgw_contract.scaling import ScalingField, devices_problem

ModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")]
PolicyName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
"""A routing policy's name; the gateway checks it against its one registry (``gateway.routing``)."""
MediaDomain = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")]
"""A host name (lower case) or IPv4 address, as vLLM compares it with a media URL's parsed host."""
NO_MEDIA_DOMAIN = "no-media.invalid"
"""vLLM's media-domain allow-list for a model whose fleet entry names none (the supervisor's and the
rendered deployments' alike): a host under the reserved ``.invalid`` top-level domain (RFC 6761), which
never resolves, so vLLM refuses every media URL before any fetch; an empty list would let vLLM fetch
from every host."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Source(Strict):
    """Where the weights come from: exactly one of package, path or hf."""

    package: str | None = None
    """A Python package that ships a model file; `llmgw-prepare` turns it into a folder vLLM serves."""
    path: Path | None = None
    """A local model folder (in a container: a path inside it, under `/models`)."""
    hf: str | None = None
    """A Hugging Face model id, read from the cache under `$LLMGW_MODELS_DIR/hf` (offline)."""
    tokenizer: str | None = None
    """A tokenizer to use instead of the model's own (a folder or a Hugging Face id)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [k for k in ("package", "path", "hf") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of package, path, hf (got {given or 'none'})")
        return self


class Engine(Strict):
    """vLLM engine arguments for each replica of the model."""

    max_model_len: Annotated[int, Field(gt=0)] | None = None
    """The longest context in tokens (vLLM's `--max-model-len`); unset: the model's own."""
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    """The weights' and activations' data type (vLLM's `--dtype`)."""
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    """GPUs per replica (vLLM's `--tensor-parallel-size`); a replica takes this many devices."""
    enforce_eager: bool = False
    """No CUDA graphs / torch.compile (vLLM's `--enforce-eager`): faster start, slower decode."""
    load_format: str | None = None
    """vLLM's `--load-format`, e.g. `dummy` (random weights, for benchmarks)."""
    tokenizer_mode: str | None = None
    """vLLM's `--tokenizer-mode` (e.g. `mistral`)."""
    tool_call_parser: str | None = None
    """vLLM's `--tool-call-parser` (e.g. `hermes`); switches on automatic tool choice."""
    chat_template: str | None = Field(default=None, description="a file path, or the Jinja template itself")
    runner: Literal["generate", "pooling"] = "generate"
    """`generate` (chat and completions) or `pooling` (embeddings, rerank, score, classify)."""
    lora_modules: dict[str, str] = Field(default_factory=dict)
    """LoRA adapters loaded with every replica: adapter name -> path; each name is routable."""
    runtime_lora: bool = Field(
        default=False, description="let the gateway's admin API load and unload LoRA adapters at run time"
    )
    responses_store: bool = Field(
        default=False,
        description="vLLM keeps Responses-API responses for follow-ups, in memory, unbounded",
    )
    allowed_media_domains: list[MediaDomain] = Field(default_factory=list)
    """The only hosts whose media URLs (image, audio, video) vLLM fetches (vLLM's `--allowed-media-domains`,
    an exact host match; `data:` URLs are inline and always allowed). Empty: deny-all; the supervisor and
    the rendered deployments (compose, Kubernetes) pass `no-media.invalid`, a reserved host that never
    resolves, so vLLM refuses every media URL with a clear error before any fetch (the Kubernetes egress
    policy, DNS and the model store only, would block one too)."""
    extra_args: list[str] = Field(default_factory=list)
    """Any other vLLM flag, appended last to the command line."""


class Budget(Strict):
    """Memory budget of one replica: a GPU fraction, or KV-cache GiB on a CPU.

    ``gpu_memory_utilization`` is a fraction, ``auto`` (the planner's budget for the device, taken at start
    by the supervisor and written by ``llmgw-render``), or absent (vLLM's own default).
    """

    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | Literal["auto"] | None = None
    """GPU: the share of each of the replica's GPUs vLLM may take (`--gpu-memory-utilization`); `auto`:
    the planner's budget, taken at start; unset: vLLM's default (compose splits 0.9 on a shared GPU)."""
    kv_cache_gib: Annotated[float, Field(gt=0)] | None = None
    """CPU: the replica's KV cache in GiB (`VLLM_CPU_KVCACHE_SPACE`)."""
    min_gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.1
    """The floor of the out-of-memory back-off: a start that fails for lack of memory is retried 0.05
    lower, down to this."""

    @property
    def auto(self) -> bool:
        return self.gpu_memory_utilization == "auto"

    @property
    def fixed_gpu_memory_utilization(self) -> float | None:
        """The fraction the fleet file fixes; None when it is ``auto`` or left to vLLM."""
        value = self.gpu_memory_utilization
        return None if value == "auto" else value


class Placement(Strict):
    """Which device (GPU index or CPU core) each replica is bound to, in order."""

    devices: list[int] = Field(default_factory=list)
    """GPU indices (or CPU cores); replica r takes devices[r*tp : r*tp+tp], wrapping around; empty: round
    robin."""


class SleepMode(Strict):
    """vLLM's GPU sleep mode for an on-demand model (the GPU path only; on a CPU sleeping stops the
    process). Level 1 copies the weights to host RAM (slow to enter, about 10 s for 13 GiB; wakes in about
    0.3 s); level 2 drops them (enters at once; wakes by reloading them from disk, about 2.5 s for 13 GiB).
    ``auto`` (the default): level 1 while the model's weights fit in ``defaults.sleep_host_ram_gib`` beside
    the other level-1 sleepers of the host, else level 2 (else stopped, for weights that cannot be
    reloaded: ``engine.load_format: dummy``)."""

    level: Literal[1, 2, "auto"] = "auto"
    """1 (weights to host RAM), 2 (weights dropped) or `auto`."""


class ExternalEndpoint(Strict):
    """A server run elsewhere (a model's ``endpoints:``): routed to and health-checked, never supervised.
    It gets its own credential, sent as ``Authorization: Bearer``, never the workers' key: named by an
    environment variable (``api_key_env``) or a file (``api_key_file``), never written here; or
    ``auth: none`` for a server that takes no key."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    """The server's base URL (http or https)."""
    api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    """The environment variable (of the gateway) that holds this server's key."""
    api_key_file: Path | None = None
    """The file that holds this server's key (a mounted secret)."""
    auth: Literal["bearer", "none"] = "bearer"
    """``bearer``: the key above as ``Authorization: Bearer``; ``none``: a server that takes no key."""

    @model_validator(mode="before")
    @classmethod
    def _not_a_bare_url(cls, value: object) -> object:
        if isinstance(value, str):
            raise ValueError(
                f"endpoint {value} has no credential setting: give {{url: {value}, api_key_env: NAME}} "
                f"or {{url: {value}, api_key_file: PATH}}, or {{url: {value}, auth: none}}"
            )
        return value

    @model_validator(mode="after")
    def _one_credential(self) -> ExternalEndpoint:
        given = [k for k in ("api_key_env", "api_key_file") if getattr(self, k) is not None]
        if self.auth == "none" and given:
            raise ValueError(f"auth: none takes no key (got {', '.join(given)})")
        if self.auth == "bearer" and len(given) != 1:
            raise ValueError(
                f"endpoint {self.url} needs its own credential: api_key_env or api_key_file, or auth: none"
                + (f" (got both {', '.join(given)})" if given else "")
            )
        return self


class Model(Strict):
    name: ModelName
    """The public name clients send as `model` (also vLLM's `--served-model-name`)."""
    aliases: list[ModelName] = Field(default_factory=list)
    """More public names for the same replicas."""
    source: Source | None = None
    """Where the weights come from (supervised replicas); give either this or `endpoints`."""
    endpoints: list[ExternalEndpoint] = Field(default_factory=list)
    """Servers run elsewhere (an existing vLLM, a Kubernetes Service): routed to and health-checked, never
    supervised; each names its own credential (``api_key_env``, ``api_key_file``) or ``auth: none``."""
    replicas: Annotated[int, Field(ge=0, le=64)] = 1
    """Replicas the supervisor runs (Kubernetes, no `scaling`: the minimum); with `scaling`: the first."""
    engine: Engine = Field(default_factory=Engine)
    """vLLM engine arguments of each replica."""
    budget: Budget = Field(default_factory=Budget)
    """The memory budget of each replica."""
    placement: Placement = Field(default_factory=Placement)
    """The devices the replicas are bound to."""
    concurrency: Annotated[int, Field(ge=1, le=4096)] = 8
    """Requests one replica runs at once: the admission capacity and the autoscaling target; vLLM's
    `--max-num-seqs` (twice it for a model that migrates and has several replicas: room for a failed
    peer's continuations)."""
    policy: PolicyName = "prefix_affinity"
    """The routing policy: `round_robin`, `least_inflight`, `power_of_two`, `session` or `prefix_affinity`."""
    kv_index: Literal["approximate", "exact"] = "approximate"
    """What the shared prefix index knows of this model's replicas: `approximate` (the gateways' placements,
    aged by an LRU sized from a bytes-per-token estimate) or `exact` (vLLM publishes its KV events, the
    replica's managing agent writes what each cache holds; falls back to approximate while events are lost).
    docs/gateway/prefix-index.md."""
    epsilon: Annotated[float, Field(ge=0)] | None = None
    """Prefix affinity's balance bound ε; unset: the gateway's `LLMGW_PREFIX_EPSILON`."""
    max_queue: Annotated[int, Field(ge=0)] = 256
    """Longest admission queue for the model; past it: 429 `queue_full` with Retry-After."""
    max_queue_wait_s: Annotated[float, Field(gt=0)] = 30.0
    """Counts once the model is awake: an on-demand model's wake has its own ``wake_timeout_s``."""
    stream_grace_s: Annotated[float, Field(ge=0)] = 30.0
    """How long a stream with an ``Idempotency-Key`` runs on once its client left, for it to come back (any
    gateway; a keyed non-streamed request runs to its answer); then cancelled. ``0``: cancelled at once."""
    activation: Literal["always", "on_demand"] = "always"
    """``always``: started with the fleet; ``on_demand``: asleep until a request waits for it."""
    idle_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    """An awake on-demand model with nothing in flight or queued this long is put to sleep."""
    wake_timeout_s: Annotated[float, Field(gt=0)] = 120.0
    """A request waits this long for an on-demand model to wake; then 503 with Retry-After."""
    priority: Annotated[int, Field(ge=0, le=100)] = 50
    """To make room for a wake, idle models of lower or equal priority are put to sleep (LRU first)."""
    sleep: SleepMode = Field(default_factory=SleepMode)
    """vLLM sleep mode of an on-demand model on a GPU."""
    migration: bool | None = None
    """A generation whose replica fails mid-stream continues, token-exact, on another replica
    (docs/gateway/migration.md); unset: on for generation models."""
    migration_attempts: Annotated[int, Field(ge=1, le=10)] = 2
    """How many times one request may move (within its deadline); then the SSE error event."""
    scaling: ScalingField = None
    """Replicas that follow demand (min, max, target per replica); unset: `replicas`, fixed."""

    @model_validator(mode="after")
    def _sleep_level_can_wake(self) -> Model:
        if self.sleep.level == 2 and self.engine.load_format == "dummy":
            raise ValueError(
                "sleep.level: 2 drops the weights and reloads them from disk on wake, which vLLM cannot "
                "do for engine.load_format dummy (NotImplementedError): use level 1 or auto"
            )
        return self

    @model_validator(mode="after")
    def _source_or_endpoints(self) -> Model:
        if (self.source is None) == (not self.endpoints):
            raise ValueError("give either source (supervised replicas) or endpoints (servers run elsewhere)")
        if self.on_demand and not self.managed:
            raise ValueError("activation on_demand needs a source: only supervised replicas can be woken")
        return self

    @model_validator(mode="after")
    def _placement_covers_tensor_parallel(self) -> Model:
        problem = devices_problem(self.placement.devices, self.engine.tensor_parallel_size, self.replicas)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def on_demand(self) -> bool:
        """True when the model sleeps until a request needs it."""
        return self.activation == "on_demand"

    @property
    def managed(self) -> bool:
        """True when the supervisor runs this model's replicas itself."""
        return self.source is not None

    @property
    def public_names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases, *self.engine.lora_modules)

    @property
    def kind(self) -> Literal["chat", "embedding"]:
        return "embedding" if self.engine.runner == "pooling" else "chat"

    @property
    def migrates(self) -> bool:
        """True when a broken generation of this model continues on another replica."""
        return self.migration if self.migration is not None else self.kind == "chat"


class Defaults(Strict):
    base_port: Annotated[int, Field(ge=1024, le=65000)] = 8100
    """Replicas get consecutive ports from here (the lowest free above it)."""
    host: str = "127.0.0.1"
    """The address vLLM replicas bind to."""
    device: Literal["cpu", "gpu"] = "cpu"
    """`cpu` (budget: `kv_cache_gib`) or `gpu` (budget: `gpu_memory_utilization`)."""
    memory_budget_gib: Annotated[float, Field(gt=0)] | None = None
    """What the awake replicas of one device may take together (the on-demand ledger); None: the host's
    available RAM on a CPU."""
    sleep_host_ram_gib: Annotated[float, Field(ge=0)] = 0.0
    """GPU sleep mode: host RAM the weights of level-1 sleepers may take together (each model's
    ``sleep.level: auto`` picks level 1 while its weights fit beside the others'); 0: auto means level 2."""
    autopilot: bool = True
    """On-demand models follow the residency autopilot (one policy: wakes, room, idle timeout, headroom);
    false: the previous policy (room made when a request waits, least recently used first; idle timeout)."""


class Fleet(Strict):
    defaults: Defaults = Field(default_factory=Defaults)
    """Settings for every model."""
    models: Annotated[list[Model], Field(min_length=1)]
    """Every model the gateway serves (at least one)."""

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[Model]) -> list[Model]:
        seen: dict[str, str] = {}
        for m in models:
            for n in m.public_names:
                if n in seen:
                    raise ValueError(f"name {n!r} of model {m.name!r} is already used by model {seen[n]!r}")
                seen[n] = m.name
        return models

    def names(self) -> dict[str, Model]:
        """Every public name, alias and LoRA adapter, mapped to the model whose replicas serve it."""
        return {n: m for m in self.models for n in m.public_names}

    def model(self, name: str) -> Model:
        return self.names()[name]


class FleetError(ValueError):
    """The fleet file cannot be used; the message names the file, the field path and the reason."""


def _describe(err: ValidationError) -> str:
    """One line per error: the field path (``(top)`` for the file itself) and the reason."""
    return "\n".join(f"  {'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in err.errors())


def parse_fleet(text: str, origin: str = "<fleet>") -> Fleet:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FleetError(f"{origin}: not valid YAML: {exc}") from exc
    try:
        return Fleet.model_validate(data)
    except ValidationError as exc:
        raise FleetError(f"{origin}: invalid fleet file:\n{_describe(exc)}") from exc


def load_fleet(path: Path) -> Fleet:
    try:
        text = path.read_text()
    except OSError as exc:
        raise FleetError(f"{path}: cannot read: {exc.strerror}") from exc
    return parse_fleet(text, str(path))
