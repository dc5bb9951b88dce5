"""KV-cache bytes per token, greedy decode tokens/s at long context, and the batch a memory budget holds.

An 8-layer model (preset `mini`, max_seq_len raised to the longest context) in five cache layouts: vanilla,
SVFormer, CLA2, GQA (n_kv_head = n_head/2) and GQA + SVFormer. Per context, every variant prefills the same
random prompt, then the variants decode greedily one token at a time, interleaved (each round = one new
token per variant). The largest batch under a fixed byte budget is found by allocating real `KVCache`s and
summing the storage they hold, not from the formula. Targets, SVFormer's claimed saving: KV bytes exactly
(L+1)/(2L) of vanilla's, decode tokens/s at 8192 context >= vanilla's, largest batch at 8192 >= 1.7x.

On CUDA (`run_gpu`) the model is the paper's 82M with bf16 weights and cache, in the same five layouts:
- batch 8 after a 1,024-token prompt: the eager step over the growing cache (what `generate` did before) against
  one CUDA-graph replay of the static step (`GraphedDecodeStep`, what `generate` does on CUDA), interleaved; the
  compiled static step in a graph for vanilla when the budget allows. Target: graph >= 5x eager tokens/s.
- 32,768 tokens of context with the largest batch whose cache fits in the free GPU memory (less a reserve for
  the step itself), variant by variant: the cache is filled with random values (a step's cost does not depend on
  them) and decoded by graph replay; tokens/s = batch / step time. Target: SVFormer >= 1.5x vanilla tokens/s.
"""

from __future__ import annotations

import time
from fractions import Fraction

import torch

from lit_resformer.model import KVCache, ModelConfig, Transformer, kv_cache_bytes
from lit_resformer.model.decoding import GraphedDecodeStep

from . import targets
from .harness import (
    Metric,
    Result,
    Settings,
    build_within_budget,
    interleaved,
    markdown_table,
    median,
    paired_ratios,
    spread,
    target_mark,
)

NAME = "decode"
CONTEXTS = (512, 2048, 8192)
NEW_TOKENS = 128  # counted decode steps per context (the interleaved rounds)
BUDGET_BYTES = 1 << 30  # 1 GiB of fp32 cache for the batch-fit measurement
QUICK = dict(d_model=32, ffn_dim=64, vocab_size=128)
QUICK_CONTEXTS, QUICK_NEW_TOKENS, QUICK_BUDGET = (16, 64), 3, 1 << 20
GPU_PRESET, GPU_BATCH, GPU_PROMPT, GPU_NEW_TOKENS = "82M", 8, 1024, 64
LONG_CONTEXT, LONG_STEPS = 32768, 20
MEMORY_RESERVE = 4 << 30  # bytes left free beside the cache at 32k: the step's own tensors, the allocator
KEEP_FOR_TIMING = 0.3  # the compiled step (tried last) needs this share of the budget: it compiles for ~20 s


def variants(n_head: int) -> dict[str, tuple[str, dict]]:
    half = n_head // 2
    return {
        "vanilla": ("vanilla", {}),
        "svformer": ("SVFormer", {"share": {"svformer": True}}),
        "cla2": ("CLA2 (KV shared every 2 layers)", {"share": {"every": 2, "what": "kv"}}),
        "gqa": (f"GQA n_kv_head={half}", {"n_kv_head": half}),
        "gqa_svformer": (f"GQA n_kv_head={half} + SVFormer", {"n_kv_head": half, "share": {"svformer": True}}),
    }


