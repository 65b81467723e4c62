"""The supervisor's GPU start path, tested without a GPU: the FAKE GPU ENGINE (testing/fake_gpu_engine.py)
fails like vLLM does when its --gpu-memory-utilization is above a limit, a fake memory probe stands in
for nvidia-smi, and Redis is real."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from llmgw_contract.fleet import parse_fleet
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.registry import RegistryTiming, RegistryWriter, ReplicaState
from testing.fake_gpu_engine import fail_text
from testing.poll import until
from testing.procs import free_port
from workers.host.gpu import DeviceMemory
from workers.life.owner import Replica, RestartBackoff, Supervisor, SupervisorOptions, start_groups
from workers.replica.launch import Launch, ReplicaSpec, with_budget
from workers.replica.oom import (
    Oom,
    OomKind,
    StartReport,
    detect_oom,
    largest_fitting_budget,
    needed_bytes,
    next_budget,
)

GIB = 1 << 30
OPTIONS = SupervisorOptions(
    ready_deadline_s=20,
    timing=RegistryTiming(ttl_s=3, drain_grace_s=5),
    backoff=RestartBackoff(base_s=0.2, max_s=1.0),
    max_start_attempts=2,
    gpu_reserve_bytes=2 * GIB,
    free_memory_deadline_s=10,
    free_memory_poll_s=0.05,
)


# --- pure: detection, next budget, report ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("cuda", OomKind.DEVICE), ("free", OomKind.DEVICE), ("kv", OomKind.BUDGET), ("other", None)],
)
def test_detects_vllm_failures(kind: str, expected: OomKind | None) -> None:
    oom = detect_oom("INFO loading weights\n" + fail_text(kind, 0.4))
    assert (oom.kind if oom else None) == expected


def test_detects_the_other_vllm_messages() -> None:
    kv = (
        "ValueError: To serve at least one request with the model's max seq len (4096), (2.00 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (0.50 GiB)."
    )
    sampler = "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests."
    assert detect_oom(kv) == Oom(OomKind.BUDGET, kv)
    assert detect_oom(sampler) == Oom(OomKind.DEVICE, sampler)
    assert detect_oom("RuntimeError: CUDA error: out of memory") is not None
    assert (
        detect_oom("WARNING lowering max_num_seqs may avoid running short of memory\nKeyError: 'x'") is None
    )


def test_reads_vllm_free_memory() -> None:
    oom = detect_oom(fail_text("free", 0.4))
    assert oom is not None and oom.vllm_free_gib == 31.2


def test_next_budget_steps_down_to_the_floor_and_not_for_kv() -> None:
    device = Oom(OomKind.DEVICE, "CUDA out of memory")
    budgets, b = [0.40], next_budget(device, 0.40, 0.30)
    while b is not None:
        budgets.append(b)
        b = next_budget(device, b, 0.30)
    assert budgets == [0.40, 0.35, 0.30]
    assert next_budget(Oom(OomKind.BUDGET, "No available memory"), 0.40, 0.10) is None


def test_needed_and_fitting_budgets() -> None:
    assert needed_bytes(0.3, 100 * GIB, 2 * GIB) == 32 * GIB
    assert largest_fitting_budget(33 * GIB, 100 * GIB, 2 * GIB) == 0.31
    assert largest_fitting_budget(1 * GIB, 100 * GIB, 2 * GIB) == 0.0


def test_report_names_model_budget_free_memory_and_change() -> None:
    free = DeviceMemory(0, 70 * GIB, 30 * GIB, 100 * GIB)
    oom = Oom(OomKind.DEVICE, "torch.OutOfMemoryError: CUDA out of memory.")
    msg = StartReport("llama-0", "llama", 0, (0.40, 0.35, 0.30), 0.30, free, 2 * GIB, oom).message()
    for part in ("model=llama", "gpu_memory_utilization 0.30", "tried 0.40, 0.35, 0.30", "floor 0.30"):
        assert part in msg
    assert "30.0 GiB free of 100.0 GiB" in msg and "other processes held 70.0 GiB" in msg
    assert "Change: what is free holds a budget of at most 0.28" in msg


def test_with_budget_rewrites_every_budget_flag() -> None:
    launch = Launch(["vllm", "--gpu-memory-utilization", "0.400", "--gpu-memory-utilization=0.5"], {"A": "1"})
    assert with_budget(launch, 0.35).argv == [
        "vllm",
        "--gpu-memory-utilization",
        "0.350",
        "--gpu-memory-utilization=0.350",
    ]
    assert with_budget(Launch(["vllm"]), 0.3).argv == ["vllm", "--gpu-memory-utilization", "0.300"]


def test_start_groups_one_per_gpu_and_one_for_cpus(tmp_path: Path) -> None:
    def rep(index: int, kind: str, device: int) -> Replica:
        model = parse_fleet("models:\n - name: m\n   source: {path: /m}\n").models[0]
        return Replica(
            ReplicaSpec(model, index, 9000 + index, (device,), device_kind=kind), Launch(["x"]), tmp_path
        )

    reps = [rep(0, "gpu", 0), rep(1, "gpu", 1), rep(2, "gpu", 0), rep(3, "cpu", 0), rep(4, "cpu", 1)]
    assert [[r.spec.index for r in g] for g in start_groups(reps)] == [[0, 2], [1], [3, 4]]


# --- the supervisor with fake GPU engines ------------------------------------------------------------


class FakeDevice:
    """A 100 GiB GPU: an outside tenant's memory plus budget x total + reserve for each live replica."""

    def __init__(self, tenant_gib: float = 0.0) -> None:
        self.total = 100 * GIB
        self.tenant = int(tenant_gib * GIB)
        self.replicas: list[Replica] = []
        self.reads = 0

    def __call__(self, device: int) -> DeviceMemory:
        self.reads += 1
        live = [r for r in self.replicas if r.process.alive]
        used = self.tenant + sum(needed_bytes(r.budget, self.total, 2 * GIB) for r in live)
        return DeviceMemory(device, used, max(0, self.total - used), self.total)


