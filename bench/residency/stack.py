"""One arm of the live residency replay (:mod:`bench.residency.live`): a real supervisor
(``testing.fake_workers``: ``llmgw-workers`` as shipped, each replica the FAKE GPU ENGINE taught the lent
H200, ``--profile h200``) on one FAKE H200 (the FAKE nvidia-smi on its PATH), and a real gateway in this
process, both on a shared real Redis under the arm's own prefix. The states over time are read from the
device itself: each engine's memory file (awake, level 1 and level 2 hold different measured MiB; no live
process: stopped) and, while the registry says a replica is starting, waking or draining, ``->moving``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import yaml

from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import ReplicaRecord, ReplicaState, read_registry
from testing.fake_nvidia_smi import fake_gpu_env
from testing.gateway import serve_gateway
from testing.gpu_profile import h200_7b
from testing.procs import Proc, free_port, free_port_run, spawn
from workers.ondemand.autopilot.h200 import CARD_BYTES, MIB
from workers.planner import DEFAULT_RESERVE_BYTES

LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "torch_dtype": "bfloat16",
    "max_position_embeddings": 4096,
}  # fmt: skip
"""The measured model's shape: the supervisor sizes level 1's host RAM from it (the weights' bytes)."""
MOVING = (ReplicaState.STARTING, ReplicaState.WAKING, ReplicaState.DRAINING)


@dataclass(frozen=True, slots=True)
class ArmSpec:
    name: str
    models: list[str]
    on_demand: bool
    autopilot: bool
    budget: float
    idle_timeout_s: float
    """Real seconds (the trace's, times the time scale)."""
    time_scale: float
    tokens: int
    delay_ms: float
    host_ram_gib: float


@dataclass(slots=True)
class Seen:
    """A served request as the plot reads it (:func:`bench.residency.plot.plot`)."""

    model: str
    arrived: float


@dataclass(slots=True)
class Observed:
    """What the sampler saw: per model its label over time, in trace seconds (the plot's timeline)."""

    slots: dict[str, str] = field(default_factory=dict)
    timeline: list[tuple[float, str, str]] = field(default_factory=list)
    served: list[Seen] = field(default_factory=list)

    def note(self, t: float, model: str, label: str) -> None:
        if self.slots.get(model) != label:
            self.slots[model] = label
            self.timeline.append((t, model, label))


def fleet_text(spec: ArmSpec, tmp: Path, base_port: int) -> str:
    """The arm's fleet: every model on device 0, the taught engine's flags as its extra arguments."""
    models = []
    for name in spec.models:
        folder = tmp / "models" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(LLAMA2_7B))
        extra = [
            "--profile",
            "h200",
            "--time-scale",
            str(spec.time_scale),
            "--delay-ms",
            f"{spec.delay_ms:.3f}",
        ]
        m: dict[str, Any] = {
            "name": name, "source": {"path": str(folder)}, "budget": {"gpu_memory_utilization": spec.budget},
            "placement": {"devices": [0]}, "engine": {"extra_args": extra}, "concurrency": 16,
        }  # fmt: skip
        if spec.on_demand:
            m.update(activation="on_demand", idle_timeout_s=spec.idle_timeout_s, wake_timeout_s=600)
        models.append(m)
    defaults = {"base_port": base_port, "device": "gpu", "sleep_host_ram_gib": spec.host_ram_gib,
                "autopilot": spec.autopilot}  # fmt: skip
    return yaml.safe_dump({"defaults": defaults, "models": models})


def start_supervisor(tmp: Path, fleet: Path, redis_url: str, prefix: str) -> Proc:
    env = {**fake_gpu_env(tmp), "LLMGW_FAKE_GPU": "1"}
    port = free_port()
    argv = [sys.executable, "-m", "testing.fake_workers", "--fleet", str(fleet), "--redis-url", redis_url,
            "--redis-prefix", prefix, "--log-dir", str(tmp / "logs"), "--state-file", str(tmp / "state.json"),
            "--metrics-port", str(port), "--models-dir", str(tmp / "models"), "--devices", "1"]  # fmt: skip
    return spawn(argv, port, tmp / "supervisor.log", env)


