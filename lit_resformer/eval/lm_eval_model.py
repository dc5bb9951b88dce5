"""The lit-resformer model as an lm-eval model, registered under the name ``lit-resformer``.

    import lit_resformer.eval.lm_eval_model  # registers "lit-resformer"
    lm_eval.simple_evaluate(model="lit-resformer", model_args="ckpt=runs/x/checkpoints/last.ckpt", tasks=[...])

Tokenisation and request encoding follow lm-eval's ``TemplateLM`` (the same rules its own ``hf`` model
uses: trailing context whitespace moves into the continuation, contexts are encoded without special
tokens, an empty context is replaced by ``<|endoftext|>``), so scores are comparable with ``hf`` on the
same weights exported to ``LlamaForCausalLM``.

Scoring is done in fp32 with right padding: a causal model's logits at a real position never see the
padding after it, and each row is read only up to its own length, so a request's loglikelihood does not
depend on which other requests share its batch.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from lm_eval import utils as lm_eval_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import (
    Collator,
    handle_stop_sequences,
    normalize_gen_kwargs,
    postprocess_generated_text,
)
from tqdm import tqdm

from lit_resformer.data.tokenizer import EOS_TOKEN

DEFAULT_BATCH_SIZE = 16
DEFAULT_MAX_GEN_TOKS = 256
# Generation keys this model understands; anything else (top_p, num_beams, ...) is refused by name.
GENERATION_KWARGS = {"until", "max_gen_toks", "do_sample", "temperature", "top_k"}


def _check_device(device: str) -> torch.device:
    if str(device).split(":")[0] not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device={device!r} is not allowed; choose one of ['cpu', 'cuda', 'cuda:N', 'mps']")
    return torch.device(device)


@register_model("lit-resformer")
class LitResFormerLM(TemplateLM):
    """A lit-resformer ``Transformer`` plus its ``tokenizers.Tokenizer`` behind lm-eval's LM interface.

    Built either from a Lightning checkpoint (``ckpt=PATH``, through ``lit_resformer.load_checkpoint``)
    or from an in-memory pair (``model=..., tokenizer=...``). The model must map ``idx [B, T]`` to logits
    ``[B, T, vocab]``, expose ``config.max_seq_len`` and, for generation, ``Transformer.generate``'s
    ``generate(idx, max_new_tokens, temperature=, top_k=, eos_id=)``.
    """

    def __init__(
        self,
        ckpt: str | Path | None = None,
        batch_size: int | str | None = DEFAULT_BATCH_SIZE,
        device: str | None = "cpu",
        max_batch_size: int | None = None,  # passed by simple_evaluate; only fixed batch sizes are supported
        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
        model: torch.nn.Module | None = None,
        tokenizer=None,
    ) -> None:
        super().__init__()
        batch_size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
        if isinstance(batch_size, str) and not batch_size.isdigit():
            raise ValueError(f"batch_size={batch_size!r} is not allowed; give a positive integer (no 'auto')")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size={batch_size!r} is not allowed; give a positive integer")
        if int(max_gen_toks) < 1:
            raise ValueError(f"max_gen_toks={max_gen_toks!r} is not allowed; give a positive integer")
        self._device = _check_device(device or "cpu")
        if (ckpt is None) == (model is None):
            raise ValueError("give exactly one of ckpt=PATH or model=... (with tokenizer=...)")
        if ckpt is not None:
            from lit_resformer import load_checkpoint

            model, tokenizer = load_checkpoint(ckpt)
        if tokenizer is None:
            raise ValueError("tokenizer=None: an in-memory model needs its tokenizers.Tokenizer")
        eot_id = tokenizer.token_to_id(EOS_TOKEN)
        if eot_id is None:
            raise ValueError(f"the tokenizer has no {EOS_TOKEN!r} token, which lm-eval needs as EOS/prefix token")

        self.ckpt = str(ckpt) if ckpt is not None else None
        self.model = model.to(self._device, dtype=torch.float32).eval()
        self.tokenizer = tokenizer
        self._eot_token_id = eot_id
        self.batch_size = int(batch_size)
        self.max_length = int(model.config.max_seq_len)
        self.max_gen_toks = int(max_gen_toks)

    # ----------------------------------------------------------------------------------- tokenisation
    @property
    def eot_token_id(self) -> int:
        return self._eot_token_id

    @property
    def tokenizer_name(self) -> str:
        return "lit-resformer"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        # Like lm-eval's hf model on a causal LM: no special tokens unless asked for.
        return self.tokenizer.encode(string, add_special_tokens=bool(add_special_tokens)).ids

    def tok_decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    # ----------------------------------------------------------------------------------- scoring
    @torch.no_grad()
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Score (request_str, context_tokens, continuation_tokens) triples -> (logprob, is_greedy)."""

        def longest_first(request):
            tokens = request[1] + request[2]
            return -len(tokens), tuple(tokens)

        # Requests whose context + continuation[:-1] agree share one forward pass (one-token choices).
        ordered = Collator(
            requests, sort_fn=longest_first, group_by="contexts", group_fn=lambda r: r[1] + r[2][:-1]
        )
        results = []
        progress = tqdm(total=len(requests), disable=disable_tqdm, desc="Running loglikelihood requests")
        for batch in ordered.get_batched(n=self.batch_size):
            rows = []
            for _, context_enc, continuation_enc in batch:
                if not context_enc or not continuation_enc:
                    raise ValueError("loglikelihood request with an empty context or continuation after encoding")
                if len(continuation_enc) > self.max_length:
                    raise ValueError(
                        f"continuation of {len(continuation_enc)} tokens exceeds max_seq_len={self.max_length}"
                    )
                # Left-truncate: the last max_length tokens before the final one are the model input.
                rows.append((context_enc + continuation_enc)[-(self.max_length + 1):][:-1])
            width = max(len(row) for row in rows)
            inputs = torch.full((len(rows), width), self.eot_token_id, dtype=torch.long)
            for i, row in enumerate(rows):
                inputs[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            logits = self.model(inputs.to(self.device))

            for (request_str, context_enc, continuation_enc), row, row_logits in zip(
                batch, rows, logits, strict=True
            ):
                n_cont = len(continuation_enc)
                # positions len(row)-n_cont .. len(row)-1 predict the continuation tokens
                cont_logprobs = F.log_softmax(row_logits[len(row) - n_cont : len(row)].float(), dim=-1)[None]
                for cached_str, cont_toks, logprobs in ordered.get_cache(
                    req_str=request_str, cxt_toks=context_enc, cont_toks=continuation_enc, logits=cont_logprobs
                ):
                    # Requests sharing this forward pass may have shorter continuations: read the tail.
                    logprobs = logprobs[:, -len(cont_toks):]
                    targets = torch.tensor(cont_toks, dtype=torch.long, device=logprobs.device)[None]
                    is_greedy = bool((logprobs.argmax(dim=-1) == targets).all())
                    answer = (float(logprobs.gather(2, targets[..., None]).sum()), is_greedy)
                    results.append(answer)
                    if cached_str is not None:
                        self.cache_hook.add_partial("loglikelihood", cached_str, answer)
                    progress.update(1)
        progress.close()
        return ordered.get_original(results)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Whole-text loglikelihood: disjoint windows of max_seq_len tokens, each token scored once."""
        windows, owner = [], []
        for index, (text,) in enumerate(req.args for req in requests):
            for context_enc, continuation_enc in map(
                lm_eval_utils.make_disjoint_window,
                lm_eval_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, context_enc, continuation_enc))
                owner.append(index)
        window_scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for index, (logprob, _) in zip(owner, window_scores, strict=True):
            totals[index] += logprob
        for req, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    # ----------------------------------------------------------------------------------- generation
    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy (or temperature/top-k sampled) decoding, one request at a time, cut at the stop strings."""
        eos_text = self.tokenizer.id_to_token(self.eot_token_id)
        outputs = []
        for req in tqdm(requests, disable=disable_tqdm, desc="Running generate_until requests"):
            context, gen_kwargs = req.args
            unknown = sorted(set(gen_kwargs) - GENERATION_KWARGS)
            if unknown:
                raise ValueError(
                    f"generation kwargs {unknown} are not supported; allowed: {sorted(GENERATION_KWARGS)}"
                )
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            stop = handle_stop_sequences(kwargs["until"], eos=eos_text)
            max_gen_toks = kwargs["max_gen_toks"]
            if max_gen_toks >= self.max_length:
                raise ValueError(f"max_gen_toks={max_gen_toks} must be < max_seq_len={self.max_length}")
            context_enc = self.tok_encode(context)[-(self.max_length - max_gen_toks):] or [self.prefix_token_id]
            temperature = float(kwargs.get("temperature", 1.0)) if kwargs["do_sample"] else 0.0
            text = self._generate_one(context_enc, max_gen_toks, temperature, top_k=kwargs.get("top_k"))
            text = postprocess_generated_text(text, stop=stop, think_end_token=None)
            outputs.append(text)
            self.cache_hook.add_partial("generate_until", req.args, text)
        return outputs

    def _generate_one(self, context_enc: list[int], max_new: int, temperature: float, top_k: int | None) -> str:
        """The model's own `generate` (KV cache; greedy at temperature 0), decoded up to the first EOS. Stop
        strings are cut from the text afterwards, so decoding runs on for at most max_new tokens past one."""
        idx = torch.tensor([context_enc], device=self.device)
        tokens = self.model.generate(idx, max_new, temperature=temperature, top_k=top_k, eos_id=self.eot_token_id)
        generated = tokens[0, len(context_enc):].tolist()
        if self.eot_token_id in generated:
            generated = generated[: generated.index(self.eot_token_id)]
        return self.tok_decode(generated)

    def get_model_info(self) -> dict:
        return {"ckpt": self.ckpt, "max_seq_len": self.max_length}