def gpu_replica(
    tmp: Path,
    budget: float,
    *,
    limit: float,
    floor: float = 0.1,
    error: str = "cuda",
    index: int = 0,
    devices: tuple[int, ...] = (0,),
) -> Replica:
    budget_yaml = f"{{min_gpu_memory_utilization: {floor}}}"
    model = parse_fleet(
        f"models:\n - name: fake\n   source: {{path: /m}}\n   budget: {budget_yaml}\n"
    ).models[0]
    spec = ReplicaSpec(model, index, free_port(), devices, device_kind="gpu", gpu_memory_utilization=budget)
    argv = [sys.executable, "-m", "testing.fake_gpu_engine", "--port", str(spec.port), "--model", "fake"]
    env = {
        "FAKE_GPU_MAX_BUDGET": str(limit),
        "FAKE_GPU_ERROR": error,
        "FAKE_GPU_STARTS": str(tmp / f"starts-{index}.txt"),
    }
    return Replica(spec, Launch([*argv, "--gpu-memory-utilization", f"{budget:.3f}"], env), tmp)


def starts(tmp: Path, index: int = 0) -> list[str]:
    path = tmp / f"starts-{index}.txt"
    return path.read_text().split() if path.exists() else []


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.Redis.from_url(redis_url)
    yield r
    await r.aclose()


@pytest.fixture
def keys() -> RedisKeys:
    return RedisKeys(f"oom{uuid.uuid4().hex[:6]}")


def supervisor(
    reps: list[Replica],
    redis: aioredis.Redis,
    keys: RedisKeys,
    client: httpx.AsyncClient,
    probe: FakeDevice,
    options: SupervisorOptions = OPTIONS,
    on_change: Callable[[Replica], None] = lambda r: None,
) -> Supervisor:
    probe.replicas = reps
    registrar = RegistryWriter(redis, keys, options.timing)
    return Supervisor(reps, registrar, client, options, on_change, memory_probe=probe)


