"""The two paths of the training loss against each other, and which one the training step takes.

The LM head and the next-token cross-entropy, forward and backward, at the sizes of real steps: the plain path
(`plain_cross_entropy`: fp32 logits for the whole step, then `F.cross_entropy`) and the chunked one
(`linear_cross_entropy`), interleaved in the same rounds, on the same hidden states, head and labels. Everything
else in a training step is the same on both paths, so this is where they differ. The head has `padded_vocab_size`
rows, as in the model. Each row records both timings, the chunked/plain ratio (above 1: plain is faster), the
path `chunked_loss_pays` picks for a step of that size (the one decision the model follows) and whether that
pick is the faster one. A pick of the chunked path on the CPU comes only from the memory budget, which the
table states per vocabulary as the most tokens a step may have on the plain path.

CPU: the CPU recipe's vocabulary (4,096) at the grids' step (8 x 256 tokens) and the paper's (50,277) at 256
tokens (12.9M logits, more than the 8.4M of the first; 512 to 4,096 tokens cost 2 to 16x as long and measured
similar ratios), the head as wide as `tiny`'s and `mini`'s. On CUDA: the paper's 82M head at 16 x 2,048 tokens,
bf16 autocast, both paths compiled.
"""

from __future__ import annotations

import torch

from lit_resformer.model import ModelConfig
from lit_resformer.model import loss as loss_module
from lit_resformer.model.loss import chunked_loss_pays, linear_cross_entropy, plain_cross_entropy

from .harness import Metric, Result, Settings, interleaved, markdown_table, median, paired_ratios, spread

NAME = "loss_path"
# (vocabulary, preset whose d_model the head has, tokens per step)
CELLS = ((4096, "tiny", 2048), (4096, "mini", 2048), (50277, "tiny", 256), (50277, "mini", 256))
GPU_CELLS = ((50277, "82M", 16 * 2048),)
QUICK_CELLS = ((128, "tiny", 64), (300, "tiny", 64))
QUICK_D_MODEL = 32
PATHS = {"plain": plain_cross_entropy, "chunked": linear_cross_entropy}


def head_and_loss(path, vocab: int, d_model: int, tokens: int, settings: Settings):
    """One forward + backward of `path` over a fresh head of `vocab` real rows (padded as the model pads it)."""
    config = ModelConfig.preset("tiny", vocab_size=vocab)  # only for padded_vocab_size
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(tokens, d_model, generator=generator).to(settings.device).requires_grad_()
    weight = torch.randn(config.padded_vocab_size, d_model, generator=generator) * 0.02
    weight[vocab:] = 0.0  # the model's padding rows are zero
    weight = weight.to(settings.device).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), generator=generator).to(settings.device)
    forward = torch.compile(path) if settings.cuda else path

    def call() -> None:
        hidden.grad = weight.grad = None
        with settings.autocast():
            loss = forward(hidden, weight, labels, vocab)
        loss.backward()

    return call, config.padded_vocab_size


def run(settings: Settings) -> Result:
    cells = QUICK_CELLS if settings.quick else GPU_CELLS if settings.cuda else CELLS
    contenders, padded = {}, {}
    for vocab, preset, tokens in cells:
        d_model = QUICK_D_MODEL if settings.quick else ModelConfig.preset(preset).d_model
        for path_name, path in PATHS.items():
            call, padded[vocab] = head_and_loss(path, vocab, d_model, tokens, settings)
            call()  # compiles on CUDA
            contenders[(vocab, preset, tokens, path_name)] = call
    names = {key: " ".join(map(str, key)) for key in contenders}
    timed = interleaved({names[key]: call for key, call in contenders.items()}, settings)
    times = {key: timed[names[key]] for key in contenders}

    metrics, rows, choices = [], [], {}
    for vocab, preset, tokens in cells:
        plain, chunked = times[(vocab, preset, tokens, "plain")], times[(vocab, preset, tokens, "chunked")]
        ratios = paired_ratios(chunked, plain)
        picked = "chunked" if chunked_loss_pays(settings.device, tokens * padded[vocab]) else "plain"
        faster = "chunked" if median(ratios) < 1.0 else "plain"
        cell = f"v{vocab}.{preset}.t{tokens}"
        metrics += [
            Metric(f"{NAME}.{cell}.plain_ms", 1e3 * median(plain), "ms"),
            Metric(f"{NAME}.{cell}.chunked_ms", 1e3 * median(chunked), "ms"),
            Metric(f"{NAME}.{cell}.chunked_vs_plain", median(ratios), "x plain time"),
        ]
        choices[cell] = {"picked": picked, "faster": faster}
        d_model = QUICK_D_MODEL if settings.quick else ModelConfig.preset(preset).d_model
        rows.append([f"{vocab:,} ({padded[vocab]:,} rows)", f"{preset} (d={d_model})", f"{tokens:,}",
                     1e3 * median(plain), 1e3 * median(chunked), median(ratios), spread(ratios), picked,
                     "yes" if picked == faster else "no"])
    budget = loss_module.PLAIN_MAX_LOGITS
    budget_line = ", ".join(f"{budget // head_rows:,} tokens at vocabulary {vocab:,}"
                            for vocab, head_rows in padded.items())
    markdown = (
        f"LM head + next-token cross-entropy, forward and backward, {settings.precision}"
        f"{'' if settings.cuda else '; the rest of a training step is the same on both paths'}. "
        "Ratio above 1: the plain path is faster.\n\n"
        + markdown_table(["vocabulary", "head width", "tokens", "plain ms", "chunked ms", "chunked / plain",
                          "spread (IQR)", "training step takes", "the faster one"], rows)
        + f"\n\nThe decision (`chunked_loss_pays`): chunked on a GPU; on the CPU chunked only past "
        f"{budget:,} logits a step (`PLAIN_MAX_LOGITS`, {4 * budget / 2**30:g} GiB in fp32), i.e. plain up to "
        f"{budget_line}.\n"
    )
    return Result(NAME, metrics, markdown, {"cells": [list(c) for c in cells], "plain_max_logits": budget,
                                            "choices": choices})
