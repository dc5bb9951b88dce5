"""Run the analysis over models and sequences; write `analysis.json` and the PNG plots.

Entry points:
    analyze(models, batches, out_dir)                  models: {name: Transformer | HF causal LM}, batches [N, T]
    analyze_checkpoints(ckpt_paths, num_seqs, seq_len, out_dir)   what `lit-resformer analyze` calls
    sample_validation_batches(datamodule_hparams, n, seq_len)     N validation sequences of a run's data
    load_hf_causal_lm(folder)                          a local Hugging Face causal LM with eager attention

`analysis.json` schema (layer lists have one entry per layer; index i is layer i+1, 1-based as in the paper):
    {
      "schema_version": 2,
      "num_seqs": N, "seq_len": T, "top_i": K,
      "plots": [str],                          # PNG file names written next to analysis.json
      "models": {
        "<name>": {
          "kind": "lit-resformer" | "hf",
          "source": str,                       # checkpoint path, HF folder, or "in-memory"
          "config": dict,                      # ModelConfig.to_dict() or the HF config
          "n_layer": L, "num_seqs": N, "seq_len": T,
          "entropy": [L],                      # Eq. 11, mean over sequences of -sum_j a_j log a_j
          "entropy_uniform_causal": float,     # the same entropy under uniform causal attention (reference)
          "importance_by_position": [L][T],    # a_j, mean over sequences
          "importance_first": [L],             # a_0
          "importance_others": [L],            # mean of a_1..a_{T-1}
          "top_i_importance": [L][K],          # share of importance held by the i most important tokens, i=1..K
          "similarity": [L],                   # Eq. 13, mean pairwise cosine of a layer's output hidden states
          "hidden_norm_by_position": [L][T], "hidden_norm_first": [L], "hidden_norm_others": [L],
          # only for lit-resformer models (they need the q/k/v hook):
          "value_norm_by_position": [L][T], "value_norm_first": [L], "value_norm_others": [L],
          # Eq. 12: eigenvalues of each sequence's uncentred (1/l) sum_t v_t v_t^T, averaged over sequences
          "top_eigenvalue": [L],               # the largest one
          "top_eigenvalue_share": [L],         # the largest one / the sum of all (the trace): scale-free
          "value_spectrum_layer": int,         # 1-based layer whose full spectrum follows
          "value_spectrum": [Hkv*d],           # eigenvalues, descending
          # Fig. 4, layer n against m = n-1 (the paper's "with respect to the previous one"); null for layer 1:
          "fig4_cos_eq4": [L],                 # cos(Eq. 2 output, Eq. 4 output)
          "fig4_cos_eq6": [L],                 # cos(Eq. 2 output, Eq. 6 output)
          "fig4_first_cos_eq4": [L], "fig4_first_cos_eq6": [L],   # the same against m = 1
          # V_n = W_V x of the layer itself, before residual mixing (null for layers without W_V, e.g. SVFormer):
          "raw_value_norm_first": [L], "raw_value_norm_others": [L], "raw_value_top_eigenvalue": [L],
          "raw_value_top_eigenvalue_share": [L]
        }
      }
    }

What "values" means: the values layer n attends with (V'_n after any residual mixing; V_1 for SVFormer's
sharing layers; the own block for cross-layer attention); "raw values" are the layer's own projection V_n
(for a vanilla model both are the same). The paper's value-state figures can be read either way for ResFormer,
so both are reported. Hidden states are the residual stream after each
block. Fig. 4 uses layer n's own Q_n, K_n, V_n and the K_m, V_m that layer m attends with (m = n-1, and
m = 1), so it is the paper's check when the model is vanilla. For Hugging Face models only attention and hidden states are available, and
`output_hidden_states` gives the last layer after the final norm (Llama and most decoders do so).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from lit_resformer.analysis.plots import write_plots
from lit_resformer.analysis.trace import DEFAULT_ATTENTION_BUDGET, AnalysisTrace
from lit_resformer.model import Transformer
from lit_resformer.runs.checkpoint_reading import read_checkpoint
from lit_resformer.runs.run_dir import ANALYSIS_RESULTS, RunDir
from lit_resformer.writing import atomic_write_json

SCHEMA_VERSION = 2  # 2: Eq. 12 uncentred per sequence; Fig. 4 against m = n-1 and m = 1
DEFAULT_TOP_I = 16


# ------------------------------------------------------------------ input checks (before any compute)
def _check_inputs(model, batches, batch_size: int, top_i: int | None, spectrum_layer: int | None) -> int:
    """Validate everything about one analysis; returns top_i (None -> min(16, seq_len))."""
    if not isinstance(batches, torch.Tensor) or batches.dim() != 2 or batches.dtype.is_floating_point:
        raise ValueError("batches must be an integer tensor of token ids shaped [num_seqs, seq_len]")
    num_seqs, seq_len = batches.shape
    if num_seqs < 1 or seq_len < 2:
        raise ValueError(f"batches has shape {list(batches.shape)}; need >= 1 sequence of >= 2 tokens")
    if isinstance(model, Transformer):
        cfg = model.config
        kind, vocab, max_len, n_layer = "the model", cfg.vocab_size, cfg.max_seq_len, cfg.n_layer
    elif _is_hf_causal_lm(model):
        if model.config._attn_implementation != "eager":
            raise ValueError(f"the Hugging Face model uses attn_implementation="
                             f"{model.config._attn_implementation!r}; load it with attn_implementation='eager' "
                             "(load_hf_causal_lm does) to get attention maps")
        kind, vocab, n_layer = "the Hugging Face model", model.config.vocab_size, model.config.num_hidden_layers
        max_len = getattr(model.config, "max_position_embeddings", None)
    else:
        raise ValueError(f"got a {type(model).__name__}; expected a lit-resformer Transformer or a Hugging Face "
                         "causal LM")
    if max_len is not None and seq_len > max_len:
        raise ValueError(f"seq_len={seq_len} exceeds {kind}'s max_seq_len={max_len}")
    if int(batches.min()) < 0 or int(batches.max()) >= vocab:
        raise ValueError(f"token ids must be in [0, {vocab}) for {kind}; got [{int(batches.min())}, "
                         f"{int(batches.max())}]")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a positive integer")
    top_i = min(DEFAULT_TOP_I, seq_len) if top_i is None else top_i
    if isinstance(top_i, bool) or not isinstance(top_i, int) or not 1 <= top_i <= seq_len:
        raise ValueError(f"top_i={top_i!r} must be an integer in [1, seq_len={seq_len}]")
    if spectrum_layer is not None and not 1 <= spectrum_layer <= n_layer:
        raise ValueError(f"spectrum_layer={spectrum_layer!r} must be a layer number in [1, {n_layer}]")
    return top_i


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


# ------------------------------------------------------------------ one model
@torch.no_grad()
def analyze_model(model: Transformer, batches: torch.Tensor, *, batch_size: int = 4, top_i: int | None = None,
                  spectrum_layer: int | None = None,
                  attention_budget: int = DEFAULT_ATTENTION_BUDGET) -> dict[str, Any]:
    """Every metric for one lit-resformer model over the sequences `batches` [N, T] (see the schema)."""
    if not isinstance(model, Transformer):
        raise ValueError(f"analyze_model takes a lit-resformer Transformer, got a {type(model).__name__}")
    top_i = _check_inputs(model, batches, batch_size, top_i, spectrum_layer)
    trace = AnalysisTrace(top_i, attention_budget)
    # V_n before residual mixing is only visible as the output of W_V: a forward hook reads it.
    hooks = [block.attn.wv.register_forward_hook(
                 lambda _module, _inputs, output, layer=i: trace.add_raw_values(layer, output))
             for i, block in enumerate(model.blocks) if block.attn.wv is not None]
    was_training = model.training
    model.eval()
    try:
        for chunk in batches.split(batch_size):
            model(chunk.to(_device(model)), trace=trace)
            trace.end_sequence_batch()
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    return {"kind": "lit-resformer", "config": model.config.to_dict(), **trace.summary(spectrum_layer)}


@torch.no_grad()
def analyze_hf_model(model, batches: torch.Tensor, *, batch_size: int = 1, top_i: int | None = None) -> dict:
    """Attention and hidden-state metrics of a Hugging Face causal LM (eager attention, which returns A_n).

    Hugging Face returns every layer's attention at once, so memory grows with layers x T^2 per sequence:
    keep batch_size small for long sequences.
    """
    if isinstance(model, Transformer) or not _is_hf_causal_lm(model):
        raise ValueError(f"analyze_hf_model takes a Hugging Face causal LM, got a {type(model).__name__}")
    top_i = _check_inputs(model, batches, batch_size, top_i, None)
    trace = AnalysisTrace(top_i, fig4=False)
    was_training = model.training
    model.eval()
    try:
        for chunk in batches.split(batch_size):
            out = model(chunk.to(_device(model)), output_attentions=True, output_hidden_states=True)
            for layer, probs in enumerate(out.attentions):
                trace.add_attention_rows(layer, probs.float())
                trace.close_attention(layer)
                trace.on_hidden(layer, out.hidden_states[layer + 1].float())
    finally:
        model.train(was_training)
    return {"kind": "hf", "config": model.config.to_dict(), **trace.summary()}


# ------------------------------------------------------------------ several models -> JSON + plots
def analyze(models: dict[str, torch.nn.Module], batches: torch.Tensor, out_dir: str | Path, *,
            batch_size: int = 4, top_i: int | None = None, spectrum_layer: int | None = None,
            sources: dict[str, str] | None = None) -> dict[str, Any]:
    """Analyse every model on the same sequences; write `out_dir/analysis.json` and the PNGs; return the JSON.

    models: {name: lit-resformer `Transformer` or Hugging Face causal LM}; batches: token ids [N, T];
    top_i: length of the top-i importance curves (default min(16, T)); spectrum_layer: 1-based layer whose full
    value spectrum is stored (default the middle layer); sources: {name: where the model came from}.
    """
    if not isinstance(models, dict) or not models:
        raise ValueError("models must be a non-empty dict {name: model}")
    for name, model in models.items():  # every model is checked before any is analysed
        try:
            resolved_top_i = _check_inputs(model, batches, batch_size, top_i,
                                           spectrum_layer if isinstance(model, Transformer) else None)
        except ValueError as error:
            raise ValueError(f"models[{name!r}]: {error}") from None
    results: dict[str, Any] = {}
    for name, model in models.items():
        if isinstance(model, Transformer):
            result = analyze_model(model, batches, batch_size=batch_size, top_i=resolved_top_i,
                                   spectrum_layer=spectrum_layer)
        else:
            result = analyze_hf_model(model, batches, batch_size=batch_size, top_i=resolved_top_i)
        results[name] = {"source": (sources or {}).get(name, "in-memory"), **result}
    report = {"schema_version": SCHEMA_VERSION, "num_seqs": batches.shape[0], "seq_len": batches.shape[1],
              "top_i": resolved_top_i, "models": results}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report["plots"] = [p.name for p in write_plots(report, out)]
    atomic_write_json(out / ANALYSIS_RESULTS, report, indent=1)
    return report


def _is_hf_causal_lm(model) -> bool:
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return isinstance(model, PreTrainedModel)


# ------------------------------------------------------------------ checkpoints and data
def load_hf_causal_lm(folder: str | Path):
    """A causal LM saved with `save_pretrained` in a local folder, with eager attention (exposes A_n)."""
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} is not a Hugging Face model folder (no config.json)")
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", local_files_only=True).eval()


def sample_validation_batches(datamodule_hparams: dict[str, Any], n: int, seq_len: int | None = None,
                              seed: int = 0, expected_tokenizer_json: str | None = None) -> torch.Tensor:
    """`n` validation sequences [n, seq_len] of a run's data (an `LMDataModule` rebuilt from its hyperparameters,
    as saved in the checkpoint), drawn evenly over the domains with a seeded generator.

    expected_tokenizer_json: the model's tokenizer (`Tokenizer.to_str()`); the rebuilt data must use the same one.
    """
    from lit_resformer.data import LMDataModule

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"num_seqs={n!r} must be a positive integer")
    # Lightning adds private entries (e.g. "_instantiator" from LightningCLI) that are not constructor arguments.
    hparams = {k: v for k, v in datamodule_hparams.items() if not k.startswith("_")}
    if seq_len is not None:
        hparams["seq_len"] = seq_len
    hparams["val_sequences_per_domain"] = None  # sample from the whole validation split
    datamodule = LMDataModule(**hparams)
    datamodule.prepare_data()
    if expected_tokenizer_json is not None and datamodule.tokenizer.to_str() != expected_tokenizer_json:
        raise ValueError("the rebuilt validation data uses another tokenizer than the model (was the data cache "
                         "rebuilt with a different tokenizer?); its token ids would not match the model's")
    datasets = [loader.dataset for loader in datamodule.val_dataloader()]
    available = sum(len(d) for d in datasets)
    if available < n:
        raise ValueError(f"num_seqs={n} but the validation split has only {available} sequences of "
                         f"seq_len={datamodule.seq_len}")
    generator = torch.Generator().manual_seed(seed)
    orders = [torch.randperm(len(d), generator=generator).tolist() for d in datasets]
    rows: list[torch.Tensor] = []
    turn = 0
    while len(rows) < n:  # round robin over domains, each in its own shuffled order
        index, order = turn % len(datasets), orders[turn % len(datasets)]
        if order:
            rows.append(datasets[index][order.pop()]["input_ids"])
        turn += 1
    return torch.stack(rows)


def _datamodule_hparams(path: Path) -> dict[str, Any]:
    """The data module's hyperparameters that Lightning saved in the checkpoint."""
    hparams = read_checkpoint(path, mmap=True).get("datamodule_hyper_parameters")
    if hparams is None:
        raise ValueError(f"{path} holds no datamodule hyperparameters; cannot sample its validation data")
    return dict(hparams)