def memory_label(mib: int) -> str:
    """The state a taught engine's held MiB tells (its measured MiB per state)."""
    p = h200_7b()
    return {p.asleep1_mib: "asleep1", p.asleep2_mib: "asleep2"}.get(mib, "awake")


def device_states(mem_dir: Path) -> dict[str, str]:
    """Per model name, the state its engine holds on the fake card (absent: stopped)."""
    out: dict[str, str] = {}
    for f in mem_dir.iterdir():
        try:
            pid, mib = (int(x) for x in f.read_text().split()[:2])
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"--model" in argv:
            out[argv[argv.index(b"--model") + 1].decode()] = memory_label(mib)
    return out


Held = Callable[[list[ReplicaRecord]], Awaitable[dict[str, str]]]
"""Per model name, the state it holds now (awake, asleep1, asleep2; absent: stopped), given the registry's
records: read from the fake card's memory files here (:func:`device_states`), from the registry and the
supervisor's log on a GPU (:mod:`bench.residency.gpu`)."""


async def sample(
    obs: Observed, models: list[str], scale: float, redis: aioredis.Redis, keys: RedisKeys, t0: list[float],
    held: Held,
) -> None:  # fmt: skip
    """Note each model's label every 50 ms, in trace seconds since ``t0[0]`` (``x->``: a replica starting,
    waking or draining)."""
    while True:
        records = await read_registry(redis, keys)
        holds = await held(records)
        moving = {r.model for r in records if r.state in MOVING}
        t = (time.perf_counter() - t0[0]) / scale
        for m in models:
            label = holds.get(m, "stopped")
            obs.note(t, m, f"{label}->" if m in moving else label)
        await asyncio.sleep(0.05)


@dataclass(slots=True)
class Running:
    url: str
    obs: Observed
    t0: list[float]
    """The trace's start (perf_counter), set by the replay; the sampler's clock."""
    supervisor_log: Path


@contextlib.asynccontextmanager
async def arm_stack(spec: ArmSpec, tmp: Path, redis_url: str) -> AsyncIterator[Running]:
    """The supervisor, a gateway and the state sampler of one arm, torn down on exit."""
    prefix = f"res{uuid.uuid4().hex[:6]}"
    text = fleet_text(spec, tmp, free_port_run(len(spec.models)))  # below the ephemeral ports
    (tmp / "fleet.yaml").write_text(text)
    sup = start_supervisor(tmp, tmp / "fleet.yaml", redis_url, prefix)
    redis = aioredis.Redis.from_url(redis_url)
    obs, t0 = Observed(), [time.perf_counter()]
    mem_dir = tmp / "gpu-mem"

    async def held(records: list[ReplicaRecord]) -> dict[str, str]:
        return await asyncio.to_thread(device_states, mem_dir)

    keys = RedisKeys(prefix)
    sampler = asyncio.create_task(sample(obs, spec.models, spec.time_scale, redis, keys, t0, held))
    try:
        async with serve_gateway(tmp, text, redis_url, prefix) as url:
            yield Running(url, obs, t0, tmp / "supervisor.log")
        print(f"[{spec.name}] gateway stopped", flush=True)
    finally:
        sampler.cancel()
        if not (await asyncio.wait({sampler}, timeout=SAMPLER_END_S))[0]:
            print(f"[{spec.name}] the state sampler did not end within {SAMPLER_END_S:g} s of its cancel: "
                  "left behind", flush=True)  # fmt: skip
        elif not sampler.cancelled() and sampler.exception() is not None:
            print(f"[{spec.name}] the state sampler had failed: {sampler.exception()!r}", flush=True)
        print(f"[{spec.name}] stopping the supervisor", flush=True)
        await asyncio.to_thread(sup.stop)
        await redis.aclose()


SAMPLER_END_S = 10.0
"""How long an arm's teardown waits for its state sampler to end once cancelled."""


def all_awake_budget(n: int) -> float:
    """The largest budget (thousandths) at which n taught engines start on the card one after the other:
    the last one's budget plus the supervisor's reserve must fit beside n - 1 awake ones (budget plus the
    measured overhead each)."""
    overhead = h200_7b().overhead_mib * MIB
    room = CARD_BYTES - (n - 1) * overhead - DEFAULT_RESERVE_BYTES
    return math.floor(room / n / CARD_BYTES * 1000) / 1000