def allocated_bytes(cache: KVCache) -> int:
    """Bytes of the distinct storages behind the cache's tensors (what was really allocated)."""
    storages = {}
    for tensor in (*cache.keys, *cache.values):
        if tensor is not None:
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def largest_batch(config: ModelConfig, seq: int, budget: int, device: torch.device) -> int:
    """Largest batch whose allocated cache of `seq` positions stays within `budget` bytes (doubling, then bisecting)."""

    def fits(batch: int) -> bool:
        cache = KVCache(config, batch, seq, device=device)
        held = allocated_bytes(cache)
        if held != cache.held_bytes():
            raise RuntimeError(f"KVCache.held_bytes()={cache.held_bytes()} but its storages hold {held} bytes")
        del cache
        return held <= budget

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:  # fits(low) and not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def run(settings: Settings) -> Result:
    if settings.cuda and not settings.quick:
        return run_gpu(settings)
    contexts, new_tokens, budget = (QUICK_CONTEXTS, QUICK_NEW_TOKENS, QUICK_BUDGET) if settings.quick \
        else (CONTEXTS, NEW_TOKENS, BUDGET_BYTES)
    warmup = settings.warmup
    longest = max(contexts)
    base = ModelConfig.preset("mini", max_seq_len=longest + warmup + new_tokens, **(QUICK if settings.quick else {}))
    table = variants(base.n_head)
    configs = {slug: base.replace(**overrides) for slug, (_, overrides) in table.items()}
    models = {}
    for slug, config in configs.items():
        torch.manual_seed(0)
        models[slug] = Transformer(config).to(settings.device).eval()

    metrics: list[Metric] = []
    # ---- bytes per token, measured on allocated caches (checked against the analytic formula)
    bytes_rows, per_token = [], {}
    for slug, config in configs.items():
        cache = models[slug].new_cache(1, longest)
        per_token[slug] = allocated_bytes(cache) / longest
        analytic = kv_cache_bytes(config, 1, 1)
        if per_token[slug] != analytic:
            raise RuntimeError(f"{slug}: allocated {per_token[slug]} bytes/token, kv_cache_bytes says {analytic}")
        metrics.append(Metric(f"{NAME}.{slug}.kv_bytes_per_token", per_token[slug], "bytes/token"))
    layers = base.n_layer
    svformer_share = Fraction(int(per_token["svformer"]), int(per_token["vanilla"]))
    expected = Fraction(layers + 1, 2 * layers)
    fraction = Metric(f"{NAME}.svformer.kv_fraction", float(svformer_share), "x vanilla KV bytes", float(expected),
                      "lower")
    metrics.append(fraction)
    for slug, (label, _) in table.items():
        bytes_rows.append([label, f"{per_token[slug]:,.0f}", f"{per_token[slug] / per_token['vanilla']:.4g}"])

    # ---- prefill, then interleaved greedy decode
    speed_rows = []
    for context in contexts:
        prompt = torch.randint(0, base.vocab_size, (1, context), generator=torch.Generator().manual_seed(context))
        prompt = prompt.to(settings.device)
        steps, prefill_s = {}, {}
        for slug, model in models.items():
            cache = model.new_cache(1, context + warmup + new_tokens)
            with torch.no_grad(), settings.autocast():
                settings.sync()
                start = time.perf_counter()
                logits = model(prompt, cache=cache)[:, -1]
                settings.sync()
            prefill_s[slug] = time.perf_counter() - start
            steps[slug] = _decoder(model, cache, logits.argmax(-1, keepdim=True), settings)
        times = interleaved(steps, settings, reps=new_tokens, warmup=warmup)
        del steps  # frees this context's caches before the next, longer one
        for slug, (label, _) in table.items():
            tps = Metric(f"{NAME}.{slug}.ctx{context}.tokens_per_s", 1.0 / median(times[slug]), "tokens/s",
                         better="higher")
            speedups = paired_ratios(times["vanilla"], times[slug])
            target = targets.target(f"{NAME}.{slug}.speed_vs_vanilla", settings.cuda) if context == max(contexts) \
                else None
            ratio = Metric(f"{NAME}.{slug}.ctx{context}.speed_vs_vanilla", median(speedups), "x vanilla tokens/s",
                           target, "higher")
            metrics += [tps, ratio]
            speed_rows.append([context, label, context / prefill_s[slug], tps.value, ratio.value, spread(speedups),
                               target_mark(ratio)])

    # ---- the largest batch a fixed budget holds at the longest context, by allocating
    fit_rows, batches = [], {}
    for slug in table:
        batches[slug] = largest_batch(configs[slug], longest, budget, settings.device)
        metrics.append(Metric(f"{NAME}.{slug}.max_batch_ctx{longest}", batches[slug], "sequences", better="higher"))
    batch_ratio = Metric(f"{NAME}.svformer.max_batch_ratio", batches["svformer"] / max(batches["vanilla"], 1),
                         "x vanilla batch",
                         targets.target(f"{NAME}.svformer.max_batch_ratio", settings.cuda), "higher")
    metrics.append(batch_ratio)
    for slug, (label, _) in table.items():
        fit_rows.append([label, batches[slug], f"{batches[slug] / max(batches['vanilla'], 1):.3g}",
                         target_mark(batch_ratio) if slug == "svformer" else ""])

    fraction_mark = "exactly" if svformer_share == expected else f"NOT ({svformer_share} vs {expected})"
    markdown = "\n\n".join([
        f"Preset `mini` ({layers} layers, {base.n_head} heads, d={base.d_model}, vocab {base.vocab_size}), "
        f"max_seq_len {base.max_seq_len}, fp32 cache, batch 1.",
        "**KV cache per token** (bytes of the allocated cache / positions; equal to `kv_cache_bytes`). "
        f"SVFormer holds {fraction_mark} (L+1)/(2L) = {expected} of vanilla's "
        f"({target_mark(fraction)}).",
        markdown_table(["variant", "bytes/token", "x vanilla"], bytes_rows),
        f"**Greedy decode**: prefill of the context (one pass, timed once), then {new_tokens} new tokens per variant "
        f"after {warmup} warm-up tokens, interleaved; tokens/s = 1 / median step time.",
        markdown_table(["context", "variant", "prefill tok/s", "decode tok/s", "x vanilla", "spread (IQR)", "target"],
                       speed_rows),
        f"**Largest batch within {budget / 2**20:g} MiB of cache at context {longest}**, found by allocating "
        "`KVCache`s (doubling, then bisecting) and summing their storages.",
        markdown_table(["variant", "max batch", "x vanilla", "target"], fit_rows),
    ])
    return Result(NAME, metrics, markdown, {"preset": "mini", "contexts": list(contexts), "new_tokens": new_tokens,
                                            "budget_bytes": budget})