def _run_names(paths: list[Path]) -> list[str]:
    """A run's checkpoint -> the run dir's name, with as many parent folders as make every name unique (grid runs
    are <grid>/<cell>/seed<k>, so they become vanilla/seed0, resformer/seed0, ...); other paths name themselves."""
    parts = [(run.path if (run := RunDir.from_checkpoint(p)) else p).resolve().parts for p in paths]
    for depth in range(1, max(len(x) for x in parts) + 1):
        names = ["/".join(x[-depth:]) for x in parts]
        if len(set(names)) == len(names):
            return names
    # the same run given more than once: later copies are told apart by the checkpoint's name
    names, seen = [], set()
    for path, run in zip(paths, parts, strict=True):
        name = run[-1]
        while name in seen:
            name = f"{name}/{path.stem}"
        seen.add(name)
        names.append(name)
    return names


def default_output_dir(paths: list[Path]) -> Path:
    """Where one checkpoint's analysis goes without --out: its run's analysis folder (for a file outside a run's
    checkpoints folder, `analysis` next to it). Several checkpoints need an explicit folder."""
    if len(paths) != 1:
        raise ValueError("out_dir (--out) is required when analysing several checkpoints")
    run = RunDir.from_checkpoint(paths[0])
    return run.analysis_dir if run else paths[0].parent / "analysis"


