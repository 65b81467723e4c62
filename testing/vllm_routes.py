"""Prints vLLM's own route table as JSON lines ``[methods, path]``: every router its API server can
register (dev mode, runtime LoRA, profiling, fault tolerance, every task, the pooling routers), built
by vLLM's own ``register_api_routers``. Run in its own process: it sets vLLM's environment switches."""

from __future__ import annotations

import argparse
import json
import os
import typing
import warnings


def main() -> None:
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"
    os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    warnings.simplefilter("ignore")
    from fastapi import FastAPI
    from vllm.config import ProfilerConfig
    from vllm.entrypoints.openai.api_server import register_api_routers
    from vllm.entrypoints.pooling.classify.api_router import router as classify
    from vllm.entrypoints.pooling.embed.api_router import router as embed
    from vllm.entrypoints.pooling.pooling.api_router import router as pooling
    from vllm.entrypoints.pooling.scoring.api_router import router as scoring
    from vllm.tasks import SupportedTask

    app = FastAPI()
    profiler = ProfilerConfig(profiler="torch", torch_profiler_dir="/tmp/unused-profiles")
    app.state.args = argparse.Namespace(profiler_config=profiler)
    args = argparse.Namespace(enable_fault_tolerance=True)
    register_api_routers(args, app, typing.get_args(SupportedTask), None)
    for router in (pooling, classify, embed, scoring):  # registered only with a pooling model's config
        app.include_router(router)
    for route in app.routes:
        methods = sorted(getattr(route, "methods", None) or ["GET"])
        print(json.dumps([methods, getattr(route, "path", "")]))


if __name__ == "__main__":
    main()
