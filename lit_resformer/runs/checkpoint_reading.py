"""A run's checkpoint files, in one place: reading one safely (`read_checkpoint`, `checkpoint_problem`), loading
one as (Transformer, tokenizer) without Lightning or the training data (so that eval, analysis, export and
`continue_prompt` import no trainer); where they lie in a run's folder is lit_resformer.runs.run_dir's. Writing them
during training is `lit_resformer.training.checkpoint_saving` (Lightning's ModelCheckpoint, tidied)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEFAULT_NEW_TOKENS = 64  # what `lit-resformer generate` adds to a prompt unless told
# Lightning keys of a training checkpoint: without them the file cannot resume a run.
CHECKPOINT_KEYS = ("state_dict", "global_step", "loops")


class CheckpointError(ValueError):
    """A file that is not a readable checkpoint; the message names the file and why, in one line."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path} is {reason}")
        self.reason = reason


def read_checkpoint(path: str | Path, mmap: bool = False) -> dict:
    """A checkpoint's contents, loaded with `weights_only` (tensors and plain data only, never arbitrary objects).
    Raises CheckpointError naming the file for a missing, truncated or foreign file. With `mmap` the tensors stay on
    disk until read, so looking at its index costs no memory."""
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "a folder, not a checkpoint file" if path.is_dir() else "missing")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        # torch's message would advise weights_only=False, i.e. running whatever code the file holds
        reason = ("it holds Python objects other than tensors and plain data, which are never loaded"
                  if "weights only" in str(err).lower() else "it is not a torch checkpoint file (unpickling failed)")
        raise CheckpointError(path, f"not a readable checkpoint: {reason}") from None
    except Exception as err:  # noqa: BLE001 - truncated zip, foreign bytes, ...: the same problem to the caller
        first_sentence = (str(err).strip().splitlines() or [""])[0].split(". ")[0][:200]
        raise CheckpointError(path, f"not a readable checkpoint (truncated or not a torch file: "
                                    f"{type(err).__name__}: {first_sentence})") from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(path, f"not a Lightning checkpoint (it holds a {type(ckpt).__name__}, not a dict)")
    return ckpt


def checkpoint_problem(path: str | Path) -> str | None:
    """Why `path` cannot resume training (unreadable, truncated, not a Lightning training checkpoint), or None.

    The file is memory-mapped, so this reads its index, not its tensors.
    """
    try:
        ckpt = read_checkpoint(path, mmap=True)
    except CheckpointError as err:
        return err.reason
    missing = [k for k in CHECKPOINT_KEYS if k not in ckpt]
    return f"not a Lightning training checkpoint (missing {missing})" if missing else None


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu"):
    """The model in eval mode and its `tokenizers.Tokenizer`. Scoring, sampling data for analysis and export all
    need the run's own tokenizer, so a checkpoint without one is refused."""
    from lit_resformer.model import ModelConfig, Transformer

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    ckpt = read_checkpoint(path)
    try:
        config = ModelConfig(**ckpt["hyper_parameters"]["config"])
        weights = ckpt["state_dict"]
    except KeyError as err:
        raise CheckpointError(path, f"not a lit-resformer checkpoint (no {err})") from None
    except TypeError:
        raise CheckpointError(path, "not a lit-resformer checkpoint (its contents are not a Lightning "
                                    "checkpoint's)") from None
    model = Transformer(config)
    prefix = "model._orig_mod." if any(k.startswith("model._orig_mod.") for k in weights) else "model."
    model.load_state_dict({k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)})
    # The data module's state (saved by Lightning under its class name) carries the tokenizer.
    tokenizer_json = next((v["tokenizer_json"] for v in ckpt.values() if isinstance(v, dict) and "tokenizer_json" in v),
                          None)
    if tokenizer_json is None:
        raise ValueError(f"{path} holds no tokenizer (a checkpoint of `lit-resformer fit` carries its run's)")
    from tokenizers import Tokenizer

    return model.to(device).eval(), Tokenizer.from_str(tokenizer_json)


def continue_prompt(path: str | Path, prompt: str, max_new_tokens: int | None = None, temperature: float = 0.0,
                    top_k: int | None = None, seed: int = 0, device: str = "cpu") -> str:
    """`prompt` and the checkpoint's model's continuation of it (`lit-resformer generate`): up to `max_new_tokens`
    tokens (None: DEFAULT_NEW_TOKENS, or what the model's context leaves) by `Transformer.generate` (through the KV
    cache; greedy at temperature 0, else sampled, seeded by `seed`), ending before the run's end-of-document token.
    ValueError when the prompt and the tokens to add do not fit the model's context."""
    import torch

    from lit_resformer.data.tokenizer import EOS_TOKEN

    model, tokenizer = load_checkpoint(path, device=device)
    ids = tokenizer.encode(prompt).ids
    context = model.config.max_seq_len
    if max_new_tokens is None:
        max_new_tokens = min(DEFAULT_NEW_TOKENS, context - len(ids))
    if max_new_tokens < 1 or len(ids) + max_new_tokens > context:
        raise ValueError(f"--max-new-tokens {max_new_tokens}: the prompt's {len(ids)} tokens and the new ones exceed "
                         f"the model's context of {context} tokens (model.config.max_seq_len)")
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        tokens = model.generate(torch.tensor([ids], device=device), max_new_tokens, temperature=temperature,
                                top_k=top_k, eos_id=eos_id, generator=generator)[0, len(ids):].tolist()
    if eos_id in tokens:
        tokens = tokens[:tokens.index(eos_id)]
    return prompt + tokenizer.decode(tokens)
