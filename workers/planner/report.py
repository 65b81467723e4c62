"""The plan as text a person can check line by line: every number with the arithmetic behind it."""

from __future__ import annotations

from workers.planner import memory as mem
from workers.planner.result import DevicePlan, ModelEstimate, Plan, ReplicaPlan

_HEAD = (
    "replica",
    "budget",
    "from",
    "budget",
    "weights",
    "other",
    "KV",
    "KV tokens",
    "asked",
    "reserve",
    "used",
)
_CONT = " " * 15
_ROW = "  {:<20} {:>6} {:<7} {:>8} {:>8} {:>6} {:>8} {:>10} {:>10} {:>7} {:>8}"


def gib(n: float) -> str:
    return f"{n / mem.GIB:.2f}"


def _header(plan: Plan) -> list[str]:
    devs = ", ".join(f"{d.device}: {gib(d.total_bytes)} GiB" for d in plan.devices) or "none"
    return [
        f"Fleet plan: {len(plan.models)} model(s), {len(plan.replicas)} process(es) on {len(plan.devices)} "
        f"device(s) [{devs}]",
        f"Target: planned budgets plus reserves fill {plan.target:.0%} of each device.",
        f"Reserve: {gib(plan.reserve_bytes)} GiB a process outside its budget (H200: 1.2-2.6 GiB).",
        "vLLM: KV cache = budget x device - weights - in-budget other, in whole 16-token blocks;",
        "      device use = budget x device + reserve.",
        f"In-budget other = {mem.IN_BUDGET_BASE_BYTES // mem.MIB} MiB + max_num_seqs x vocab x "
        f"{mem.LOGITS_BYTES_PER_ELEMENT} B (sampler warm-up logits; fitted on H200 measurements).",
    ]


def _params_line(m: ModelEstimate) -> str:
    p = m.params
    parts = [("embeddings", p.embeddings), ("attention", p.attention), ("mlp", p.mlp), ("norms", p.norms)]
    parts.append(("lm_head" + (" (tied)" if m.shape.tie_word_embeddings else ""), p.lm_head))
    terms = " + ".join(f"{name} {n / 1e9:.3f}" for name, n in parts)
    return f"  parameters   {terms} = {p.total / 1e9:.3f} B"


def _weights_line(m: ModelEstimate) -> str:
    p, q = m.params, m.quantization
    if q is None:
        calc = f"{p.total / 1e9:.3f} B x {m.act_bytes:g} B ({m.weight_dtype})"
    else:
        per = mem.linear_bytes_per_param(q, m.act_bytes)
        calc = (
            f"{p.linear / 1e9:.3f} B linear x {per:.3f} B ({q.method} {q.bits}-bit"
            f"{f', groups of {q.group_size}' if q.group_size else ''}) + {p.unquantized / 1e9:.3f} B x "
            f"{m.act_bytes:g} B ({m.weight_dtype})"
        )
    tp = f", / tp {m.tp} = {gib(m.weight_bytes_per_rank)} GiB per rank" if m.tp > 1 else ""
    return f"  weights      {calc} = {gib(m.weight_bytes)} GiB{tp}"


def _kv_lines(m: ModelEstimate) -> list[str]:
    s = m.shape
    heads = mem.kv_heads_per_rank(s, m.tp)
    per = m.kv_bytes_per_token
    rank = f" per rank (tp {m.tp})" if m.tp > 1 else ""
    return [
        f"  KV / token   2 x {s.num_layers} layers x {heads} kv heads x {s.head_dim} head_dim x "
        f"{m.kv_dtype_bytes:g} B ({m.kv_dtype}) = {per:,} B ({per / 1024:.1f} KiB){rank}",
        f"  asked KV     max_model_len {m.max_model_len:,} x concurrency {m.concurrency} = "
        f"{m.tokens_wanted:,} tokens = {gib(m.kv_bytes_for(m.tokens_wanted))} GiB",
    ]


