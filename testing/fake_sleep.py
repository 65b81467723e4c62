"""FAKE ENGINE, vLLM's sleep mode (the dev-mode endpoints a replica started with ``--enable-sleep-mode`` and
``VLLM_SERVER_DEV_MODE=1`` serves): ``POST /sleep?level=1|2``, ``POST /wake_up`` (``?tags=weights`` or
``?tags=kv_cache`` for one part), ``POST /collective_rpc`` with ``{"method": "reload_weights"}``,
``GET /is_sleeping``. Without sleep mode these answer 404, as vLLM without dev mode does. Like vLLM:
level 2 drops the weights, so a wake from it must reload them (``reload_weights``) before the weights are
good; dummy weights (``--load-format dummy``) cannot be reloaded (500, NotImplementedError). A generation
while asleep, or with weights dropped and not reloaded, answers 500 here (vLLM would hang or emit garbage),
so a test sees any wake done wrong. With a memory file it writes the MiB it "holds on the GPU" there after
every change (awake, asleep), for the FAKE nvidia-smi (testing/fake_nvidia_smi.py). :class:`SleepWaits`:
how long each call takes before it answers (a measured card's, testing/gpu_profile.py; none by default);
the state and the memory change when the call ends, as vLLM's copy to the host ends before it frees the
GPU."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class SleepWaits:
    """Seconds each sleep-mode call takes: a sleep per level, a wake from level 1, and a level-2 wake's
    three calls (``wake_up?tags=weights``, ``reload_weights``, ``wake_up?tags=kv_cache``)."""

    sleep1_s: float = 0.0
    sleep2_s: float = 0.0
    wake1_s: float = 0.0
    weights_s: float = 0.0
    reload_s: float = 0.0
    kv_s: float = 0.0


@dataclass(frozen=True)
class SleepConfig:
    enabled: bool = False
    dummy_weights: bool = False
    memory_file: str = ""
    awake_mib: int = 10240
    asleep_mib: int = 1024
    calls_file: str = ""
    """Append every sleep-mode call (``METHOD path``) here, when set."""
    asleep2_mib: int = 0
    """The MiB held asleep at level 2 (0: ``asleep_mib``)."""
    waits: SleepWaits = field(default_factory=SleepWaits)


@dataclass
class FakeSleep:
    """One fake replica's sleep state."""

    cfg: SleepConfig
    level: int = 0
    """0: awake; 1 or 2: the level it sleeps at."""
    weights: bool = True
    kv_cache: bool = True
    weights_valid: bool = True
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.write_memory()

    def write_memory(self) -> None:
        if self.cfg.memory_file:
            mib = self.cfg.awake_mib if self.weights and self.kv_cache else self.cfg.asleep_mib
            if self.level == 2 and not (self.weights and self.kv_cache) and self.cfg.asleep2_mib:
                mib = self.cfg.asleep2_mib
            with open(self.cfg.memory_file, "w") as f:
                devices = os.environ.get("CUDA_VISIBLE_DEVICES") or "0"
                f.write(f"{os.getpid()} {mib} {devices}\n")

    def handles(self, path: str) -> bool:
        return urlsplit(path).path in ("/sleep", "/wake_up", "/collective_rpc", "/is_sleeping")

    def serving_error(self) -> str:
        """Why a generation cannot be served now ('' when it can)."""
        if self.level or not (self.weights and self.kv_cache):
            return "the engine is sleeping"
        if not self.weights_valid:
            return "the weights were dropped at sleep level 2 and not reloaded"
        return ""

    def wait_s(self, path: str, body: bytes) -> float:
        """How long the sleep-mode call ``path`` takes in this state (:class:`SleepWaits`)."""
        w, parts = self.cfg.waits, urlsplit(path)
        if not self.cfg.enabled:
            return 0.0
        tags = parse_qs(parts.query).get("tags", ["weights", "kv_cache"])
        if parts.path == "/sleep":
            return w.sleep2_s if parse_qs(parts.query).get("level", ["1"])[0] == "2" else w.sleep1_s
        if parts.path == "/wake_up" and self.level == 1:
            return w.wake1_s
        if parts.path == "/wake_up" and self.level == 2:
            return w.weights_s * ("weights" in tags) + w.kv_s * ("kv_cache" in tags)
        if parts.path == "/collective_rpc" and b"reload_weights" in body:
            return w.reload_s
        return 0.0

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """(status, JSON body) of one sleep-mode call."""
        if not self.cfg.enabled:
            return 404, b'{"detail":"Not Found"}'
        parts = urlsplit(path)
        query = parse_qs(parts.query)
        self.calls.append(f"{method} {path}")
        if self.cfg.calls_file:
            with open(self.cfg.calls_file, "a") as f:
                f.write(f"{method} {path} {body.decode(errors='replace')}\n")
        if parts.path == "/is_sleeping":
            return 200, json.dumps({"is_sleeping": bool(self.level)}).encode()
        if parts.path == "/sleep":
            return self.sleep(int(query.get("level", ["1"])[0]))
        if parts.path == "/wake_up":
            return self.wake(query.get("tags", ["weights", "kv_cache"]))
        return self.rpc(json.loads(body or b"{}"))

    def sleep(self, level: int) -> tuple[int, bytes]:
        if level not in (1, 2):
            return 400, b'{"error":"level must be 1 or 2"}'
        self.level, self.weights, self.kv_cache = level, False, False
        if level == 2:
            self.weights_valid = False
        self.write_memory()
        return 200, b""

    def wake(self, tags: list[str]) -> tuple[int, bytes]:
        self.weights = self.weights or "weights" in tags
        self.kv_cache = self.kv_cache or "kv_cache" in tags
        if self.weights and self.kv_cache:
            self.level = 0
        self.write_memory()
        return 200, b""

    def rpc(self, req: dict[str, object]) -> tuple[int, bytes]:
        if req.get("method") != "reload_weights":
            return 400, b'{"error":"unknown method"}'
        if self.cfg.dummy_weights:
            msg = "NotImplementedError: Model reloading with `dummy` format"
            return 500, json.dumps({"error": msg}).encode()
        if not self.weights:
            return 500, b'{"error":"wake the weights first"}'
        self.weights_valid = True
        return 200, json.dumps({"results": [None]}).encode()