def _decoder(model: Transformer, cache: KVCache, first: torch.Tensor, settings: Settings):
    """A closure decoding one greedy token per call through `cache`."""
    state = {"token": first}

    @torch.no_grad()
    def step() -> None:
        with settings.autocast():
            logits = model(state["token"], cache=cache)[:, -1]
        state["token"] = logits.argmax(-1, keepdim=True)

    return step


def _replayer(step: GraphedDecodeStep, first: torch.Tensor):
    """A closure decoding one greedy token per call by one graph replay."""
    state = {"token": first}

    def call() -> None:
        state["token"] = step(state["token"]).argmax(-1, keepdim=True)

    return call


def run_gpu(settings: Settings) -> Result:
    dtype, device, warmup = torch.bfloat16, settings.device, settings.warmup
    long_seq = LONG_CONTEXT + warmup + LONG_STEPS + 1
    base = ModelConfig.preset(GPU_PRESET, max_seq_len=long_seq)
    table = variants(base.n_head)
    configs = {slug: base.replace(**overrides) for slug, (_, overrides) in table.items()}
    models = {}
    for slug, config in configs.items():
        torch.manual_seed(0)
        models[slug] = Transformer(config).to(device=device, dtype=dtype).eval()
    metrics: list[Metric] = []

    # ---- batch 8: eager steps over the growing cache against graph replays of the static step
    length = GPU_PROMPT + warmup + GPU_NEW_TOKENS + 1
    prompt = torch.randint(0, base.vocab_size, (GPU_BATCH, GPU_PROMPT), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(device)
    contenders = {}

    def prefilled(model: Transformer) -> tuple[KVCache, torch.Tensor]:
        cache = model.new_cache(GPU_BATCH, length)
        with torch.no_grad():
            return cache, model(prompt, cache=cache)[:, -1].argmax(-1, keepdim=True)

    for slug, model in models.items():
        cache, first = prefilled(model)
        contenders[f"{slug}/eager"] = _decoder(model, cache, first, settings)
        cache, first = prefilled(model)
        contenders[f"{slug}/graph"] = _replayer(GraphedDecodeStep(model, cache, GPU_BATCH), first)
    times = interleaved(contenders, settings, reps=GPU_NEW_TOKENS, warmup=warmup)
    del contenders
    short_rows = []
    for slug, (label, _) in table.items():
        eager, graph = times[f"{slug}/eager"], times[f"{slug}/graph"]
        speedups = paired_ratios(eager, graph)
        eager_tps = Metric(f"{NAME}.{slug}.batch{GPU_BATCH}.eager_tokens_per_s", GPU_BATCH / median(eager), "tokens/s",
                           better="higher")
        graph_tps = Metric(f"{NAME}.{slug}.batch{GPU_BATCH}.graph_tokens_per_s", GPU_BATCH / median(graph), "tokens/s",
                           better="higher")
        speedup = Metric(f"{NAME}.{slug}.batch{GPU_BATCH}.graph_speedup", median(speedups), "x eager tokens/s",
                         targets.target(f"{NAME}.{slug}.graph_speedup", settings.cuda), "higher")
        metrics += [eager_tps, graph_tps, speedup]
        short_rows.append([label, eager_tps.value, graph_tps.value, speedup.value, spread(speedups),
                           target_mark(speedup)])

    # ---- 32k context, the largest batch that fits, one variant at a time
    long_rows, tokens_per_s, batches = [], {}, {}
    for slug, (label, _) in table.items():
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info(device)[0]
        per_sequence = kv_cache_bytes(configs[slug], 1, long_seq, dtype)
        batches[slug] = batch = int((free - MEMORY_RESERVE) // per_sequence)
        cache = KVCache(configs[slug], batch, long_seq, device=device, dtype=dtype)
        for tensor in (*cache.keys, *cache.values):
            if tensor is not None:
                tensor.normal_()
        cache.pos = LONG_CONTEXT
        first = torch.randint(0, base.vocab_size, (batch, 1), device=device)
        step = _replayer(GraphedDecodeStep(models[slug], cache, batch), first)
        long_times = interleaved({slug: step}, settings, reps=LONG_STEPS, warmup=warmup)[slug]
        del step, cache
        tokens_per_s[slug] = batch / median(long_times)
        metrics += [Metric(f"{NAME}.{slug}.ctx{LONG_CONTEXT}.max_batch", batch, "sequences", better="higher"),
                    Metric(f"{NAME}.{slug}.ctx{LONG_CONTEXT}.tokens_per_s", tokens_per_s[slug], "tokens/s",
                           better="higher")]
        long_rows.append([label, batch, f"{per_sequence * batch / 2**30:.1f}", 1e3 * median(long_times),
                          tokens_per_s[slug]])
    speed = Metric(f"{NAME}.svformer.ctx{LONG_CONTEXT}.speed_vs_vanilla", tokens_per_s["svformer"] / tokens_per_s["vanilla"],
                   "x vanilla tokens/s",
                   targets.target(f"{NAME}.svformer.long_speed_vs_vanilla", settings.cuda), "higher")
    capacity = Metric(f"{NAME}.svformer.ctx{LONG_CONTEXT}.batch_vs_vanilla", batches["svformer"] / batches["vanilla"],
                      "x vanilla batch", better="higher")
    metrics += [speed, capacity]
    for row, slug in zip(long_rows, table, strict=True):
        row += [f"{tokens_per_s[slug] / tokens_per_s['vanilla']:.3g}", f"{batches[slug] / batches['vanilla']:.3g}",
                target_mark(speed) if slug == "svformer" else ""]

    # ---- last, while the budget lasts: the compiled static step in the graph, against vanilla's eager step again
    def compiled_pair():
        cache, first = prefilled(models["vanilla"])
        pair = {"eager": _decoder(models["vanilla"], cache, first, settings)}
        cache, first = prefilled(models["vanilla"])
        pair["compiled-graph"] = _replayer(GraphedDecodeStep(models["vanilla"], cache, GPU_BATCH, compile=True), first)
        return pair

    built, left_out = build_within_budget({"compiled": compiled_pair}, settings, KEEP_FOR_TIMING, required=0)
    if built:
        pair_times = interleaved(built["compiled"], settings, reps=GPU_NEW_TOKENS, warmup=warmup)
        ratios = paired_ratios(pair_times["eager"], pair_times["compiled-graph"])
        tps = Metric(f"{NAME}.vanilla.batch{GPU_BATCH}.compiled_graph_tokens_per_s",
                     GPU_BATCH / median(pair_times["compiled-graph"]), "tokens/s", better="higher")
        speedup = Metric(f"{NAME}.vanilla.batch{GPU_BATCH}.compiled_graph_speedup", median(ratios),
                         "x eager tokens/s", better="higher")
        metrics += [tps, speedup]
        short_rows.append(["vanilla, compiled step in the graph", GPU_BATCH / median(pair_times["eager"]), tps.value,
                           speedup.value, spread(ratios), ""])

    markdown = "\n\n".join([
        f"Preset `{GPU_PRESET}` ({base.n_layer} layers, {base.n_head} heads, d={base.d_model}, vocab "
        f"{base.vocab_size}), bf16 weights and cache, greedy decoding.",
        f"**Batch {GPU_BATCH}, {GPU_PROMPT}-token prompt**: {GPU_NEW_TOKENS} new tokens per contender after {warmup} "
        "warm-up tokens, interleaved; eager = a forward pass over the growing cache per token, graph = one replay "
        "of the static step (`generate` on CUDA).",
        markdown_table(["variant", "eager tok/s", "graph tok/s", "graph x eager", "spread (IQR)", "target"],
                       short_rows)
        + (f"\n\nLeft out (budget of {settings.budget_s:.0f} s): {', '.join(left_out)}." if left_out else ""),
        f"**{LONG_CONTEXT:,}-token context, largest batch that fits** (free GPU memory less "
        f"{MEMORY_RESERVE / 2**30:g} GiB), cache filled with random values, {LONG_STEPS} graph replays after "
        f"{warmup} warm-up; variants one after another.",
        markdown_table(["variant", "batch", "cache GiB", "step ms", "tokens/s", "x vanilla tokens/s",
                        "x vanilla batch", "target"], long_rows),
    ])
    return Result(NAME, metrics, markdown, {"preset": GPU_PRESET, "batch": GPU_BATCH, "prompt": GPU_PROMPT,
                                            "long_context": LONG_CONTEXT, "left_out": left_out})