def _need_lines(m: ModelEstimate, r: ReplicaPlan) -> list[str]:
    seqs = m.seqs_on(r.device_bytes)
    need = r.weight_bytes + r.other_bytes + m.kv_bytes_for(m.tokens_wanted)
    return [
        f"  other        {mem.IN_BUDGET_BASE_BYTES // mem.MIB} MiB + {seqs} seqs x {m.shape.vocab_size:,} "
        f"vocab x {mem.LOGITS_BYTES_PER_ELEMENT} B = {gib(r.other_bytes)} GiB",
        f"  needs        weights + other + asked KV = {gib(need)} GiB -> budget >= {r.min_budget:.3f} of "
        f"{gib(r.device_bytes)} GiB",
        f"{_CONT}(vLLM starts from {r.start_budget:.3f}, where the KV cache holds one max_model_len)",
    ]


def _rule_lines(m: ModelEstimate, r: ReplicaPlan | None) -> list[str]:
    k = m.weight_bits
    rule = mem.rule_of_thumb_gb(m.params.total, k)
    lines = [
        f"  rule         seed documents: memory GB = params B x (2 + 8/k), k = weight bits: "
        f"{m.params.total / 1e9:.2f} x (2 + 8/{k:g}) = {rule:.1f} GB"
    ]
    if r is None:
        return lines
    kv = m.kv_bytes_for(m.tokens_wanted) * m.tp
    ours = (r.weight_bytes + r.other_bytes + r.reserve_bytes) * m.tp + kv
    gap = ours / mem.GB - rule
    return [
        *lines,
        f"{_CONT}this plan: {ours / mem.GB:.1f} GB a replica (weights + other + asked KV + reserve), "
        f"{'more' if gap > 0 else 'less'} by {abs(gap):.1f} GB:",
        f"{_CONT}the rule has no term for the asked KV cache ({kv / mem.GB:.1f} GB here) or the reserve",
    ]


def _model_block(plan: Plan, m: ModelEstimate) -> list[str]:
    first = next((r for r in plan.replicas if r.model == m.name), None)
    lines = [
        f"Model {m.name}",
        f"  shape        {m.shape.describe()}",
        _params_line(m),
        _weights_line(m),
        *_kv_lines(m),
    ]
    if first is not None:
        lines += _need_lines(m, first)
    lines += _rule_lines(m, first)
    return lines


def _replica_row(r: ReplicaPlan) -> str:
    return _ROW.format(
        f"{r.model}#{r.replica}",
        f"{r.gpu_memory_utilization:.3f}",
        r.budget_from,
        gib(r.budget_bytes),
        gib(r.weight_bytes),
        gib(r.other_bytes),
        gib(r.kv_bytes),
        f"{r.kv_tokens:,}",
        f"{r.kv_tokens_wanted:,}",
        gib(r.reserve_bytes),
        gib(r.used_bytes),
    )


def _device_block(plan: Plan, d: DevicePlan) -> list[str]:
    if not d.processes:
        return [f"Device {d.device} ({gib(d.total_bytes)} GiB): no process"]
    head = _ROW.format(*_HEAD)
    rows = [_replica_row(r) for r in plan.replicas if d.device in r.devices]
    verdict = "fits" if d.fits else f"OVER by {gib(d.used_bytes - d.total_bytes)} GiB"
    total = (
        f"  sum {d.budget_sum:.3f} x {gib(d.total_bytes)} + {len(d.processes)} x {gib(plan.reserve_bytes)} "
        f"reserve = {gib(d.used_bytes)} of {gib(d.total_bytes)} GiB ({d.fraction:.1%}): {verdict}"
    )
    return [f"Device {d.device} ({gib(d.total_bytes)} GiB; sizes in GiB)", head, *rows, total]


def render(plan: Plan) -> str:
    lines = _header(plan)
    for m in plan.models:
        lines += ["", *_model_block(plan, m)]
    for d in plan.devices:
        lines += ["", *_device_block(plan, d)]
    if plan.notes:
        lines += ["", "Notes:", *(f"  - {n}" for n in plan.notes)]
    if plan.problems:
        lines += ["", "REFUSED:", *(f"  - {p}" for p in plan.problems)]
    lines += ["", "Verdict: " + ("the fleet fits." if plan.fits else "the fleet does NOT fit.")]
    return "\n".join(lines)