async def test_backoff_040_035_030_succeeds(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    rep = gpu_replica(tmp_path, 0.40, limit=0.30, floor=0.25)
    async with httpx.AsyncClient() as client:
        sup = supervisor([rep], redis, keys, client, FakeDevice())
        assert await sup.start_with_retries(rep)
        try:
            assert starts(tmp_path) == ["0.400", "0.350", "0.300"]
            assert rep.state is ReplicaState.READY and rep.spec.gpu_memory_utilization == 0.30
            assert rep.record().budget == "gpu_memory_utilization=0.3"
            assert "retrying at 0.350" in caplog.text and "retrying at 0.300" in caplog.text
            assert rep.failure is None
        finally:
            await rep.process.stop(2)


async def test_below_floor_stops_with_a_report(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    rep = gpu_replica(tmp_path, 0.40, limit=0.20, floor=0.30)
    async with httpx.AsyncClient() as client:
        sup = supervisor([rep], redis, keys, client, FakeDevice(tenant_gib=10))
        assert not await sup.start_with_retries(rep)
    assert starts(tmp_path) == ["0.400", "0.350", "0.300"]  # OOM retries are bounded by the floor alone
    assert rep.failure is not None and not rep.process.alive
    line = next(r.getMessage() for r in caplog.records if "STOPPED" in r.getMessage())
    assert line == rep.failure.message()
    assert "model=fake" in line and "out of memory at gpu_memory_utilization 0.30" in line
    assert "tried 0.40, 0.35, 0.30" in line and "floor 0.30" in line
    assert "gpu:0 had 90.0 GiB free of 100.0 GiB" in line and "other processes held 10.0 GiB" in line
    assert "Change:" in line and "min_gpu_memory_utilization" in line
    assert "CUDA out of memory" in line  # what vLLM said


async def test_non_oom_failures_are_not_backed_off(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    rep = gpu_replica(tmp_path, 0.40, limit=0.0, error="other")
    async with httpx.AsyncClient() as client:
        sup = supervisor([rep], redis, keys, client, FakeDevice())
        assert not await sup.start_with_retries(rep)
    assert starts(tmp_path) == ["0.400", "0.400"]  # max_start_attempts, same budget
    assert "retrying at" not in caplog.text and rep.failure is None
    assert "start 2 failed" in caplog.text and "not supported" in caplog.text


async def test_kv_cache_too_small_is_not_backed_off(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    rep = gpu_replica(tmp_path, 0.40, limit=0.0, error="kv")
    async with httpx.AsyncClient() as client:
        sup = supervisor([rep], redis, keys, client, FakeDevice())
        assert not await sup.start_with_retries(rep)
    assert starts(tmp_path) == ["0.400"]
    assert rep.failure is not None
    msg = rep.failure.message()
    assert "a lower budget cannot help" in msg and "raise budget.gpu_memory_utilization" in msg


async def test_sequential_start_waits_for_free_memory(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "llmgw.workers")
    a = gpu_replica(tmp_path, 0.50, limit=1.0, index=0)
    b = gpu_replica(tmp_path, 0.40, limit=1.0, index=1)
    device = FakeDevice(tenant_gib=60)  # 40 GiB free: a needs 52
    events: list[tuple[str, ReplicaState, float]] = []
    async with httpx.AsyncClient() as client:
        sup = supervisor(
            [a, b],
            redis,
            keys,
            client,
            device,
            on_change=lambda r: events.append((r.spec.id, r.state, time.monotonic())),
        )
        task = asyncio.create_task(sup.run())
        await until(lambda: device.reads >= 5)
        assert events == [] and a.process.proc is None  # held at the gate
        released = time.monotonic()
        device.tenant = 0
        await until(lambda: a.state is ReplicaState.READY and b.state is ReplicaState.READY)
        await sup.drain()
        await task
    # on_change also fires at each spawn (the state file records the process before and after it):
    # the order of states is what counts here, so repeats of a replica's state fold into one.
    moves = [(rid, state) for rid, state, _ in events]
    order = [m for i, m in enumerate(moves) if i == 0 or m != moves[i - 1]][:4]
    assert order == [
        ("fake-0", ReplicaState.STARTING),
        ("fake-0", ReplicaState.READY),
        ("fake-1", ReplicaState.STARTING),
        ("fake-1", ReplicaState.READY),
    ]
    assert events[0][2] >= released
    assert "replica=fake-0 waiting for gpu:0: 40.0 GiB free of 100.0 GiB" in caplog.text
    assert "replica=fake-1 gpu:0 has 48.0 GiB free of 100.0 GiB; budget 0.400 needs 42.0 GiB" in caplog.text


async def test_gate_deadline_stops_with_a_report(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    rep = gpu_replica(tmp_path, 0.50, limit=1.0)
    opts = dataclasses.replace(OPTIONS, free_memory_deadline_s=0.3)
    async with httpx.AsyncClient() as client:
        sup = supervisor([rep], redis, keys, client, FakeDevice(tenant_gib=80), options=opts)
        assert not await sup.start_with_retries(rep)
    assert rep.process.proc is None and starts(tmp_path) == []
    assert rep.failure is not None
    msg = rep.failure.message()
    assert (
        "model=fake" in msg and "NOT STARTED" in msg and "gpu_memory_utilization 0.50 needs 52.0 GiB" in msg
    )
    assert "20.0 GiB free of 100.0 GiB" in msg and "at most 0.18" in msg and "Change:" in msg


async def test_cpu_replicas_skip_the_gate(tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys) -> None:
    rep = gpu_replica(tmp_path, 0.50, limit=1.0)
    rep.spec = ReplicaSpec(rep.spec.model, 0, rep.spec.port, (0,))  # a CPU replica
    device = FakeDevice(tenant_gib=100)
    async with httpx.AsyncClient() as client:
        sup = supervisor([rep], redis, keys, client, device)
        assert await sup.start_with_retries(rep)
        await rep.process.stop(2)
    assert device.reads == 0


# --- several GPUs: the gate reads only the replica's own devices, every one of them -------------------


class FakeDevices(FakeDevice):
    """Several 100 GiB GPUs, each with its own outside tenant; a live replica uses each of its devices."""

    def __init__(self, tenants_gib: dict[int, float]) -> None:
        super().__init__()
        self.tenants = {d: int(t * GIB) for d, t in tenants_gib.items()}
        self.read_devices: list[int] = []

    def __call__(self, device: int) -> DeviceMemory:
        self.reads += 1
        self.read_devices.append(device)
        live = [r for r in self.replicas if r.process.alive and device in r.spec.devices]
        used = self.tenants.get(device, 0) + sum(needed_bytes(r.budget, self.total, 2 * GIB) for r in live)
        return DeviceMemory(device, used, max(0, self.total - used), self.total)


async def test_a_replica_on_gpu_1_never_waits_for_gpu_0(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "llmgw.workers")
    on0 = gpu_replica(tmp_path, 0.40, limit=1.0, index=0, devices=(0,))
    on1 = gpu_replica(tmp_path, 0.40, limit=1.0, index=1, devices=(1,))
    cards = FakeDevices({0: 90})  # GPU 0 has 10 GiB free; GPU 1 is empty
    async with httpx.AsyncClient() as client:
        sup = supervisor([on0, on1], redis, keys, client, cards)
        task = asyncio.create_task(sup.run())
        await until(lambda: on1.state is ReplicaState.READY)
        assert on0.process.proc is None  # still held at GPU 0's gate
        assert "replica=fake-0 waiting for gpu:0: 10.0 GiB free of 100.0 GiB" in caplog.text
        assert "replica=fake-1 gpu:1 has 100.0 GiB free" in caplog.text
        cards.tenants[0] = 0
        await until(lambda: on0.state is ReplicaState.READY)
        await sup.drain()
        await task


async def test_a_tensor_parallel_replica_waits_for_each_of_its_devices(
    tmp_path: Path, redis: aioredis.Redis, keys: RedisKeys
) -> None:
    rep = gpu_replica(tmp_path, 0.50, limit=1.0, devices=(0, 1))
    opts = dataclasses.replace(OPTIONS, free_memory_deadline_s=0.3)
    cards = FakeDevices({1: 80})  # GPU 0 is empty, GPU 1 has 20 GiB free: 52 GiB needed on each
    async with httpx.AsyncClient() as client:
        sup = supervisor([rep], redis, keys, client, cards, options=opts)
        assert not await sup.start_with_retries(rep)
    assert rep.process.proc is None and starts(tmp_path) == []
    assert set(cards.read_devices) == {0, 1}
    assert rep.failure is not None
    msg = rep.failure.message()
    assert "gpu:1" in msg and "20.0 GiB free of 100.0 GiB" in msg and "NOT STARTED" in msg
