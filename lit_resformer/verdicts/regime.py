"""The regime a grid's verdicts hold in: what its finished runs were (parameters, tokens, tokens per parameter,
epochs, optimizer, corpus, final losses against the unigram and bigram references), and that regime in one line."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from lit_resformer.runs.results import GridResults

# Hoffmann et al. 2022's compute-optimal budget, about 20 training tokens a parameter: a regime's tokens per parameter
# as a fraction of it says how far short of (or past) a compute-optimal run its verdicts were measured
CHINCHILLA_TOKENS_PER_PARAM = 20


def grid_regime(results: GridResults) -> dict:
    """Where a grid's finished runs stand, so a verdict is read in its regime: the ranges over runs of parameters,
    training tokens, tokens per parameter and final validation loss, and the mean unigram and bigram references
    of their validation tokens with how many runs end below the bigram one, and the most passes over the training
    split any run made (None: every run stayed within one epoch). {} for a grid with no finished runs."""
    # each run once: a grid whose cells coincide at a point (a select block's at_best cell at the chosen value) holds
    # one trained run under two names
    runs = list({r.trained_as or f"{r.grid}/{r.name}": r for by_seed in results.done.values()
                 for r in by_seed.values()}.values())
    if not runs:
        return {}

    def span(values: Iterable[float | None]) -> list[float] | None:
        present = [float(v) for v in values if v is not None]
        return [min(present), max(present)] if present else None

    def mean(values: Iterable[float | None]) -> float | None:
        present = [float(v) for v in values if v is not None]
        return float(np.mean(present)) if present else None

    params = {r.name: r.summary.get("params") for r in runs}
    tokens = {r.name: r.summary.get("tokens_seen") for r in runs}
    with_bigram = [r for r in runs if r.bigram_loss is not None and r.final("val_loss") is not None]
    return {
        "runs": len(runs),
        "params": span(params.values()),
        "tokens": span(tokens.values()),
        "tokens_per_param": span(tokens[n] / params[n] for n in params if tokens[n] and params[n]),
        "epochs": max((r.epochs for r in runs if r.epochs is not None), default=None),
        "final_val_loss": span(r.final("val_loss") for r in runs),
        "unigram_loss": mean(r.unigram_loss for r in runs),
        "bigram_loss": mean(r.bigram_loss for r in runs),
        "below_bigram": sum(r.final("val_loss") < r.bigram_loss for r in with_bigram),
        "with_bigram": len(with_bigram),
        # model.optimizer of the runs' configs (the module's default, adamw, where a config does not say)
        "optimizer": sorted({str(((r.config or {}).get("model") or {}).get("optimizer") or "adamw") for r in runs}),
        # the presets the runs' models start from (model.config.size) and data.source: a verdict holds for the model
        # and corpus it was measured on
        "size": sorted({str(((r.config or {}).get("model") or {}).get("config", {}).get("size")) for r in runs
                        if ((r.config or {}).get("model") or {}).get("config", {}).get("size")}),
        "corpus": sorted({str(((r.config or {}).get("data") or {}).get("source")) for r in runs
                          if ((r.config or {}).get("data") or {}).get("source")}),
    }


def regime_text(regime: dict) -> str:
    """A grid's regime in one line (grid_regime)."""

    def span(key: str, fmt) -> str:
        low, high = regime.get(key) or (None, None)
        if low is None:
            return "–"
        return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)}–{fmt(high)}"

    def millions(x: float) -> str:
        return f"{x / 1e6:.2f}M"

    epochs = "within one epoch" if regime.get("epochs") is None else f"up to {regime['epochs']:.2f} epochs"
    references = f"unigram {regime['unigram_loss']:.3f}" if regime.get("unigram_loss") is not None else "no unigram"
    if regime.get("bigram_loss") is not None:
        references += (f", bigram {regime['bigram_loss']:.3f} ({regime['below_bigram']} of {regime['with_bigram']} "
                       "runs end below it)")
    else:
        references += ", no bigram reference logged"
    trained = ", ".join(x for x in ("+".join(regime.get("optimizer") or []),
                                    " and ".join(f"the {c} corpus" for c in regime.get("corpus") or [])) if x)
    return (f"{regime['runs']} runs, {span('params', millions)} parameters, {span('tokens', millions)} training tokens "
            f"({span('tokens_per_param', lambda x: f'{x:.2f}')} tokens per parameter, "
            f"{span('tokens_per_param', lambda x: f'{x / CHINCHILLA_TOKENS_PER_PARAM:.2f}')}× a Chinchilla budget; "
            f"{epochs})"
            + (f", {trained}" if trained else "")
            + f", final validation loss {span('final_val_loss', lambda x: f'{x:.3f}')} against the references "
            f"{references}")
