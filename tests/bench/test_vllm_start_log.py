"""The phases of vLLM starts read from a replica's log (bench/vllm_start_log.py)."""

from __future__ import annotations

from bench.vllm_start_log import starts

TWO_STARTS = """Triton is installed, but doesn't include CPU backend. Disabling Triton.
(APIServer pid=10) INFO 12-05 16:50:03 [api_utils.py:347]   model   /m
(EngineCore pid=11) INFO 12-05 16:50:20 [core.py:133] Initializing a V1 LLM engine
(VllmWorker-0 pid=12) WARNING 12-05 16:50:26 [vllm.py:725] Model Runner V2 requires Triton
(Worker pid=12) INFO 12-05 16:50:27 [parallel_state.py:1906] world_size=1 rank=0
(Worker pid=12) INFO 12-05 16:50:28 [default_loader.py:501] Loading weights took 0.61 seconds
(EngineCore pid=11) INFO 12-05 16:50:30 [core.py:402] init engine (profile, ...) took 0.59 s
(APIServer pid=10) INFO 12-05 16:50:34 [entry.py:140] Starting vLLM server on http://127.0.0.1:18102
(APIServer pid=10) INFO 12-05 16:51:00 [launcher.py:1] Shutting down
(APIServer pid=20) INFO 12-05 16:52:00 [api_utils.py:347]   model   /m
(EngineCore pid=21) INFO 12-05 16:52:06 [core.py:133] Initializing a V1 LLM engine
"""


def test_each_start_has_its_phases_and_a_new_api_server_pid_begins_the_next() -> None:
    first, second = starts(TWO_STARTS, 2026)
    assert first.phases() == {
        "api_s": 17.0, "engine_s": 7.0, "to_weights_s": 1.0, "weights_s": 0.61, "init_s": 2.0,
        "serve_s": 4.0, "logged_s": 31.0,
    }  # fmt: skip
    assert second.api_pid == "20"
    assert second.phases()["api_s"] == 6.0 and second.phases()["logged_s"] is None  # not served yet
