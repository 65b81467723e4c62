"""The thread that renews this gateway's admission presence stamps (see :mod:`gateway.admission.liveness`).

It has its own synchronous Redis client (``llmgw_contract.redis_url.connect_sync``: one server, Sentinel or
Cluster; built by the thread on first use and again after a failure to build, since a cluster client
connects at once), so a busy or stalled event loop does not delay it, and it renews only while the loop made
progress lately, so a hung loop's slots still come back. One stamp script per model (each in the model's
slot), naming this process (the admission's instance, ``<gateway id>/<boot nonce>``). Its owner (the
admission, started and stopped by the gateway's lifespan) starts and joins it. A failed renewal is counted
each time and logged once per run of failures (and when it ends); an unexpected error is logged with its
traceback and counted, and the thread goes on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable

import redis
from redis.commands.core import Script

from gateway.admission.liveness import PROGRESS_EVERY_S, LoopProgress, StampTiming, Streak
from gateway.admission.queue_scripts import script_source
from gateway.periodic import Background
from llmgw_contract.redis_keys import RedisKeys
from llmgw_contract.redis_url import REDIS_DOWN

log = logging.getLogger("llmgw.admission")
JOIN_S = 5.0


class StampRenewer:
    def __init__(
        self,
        connect: Callable[[], redis.Redis],
        keys: RedisKeys,
        instance: str,
        timing: StampTiming,
        failed: Callable[[str], None] = lambda task: None,
    ) -> None:
        self.connect, self.keys, self.instance, self.timing = connect, keys, instance, timing
        self.failed = failed
        self.progress = LoopProgress(timing.stall_s, time.monotonic())
        self.renewals = 0  # stamps written, for tests and the benchmark
        self._client: redis.Redis | None = None
        self._script: Script | None = None
        self._models: tuple[str, ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._streak, self._stalled = Streak(), False

    def watch(self, models: Iterable[str]) -> None:
        """Renew the stamps of these models from now on (the loop replaces the tuple; the thread reads it)."""
        self._models = tuple(models)

    async def bump(self) -> None:
        """The event loop made progress (a step of the owner's background, every ``PROGRESS_EVERY_S``)."""
        self.progress.bump(time.monotonic())

    def start(self, background: Background) -> None:
        """The progress step on the owner's ``background`` (the lifespan's), and the thread."""
        self.progress.bump(time.monotonic())
        background.start(PROGRESS_EVERY_S, self.bump, "loop_progress")
        self._thread = threading.Thread(target=self._run, name=f"presence-{self.instance}", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        await asyncio.to_thread(self.stop)

    def stop(self) -> None:
        """Stop and join the thread (blocking: :meth:`close` runs it off the event loop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_S)
            if self._thread.is_alive():
                log.error("presence renewal thread did not stop within %.0f s", JOIN_S)
                return
        if self._client is not None:
            self._client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # never dies silently: logged with its traceback, counted, goes on
                log.exception("presence renewal failed unexpectedly: logged and counted, the thread goes on")
                self.failed("presence_renewal")
            self._stop.wait(self.timing.renew_every_s)

    def step(self) -> None:
        """One renewal of every watched model's stamp, if the event loop made progress lately."""
        now = time.monotonic()
        if not self.progress.renews(now):
            if not self._stalled:
                stalled_for = self.progress.stalled_for(now)
                log.warning("event loop stalled for %.1f s: presence stamps no longer renewed", stalled_for)
            self._stalled = True
            return
        if self._stalled:
            log.warning("event loop makes progress again: presence stamps renewed")
            self._stalled = False
        for model in self._models:
            self._renew(model)

    def _renew(self, model: str) -> None:
        try:
            self._stamp_script()(keys=[self.keys.alive(model)], args=[self.instance, self.timing.stamp_ms])
        except REDIS_DOWN as exc:
            self.failed("presence_renewal")
            if self._streak.failed():
                log.warning("model=%s presence stamp not renewed (%s); counting until it is", model, exc)
            return
        self.renewals += 1
        if ended := self._streak.succeeded():
            log.warning("model=%s presence stamps renewed again after %d failures", model, ended)

    def _stamp_script(self) -> Script:
        if self._script is None:
            self._client = self.connect()
            self._script = self._client.register_script(script_source("stamp"))
        return self._script
