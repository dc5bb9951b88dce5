"""Packed-sequence loader throughput of `LMDataModule` against the model's training throughput.

The loader is the one `lit-resformer fit` uses (embedded corpus, BPE 4096, seq_len 256, micro-batch 16,
its default num_workers); its caches are built or found first (timed separately, not in the ratio). Each
round fetches `FETCH` batches from the train loader and runs one vanilla `tiny` training step (fwd + bwd +
AdamW) on the same batch shape, so the ratio of loader to model tokens/s is taken in the same rounds.
Target (`targets.py`): loader >= 20x the model's tokens/s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from lit_resformer.model import ModelConfig, Transformer

from . import targets
from .harness import (
    Metric,
    Result,
    Settings,
    interleaved,
    lm_datamodule,
    markdown_table,
    median,
    paired_ratios,
    random_batch,
    spread,
    target_mark,
    training_step,
)

NAME = "data_loader"
BATCH, SEQ_LEN, FETCH = 16, 256, 50
QUICK = dict(d_model=32, ffn_dim=64, max_seq_len=32)
QUICK_BATCH, QUICK_SEQ_LEN, QUICK_FETCH = 2, 16, 5


def run(settings: Settings) -> Result:
    batch, seq_len, fetch = (QUICK_BATCH, QUICK_SEQ_LEN, QUICK_FETCH) if settings.quick else (BATCH, SEQ_LEN, FETCH)
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        datamodule = lm_datamodule(settings, Path(tmp), seq_len, batch)
        start = time.perf_counter()
        datamodule.prepare_data()
        datamodule.setup("fit")
        setup_s = time.perf_counter() - start
        loader = datamodule.train_dataloader()
        state = {"batches": iter(loader)}

        def fetch_batches() -> None:
            for _ in range(fetch):
                try:
                    batch_ = next(state["batches"])
                except StopIteration:  # next epoch, as training would
                    state["batches"] = iter(loader)
                    batch_ = next(state["batches"])
                batch_["input_ids"].to(settings.device, non_blocking=True)
                batch_["labels"].to(settings.device, non_blocking=True)

        config = ModelConfig.preset("tiny", vocab_size=datamodule.vocab_size, **(QUICK if settings.quick else {}))
        torch.manual_seed(0)
        model = Transformer(config).to(settings.device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        tokens = random_batch(config.vocab_size, batch, seq_len, settings.device)
        times = interleaved({"loader": fetch_batches, "model": training_step(model, tokens, settings, optimizer)},
                            settings)
        workers = datamodule.hparams.num_workers

    loader_tps = Metric(f"{NAME}.loader_tokens_per_s", fetch * batch * seq_len / median(times["loader"]), "tokens/s",
                        better="higher")
    model_tps = Metric(f"{NAME}.model_training_tokens_per_s", batch * seq_len / median(times["model"]), "tokens/s",
                       better="higher")
    ratios = [fetch * r for r in paired_ratios(times["model"], times["loader"])]
    ratio = Metric(f"{NAME}.ratio", median(ratios), "x model training tokens/s",
                   targets.target(f"{NAME}.ratio", settings.cuda), "higher")
    setup = Metric(f"{NAME}.setup_s", setup_s, "s")
    markdown = (
        f"`LMDataModule` ({'synthetic local corpus' if settings.quick else 'embedded corpus, BPE 4096'}, seq_len "
        f"{seq_len}, micro_batch_size {batch}, num_workers {workers}); {fetch} batches fetched per round against "
        f"one training step of vanilla `tiny` (fwd + bwd + AdamW) per round.\n\n"
        + markdown_table(["", "tokens/s", "ratio", "spread (IQR)", "target"],
                         [["train loader", loader_tps.value, ratio.value, spread(ratios), target_mark(ratio)],
                          ["model training step", model_tps.value, 1.0, "", ""]])
        + f"\n\nCache build or lookup (`prepare_data` + `setup`, not in the ratio): {setup_s:.2f} s."
    )
    return Result(NAME, [loader_tps, model_tps, ratio, setup], markdown,
                  {"batch": batch, "seq_len": seq_len, "num_workers": workers, "batches_per_round": fetch})