def analyze_checkpoints(ckpt_paths: list[str], num_seqs: int = 16, seq_len: int | None = None,
                        out_dir: str | Path | None = None, *, batch_size: int = 4, top_i: int | None = None,
                        seed: int = 0) -> dict[str, Any]:
    """Load lit-resformer checkpoints (and Hugging Face model folders), sample `num_seqs` validation sequences of
    the first checkpoint's data, and analyse every model on them (`analyze`).

    With Hugging Face folders only, the sequences come from the embedded corpus's validation split, tokenized
    with the first folder's tokenizer.json (its EOS token must be `<|endoftext|>`, as in GPT-NeoX tokenizers).
    All models must share one tokenizer, so they see the same tokens. out_dir defaults to <run dir>/analysis for
    a single checkpoint (where the grid report looks for it).
    """
    from lit_resformer import load_checkpoint

    paths = [Path(p) for p in ckpt_paths]
    if not paths:
        raise ValueError("give at least one checkpoint (--ckpt PATH)")
    for p in paths:
        if not p.exists():
            raise ValueError(f"checkpoint {p} does not exist")
    out_dir = default_output_dir(paths) if out_dir is None else out_dir

    models: dict[str, torch.nn.Module] = {}
    sources: dict[str, str] = {}
    reference_tokenizer: str | None = None
    data_hparams = None
    for path, name in zip(paths, _run_names(paths), strict=True):
        if path.is_dir():
            from tokenizers import Tokenizer

            models[name] = load_hf_causal_lm(path)
            tokenizer_file = path / "tokenizer.json"
            tokenizer = Tokenizer.from_file(str(tokenizer_file)).to_str() if tokenizer_file.is_file() else None
        else:
            models[name], loaded_tokenizer = load_checkpoint(str(path))
            tokenizer = loaded_tokenizer.to_str()
            if data_hparams is None:
                data_hparams = _datamodule_hparams(path)
        sources[name] = str(path)
        if tokenizer is None:
            raise ValueError(f"{path} has no tokenizer (tokenizer.json); cannot check it reads the same token ids")
        reference_tokenizer = reference_tokenizer or tokenizer
        if tokenizer != reference_tokenizer:
            raise ValueError(f"{path} does not use the same tokenizer as {paths[0]}; models compared on the same "
                             "sequences must share one tokenizer")
    if data_hparams is None:  # Hugging Face folders only: validation text of the embedded corpus, their tokenizer
        data_hparams = {"source": "embedded", "tokenizer": str(paths[0] / "tokenizer.json")}
    batches = sample_validation_batches(data_hparams, num_seqs, seq_len, seed, reference_tokenizer)
    return analyze(models, batches, out_dir, batch_size=batch_size, top_i=top_i, sources=sources)


def analyze_run_dir(run_dir: str | Path, num_seqs: int = 16, seq_len: int | None = None) -> Path:
    """Analyse a finished run's last checkpoint into its analysis folder; returns the analysis.json path."""
    run = RunDir(run_dir)
    if not run.last_checkpoint.is_file():
        raise ValueError(f"{run.path} has no {run.last_checkpoint.relative_to(run.path)} to analyse")
    analyze_checkpoints([str(run.last_checkpoint)], num_seqs, seq_len, run.analysis_dir)
    return run.analysis_results


def run_analysis(run_dir: Path) -> dict[str, Any] | None:
    """The run's own model in its analysis.json (the first one listed), or None when it has not been analysed."""
    path = RunDir(run_dir).analysis_results
    if not path.is_file():
        return None
    models = json.loads(path.read_text())["models"]
    return next(iter(models.values())) if models else None
