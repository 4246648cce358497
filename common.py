"""What CtrlA, SeaKR and Rowen share: models, generation, hooks, retrieval, datasets, the run loop.

Plumbing only. Everything a paper describes lives in its method file; this file holds what any of
them needs to talk to a language model, a corpus and a question set, as a learner reads it:

- models:     load_model() for a Hugging Face id, a local directory or an embedded alias
              (smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b), converted from GGUF
              once and cached on disk (models.py: the files, their sha256, the CPU, precision and kernels)
- prompts:    chat_prompt() for chat turns, encode() for any prompt text
- generation: reference() is the plain decoding loop a reader can check in one screen: greedy and
              k samples, cut at stop strings, with per-token log-probabilities and the hidden state
              of a chosen module at each row's final (EOS-substituted) position (SeaKR's "EOS state").
              greedy(), sample() and sample_many() give the same by a faster route (speed.py: one
              prefill per prompt, batching, a prefix cache, and the call cache, --cache DIR); --plain
              routes them through reference()
- hooks:      record_output() and add_to_output(), removed on exit even on an exception; layer ranges
              counted from the top (layer_keys, decoder_index, check_layer_ranges)
- retrieval:  open_retriever(spec, preset) -> search(query, k), the methods' entry point to retrieval.py
              (Lucene-parity BM25, corpus files, the on-disk index, Elasticsearch); BM25() is the
              in-memory one over a list of passages
- datasets:   load_dataset(name_or_path, limit), from questions.py (the formats of each dataset), with its
              readers of our data files (read_statements, word_list, data_json) and FreshQA's date (today)
- run loop:   add_common_args(), run(): one JSON line per question, resume, summary
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from jinja2 import TemplateError

import eval as metrics
import models      # the embedded models' files, the device, the CPU, --dtype auto, --linear kernels, int8
import retrieval
import speed       # the fast path of greedy/sample/sample_many, and the call cache (--cache DIR)
from models import (EMBEDDED, LINEARS, check_model_name, cpu_name, default_model, launcher_rank,  # noqa: F401
                    machine, quantize_int8, resolve_device, resolve_dtype, resolve_linear)
# questions.py's, which the methods read here
from questions import DATA_DIR, DATASETS, data_json, load_dataset, read_statements, today, word_list  # noqa: F401
# bad input (a one-line message, no traceback) and SeaKR's stop words: retrieval.py's, which imports no project file
from retrieval import STOP_WORDS, InputError  # noqa: F401
# speed.py's (it imports nothing from here): the decoding rules both paths follow, check_cache_dir, shared_cache
# (a KV cache's prefix reused by CtrlA's monitor, as the fast path reuses a prompt's; off under --plain)
from speed import (ContextTooLong, Generation, check_cache_dir, decode_continuations, draw, eos_ids,  # noqa: F401
                   shared_cache)


# ----------------------------------------------------------------------------------------------
# Models

CACHE_DIR = Path(os.environ.get("ADAPTIVE_RAG_CACHE", Path.home() / ".cache" / "adaptive-rag"))
_LOADED: dict = {}
DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")
_DTYPE_SAID: set = set()   # auto dtype choices already printed in this process
LINEAR = "auto"            # load_model's --linear when not told: this run's (check_inputs sets it from the flags)
_LINEAR_SAID: set = set()  # auto kernel choices already printed in this process


def linear_of(args) -> str:
    """The --linear a run's flags ask for: --plain keeps torch's own modules ("plain")."""
    linear = getattr(args, "linear", "auto") or "auto"
    if getattr(args, "plain", False):
        if linear == "onednn":
            raise InputError("--plain runs torch's own linear layers; drop --linear onednn, or drop --plain")
        return "plain"
    return linear


DEFAULT_MODEL = default_model(resolve_device("auto"))[0]


def model_path(name: str):
    """Where load_model reads a model from: an embedded alias's folder, converted from its GGUF file once;
    a Hugging Face id or a local directory as given."""
    return models.convert_embedded(name, CACHE_DIR) if name in EMBEDDED else name


def loaded_models() -> list:
    """Every model that load_model has loaded in this process (a Rowen run holds two)."""
    return [model for model, _ in _LOADED.values()]


def load_model(name: str = DEFAULT_MODEL, dtype: str = "auto", device: str = "auto", linear: str | None = None):
    """(model, tokenizer) for an embedded alias, a Hugging Face id or a local directory; once per process
    for each (name, dtype, device, linear kernel), all as resolved.

    dtype: auto (models.choose_dtype: bfloat16 on GPUs, AMX CPUs and AMD ones with AVX512-BF16, else float32),
    float32, bfloat16, float16, or int8 (CPU only: float32 loaded, then models.quantize_int8).
    device: auto (cuda if available), cpu, cuda; on a GPU the weights are spread with device_map="auto".
    linear: the kernel of the linear layers (models.resolve_linear): auto (models.choose_linear), plain
    (torch's nn.Linear), onednn (models.use_onednn_linear); None: this run's --linear (LINEAR; --plain: plain)."""
    device = resolve_device(device)
    check_model_name(name)
    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype}: use one of {', '.join(DTYPES)}")
    if dtype == "int8" and device != "cpu":
        raise InputError(f"--dtype int8 runs on the CPU only (device {device}); pass --device cpu, or "
                         "--dtype bfloat16 on the GPU")
    asked_dtype, asked_linear = dtype, LINEAR if linear is None else linear
    dtype, why = resolve_dtype(dtype, device)
    if asked_dtype == "auto" and (dtype, why) not in _DTYPE_SAID:
        _DTYPE_SAID.add((dtype, why))
        print(f"--dtype auto: {dtype} ({why})", file=sys.stderr)
    linear, why = resolve_linear(asked_linear, device, dtype)
    if asked_linear == "auto" and (linear, why) not in _LINEAR_SAID:
        _LINEAR_SAID.add((linear, why))
        print(f"--linear auto: {linear} ({why})", file=sys.stderr)
    key = (name, dtype, device, linear)
    if key in _LOADED:
        return _LOADED[key]
    path = model_path(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    kwargs = {"dtype": torch.float32 if dtype == "int8" else getattr(torch, dtype)}
    if device.startswith("cuda"):   # "cuda": one process, every GPU it sees; a shard under torchrun: cuda:N, its own
        kwargs["device_map"] = "auto" if device == "cuda" else device
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if device == "cpu":
        model.to("cpu")
    if dtype == "int8":
        models.quantize_int8(model)
    if linear == "onednn":
        models.use_onednn_linear(model)
    setattr(model, speed.KERNEL_ATTR, linear)     # the call cache keys on it: rounding differs between kernels
    speed.use_grouped_attention(model)
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # batched decoding appends on the right
    _LOADED[key] = (model, tok)
    return model, tok


def verify_embedded(aliases=None) -> None:
    """Join (once, the split aliases) and verify every embedded GGUF file, printing its sha256 (`make` runs this)."""
    models.verify_embedded(CACHE_DIR, aliases)


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder blocks of a causal LM (LLaMA, Mistral, Gemma, Qwen: model.model.layers)."""
    return model.model.layers


def layer_keys(spec: str) -> list[int]:
    """"B:E" -> the keys -B, -B-1, ..., -(E-1), counted from the top as representation-reading code writes
    a layer range (CtrlA's official range(-begin, -end, -1)); key -k is HF hidden_states[-k]."""
    m = re.fullmatch(r"(\d+):(\d+)", spec.strip())
    if not m or not 0 < int(m[1]) < int(m[2]):
        raise InputError(f"layer range '{spec}': expected B:E with 0 < B < E, e.g. 5:18 (keys -5..-17)")
    return list(range(-int(m[1]), -int(m[2]), -1))


def decoder_index(key: int, n_layers: int) -> int:
    """Key -k is HF hidden_states[-k], the output of 0-based decoder layer n_layers - k."""
    if not -n_layers <= key <= -1:
        raise InputError(f"layer key {key} is outside -1..-{n_layers} for this {n_layers}-layer model; "
                         f"set the layer ranges B:E with E <= {n_layers + 1}")
    return n_layers + key


def scaled_range(spec: str, n_layers: int, reference: int = 32) -> str:
    """A "B:E" range written for a `reference`-layer model, moved to the same share of the depth of an
    n_layers model: what check_layer_ranges suggests for a shallower model."""
    b, e = (int(x) for x in spec.split(":"))
    b = max(1, round(b * n_layers / reference))
    return f"{b}:{max(b + 1, min(n_layers + 1, round(e * n_layers / reference)))}"


def check_layer_ranges(model, name: str, ranges: dict, defaults: dict, reference: str) -> None:
    """Every key of ranges ({flag: "B:E"}) names a decoder layer of the model `name`; where the defaults
    (written for the 32 layers of `reference`) reach past a shallower model, the error gives their scaled_range."""
    n, deepest = len(decoder_layers(model)), max(-k for spec in ranges.values() for k in layer_keys(spec))
    if ranges == defaults and n < deepest:
        raise InputError(f"the default layer ranges ({', '.join(defaults.values())}; {reference} has 32 layers) "
                         f"need {deepest} decoder layers and {name} has {n}; pass the same share of its depth: "
                         + " ".join(f"{flag} {scaled_range(spec, n)}" for flag, spec in defaults.items()))
    for flag, spec in ranges.items():
        if max(-k for k in layer_keys(spec)) > n:
            raise InputError(f"{flag} {spec}: {name} has {n} decoder layers; pass B:E with E <= {n + 1}")


# ----------------------------------------------------------------------------------------------
# Prompts

def chat_prompt(tok, user: str, system: str | None = None, history: list[dict] = ()) -> str:
    """Prompt text for one user turn (after `history`) in the model's chat template.

    A model without a chat template (a base model such as Gemma-3-270M) gets a plain
    "User:/Assistant:" transcript ending in "Assistant:"; decode it with stop=turn_stops(tok).

    subtle: the transcript starts with the BOS token when the tokenizer does not add one itself
    (Gemma-3's, converted from GGUF, does not; without BOS the model only repeats "Assistant:").
    """
    messages = ([{"role": "system", "content": system}] if system else []) + list(history)
    messages.append({"role": "user", "content": user})
    if tok.chat_template:
        try:
            return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except TemplateError:
            if not system:
                raise
        # a template that refuses a system turn (Mistral-7B-Instruct-v0.1's first one, Gemma-2's): the system
        # text opens the first user turn, followed by a blank line, where Mistral's later templates put it
        rest = messages[1:]
        i = next(j for j, m in enumerate(rest) if m["role"] == "user")
        rest[i] = {**rest[i], "content": f"{system}\n\n{rest[i]['content']}"}
        return tok.apply_chat_template(rest, tokenize=False, add_generation_prompt=True)
    text = "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages) + "\n\nAssistant:"
    if tok.bos_token and tok("a")["input_ids"][:1] != [tok.bos_token_id]:
        text = tok.bos_token + text
    return text


def turn_stops(tok) -> tuple[str, ...]:
    """Stop strings for a chat_prompt: a plain transcript would go on to write the next user turn."""
    return () if tok.chat_template else ("\nUser:",)


def encode(tok, prompt: str | list[int]) -> list[int]:
    """Token ids of a prompt, with the tokenizer's BOS unless the text already carries it. A prompt given
    as token ids is returned as it is: resuming a generation from its ids keeps exactly the tokens the
    model produced, where re-encoding the decoded text may not (see below).

    subtle: a text prompt must not end in a space, and so the trailing spaces are dropped. Both kinds of
    tokenizer make a final space a token of its own that the model rarely saw there: SentencePiece
    (LLaMA-2, Mistral) encodes "Answer: " as [..."Answer:", "▁"], byte-level BPE (SmolLM2, Qwen, GPT-2)
    as [..."Answer", ":", " "]; inside a text the space belongs to the next word ("▁Paris", " Paris").
    """
    if not isinstance(prompt, str):
        return list(prompt)
    text, bos = prompt.rstrip(" "), tok.bos_token
    return tok(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"]


def encode_offsets(tok, text: str):
    """encode's ids of a text (BOS unless the text carries it), with each token's character span."""
    bos = tok.bos_token
    return tok(text, add_special_tokens=not (bos and text.startswith(bos)), return_offsets_mapping=True)


# ----------------------------------------------------------------------------------------------
# Generation: the reference path
# What every method call computes, written plainly: reference() below is one screen a reader can
# check. greedy(), sample() and sample_many() give the same texts, log-probabilities and hidden
# states (tests/test_generation.py checks it) by a faster route, speed.py's fast path; --plain
# (speed.PLAIN = True) makes them call reference() itself. The rules both follow (the Generation a row
# becomes, eos_ids, decode_continuations, draw) are speed.py's, imported above.

@torch.inference_mode()
def reference(model, tok, prompt: str | list[int], k: int = 0, *, with_greedy: bool = True,
              temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, max_new_tokens: int = 64,
              stop: tuple[str, ...] = (), seed: int = 0, hidden_module=None) -> list[Generation]:
    """Row 0 the greedy continuation of `prompt` (with_greedy), then k samples, decoded step by step
    with a plain forward loop and transformers' own KV cache (one prefill, copied to every row).

    A row ends at EOS, at a stop string (the text is cut before it) or after max_new_tokens. With a
    hidden_module, the row's last token is then replaced by EOS and fed once more, and the module's
    output at that position is the row's `hidden`: the state of prompt + generated[:-1] + [EOS]
    (prompt + generated + [EOS] for a row that ended at EOS: EOS is not among its generated tokens).
    The official SeaKR code (its modified vLLM stop checker) reads exactly this state."""
    ids = encode(tok, prompt)
    check_context(model, len(ids), max_new_tokens)
    n, ends, eos = int(with_greedy) + k, eos_ids(model, tok), tok.eos_token_id
    generator = torch.Generator().manual_seed(seed)   # all k rows draw from it, in row order, as a batch
    gen, lps, texts, finish, hidden = [[] for _ in range(n)], [[] for _ in range(n)], [""] * n, [None] * n, [None] * n
    seen = {}
    hook = None if hidden_module is None else hidden_module.register_forward_hook(
        lambda m, i, o: seen.__setitem__("h", (o[0] if isinstance(o, tuple) else o)[:, -1]))
    try:
        out = model(input_ids=torch.tensor([ids], device=model.device), use_cache=True, logits_to_keep=1)
        past, logits = out.past_key_values, out.logits[:, -1].float().repeat(n, 1)
        past.batch_repeat_interleave(n)
        for _ in range(max_new_tokens + 1):
            for r in range(n):       # the state fed last step, for rows that had just ended
                if hook is not None and finish[r] is not None and hidden[r] is None:
                    hidden[r] = seen["h"][r].float().cpu()
            live = [r for r in range(n) if finish[r] is None]
            if not live:
                break
            pick, logp = logits.argmax(-1), logits.log_softmax(-1)
            drawing = [r for r in live if r >= int(with_greedy)]
            if drawing:
                pick[drawing] = draw(logits[drawing], temperature, top_k, top_p, generator)
            for r in live:
                t = int(pick[r])
                if t in ends:
                    finish[r] = "eos"
                    continue
                gen[r].append(t)
                lps[r].append(float(logp[r, t]))
                texts[r] = decode_continuations(tok, [gen[r]])[0]
                hits = [(texts[r].find(s), s) for s in stop if s in texts[r]]
                if hits:
                    at, finish[r] = min(hits)
                    texts[r] = texts[r][:at]
                elif len(gen[r]) >= max_new_tokens:
                    finish[r] = "length"
            if hook is None and None not in finish:
                break
            feed = [[gen[r][-1] if finish[r] is None else eos] for r in range(n)]   # an ended row: EOS
            out = model(input_ids=torch.tensor(feed, device=model.device), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1].float()
    finally:
        if hook is not None:
            hook.remove()
    return [Generation(texts[r], gen[r], lps[r], finish[r], hidden[r]) for r in range(n)]


def check_context(model, prompt_tokens: int, max_new_tokens: int) -> None:
    """InputError unless the prompt and its continuation fit in the model's context (a longer one would be
    read at positions the model never saw, silently), and neither is empty (a batch's row of padding alone)."""
    if prompt_tokens < 1 or max_new_tokens < 1:
        raise InputError(f"a prompt of {prompt_tokens} tokens and {max_new_tokens} new ones: nothing to continue")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and prompt_tokens + max_new_tokens > limit:
        raise ContextTooLong(f"prompt of {prompt_tokens} tokens + {max_new_tokens} new ones exceeds the model's "
                             f"context of {limit} tokens; use a shorter question or fewer passages, or a model "
                             "with a longer context")


# ----------------------------------------------------------------------------------------------
# Generation: the entry points the methods call (the fast path; --plain: the reference)

def greedy(model, tok, prompts: str | list[int] | list, max_new_tokens: int = 64, stop: tuple[str, ...] = (),
           hidden_module=None):
    """Greedy continuation of one prompt (returns a Generation) or a batch (returns a list). A prompt
    is a text or a list of token ids (see encode). Each row is what reference() gives for it: the batch
    is left-padded and decoded together, each row the text of decoding it alone. With --cache, a call
    whose inputs all equal an earlier one's returns its stored rows (call cache)."""
    single = isinstance(prompts, str) or (len(prompts) > 0 and isinstance(prompts[0], int))
    batch = [prompts] if single else list(prompts)
    if not batch:
        return []
    ids = [encode(tok, p) for p in batch]
    for row in ids:
        check_context(model, len(row), max_new_tokens)
    stop = tuple(stop)

    def compute():
        if speed.PLAIN:
            return [reference(model, tok, row, max_new_tokens=max_new_tokens, stop=stop,
                              hidden_module=hidden_module)[:1] for row in ids]
        return [[g] for g in speed.fast_greedy(model, tok, ids, max_new_tokens, stop, hidden_module)]
    outs = [g for [g] in speed.through_cache(model, tok, "greedy", ids, compute, max_new_tokens=max_new_tokens,
                                             stop=stop, hidden_module=hidden_module)]
    return outs[0] if single else outs


def sample(model, tok, prompt: str, k: int, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           max_new_tokens: int = 64, stop: tuple[str, ...] = (), seed: int = 0, hidden_module=None,
           with_greedy: bool = False) -> list[Generation]:
    """k sampled continuations of one prompt (with_greedy=True: the greedy one first, k+1 rows): what
    reference() computes, including each row's hidden state at its final (EOS) position, here from
    ONE prefill decoded as one batch whose rows share one copy of the prompt's KV cache. SeaKR's
    every model call needs both. The draws are repeatable for a given seed.
    """
    return sample_many(model, tok, [prompt], k, seeds=[seed], temperature=temperature, top_k=top_k,
                       top_p=top_p, max_new_tokens=max_new_tokens, stop=stop, hidden_module=hidden_module,
                       with_greedy=with_greedy)[0]


def sample_many(model, tok, prompts: list[str], k: int, *, seeds: list[int], temperature: float = 1.0,
                top_k: int = 0, top_p: float = 1.0, max_new_tokens: int = 64, stop: tuple[str, ...] = (),
                hidden_module=None, with_greedy: bool = False) -> list[list[Generation]]:
    """sample() for several prompts in one batch (SeaKR's candidate passages): each prompt's rows are
    reference(model, tok, prompt, k, seed=its seed, ...), hidden states included. The fast path
    (speed.fast_sample) prefills the prompts together (their shared head once) and draws each prompt's
    rows from a generator seeded with its own seed, so every prompt gets the texts a call of its own
    would give. With --cache, a call whose inputs all equal an earlier one's returns its stored rows."""
    kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens,
              stop=tuple(stop), hidden_module=hidden_module, with_greedy=with_greedy)
    ids = [encode(tok, p) for p in prompts]
    for row in ids:
        check_context(model, len(row), max_new_tokens)
    seeds = [int(s) for s in seeds]

    def compute():
        if speed.PLAIN:
            return [reference(model, tok, row, k, seed=s, **kw) for row, s in zip(ids, seeds)]
        return speed.fast_sample(model, tok, ids, k, seeds, **kw)
    return speed.through_cache(model, tok, "sample", ids, compute, k=k, seeds=seeds, **kw)


# ----------------------------------------------------------------------------------------------
# Hooks

@contextlib.contextmanager
def record_output(module):
    """Collect `module`'s output (every position) at each forward call; the hook is removed on exit.
    A greedy/sample call made meanwhile is computed, never served from the call cache (--cache)."""
    outputs: list[torch.Tensor] = []
    handle = module.register_forward_hook(
        lambda m, i, o: outputs.append((o[0] if isinstance(o, tuple) else o).detach()))
    try:
        yield outputs
    finally:
        handle.remove()


@contextlib.contextmanager
def add_to_output(module, vector: torch.Tensor):
    """Add `vector` to `module`'s output at every position, prompt and generated tokens alike.

    subtle: a steered prompt's KV cache differs from the plain one, so cached prefixes are kept per
    set of active steering vectors (their exact values): a steered prefix serves only calls under
    the same steering (CtrlA's next segment), and a plain one only plain calls.
    """
    def hook(m, i, o):
        if isinstance(o, tuple):
            return (o[0] + vector.to(o[0].dtype).to(o[0].device),) + tuple(o[1:])
        return o + vector.to(o.dtype).to(o.device)
    key = (id(module), hashlib.sha1(vector.detach().float().cpu().numpy().tobytes()).hexdigest())
    hook.steering = key[1]     # the call cache's key reads it (speed.call_key)
    handle = module.register_forward_hook(hook)
    speed.STEERING.append(key)
    try:
        yield
    finally:
        handle.remove()
        speed.STEERING.remove(key)


# ----------------------------------------------------------------------------------------------
# Reading states

@torch.inference_mode()
def last_token_states(model, tok, prompts, batch: int = 32) -> torch.Tensor:
    """[L, N, d]: every decoder layer's output (HF hidden_states[1:]) at each prompt's (text or token
    ids) last token, float32, on the CPU.

    The prompts' common leading tokens (a chat template and a persona: most of each of CtrlA's contrast
    prompts) are prefilled once and their KV cache shared by every batch; the rest follows it left-padded,
    with position ids that count real tokens only."""
    rows = [encode(tok, p) for p in prompts]
    width = min(len(r) for r in rows) - 1
    n = next((i for i in range(width) if any(r[i] != rows[0][i] for r in rows)), width)
    dev = model.device
    shared = model(input_ids=torch.tensor([rows[0][:n]], device=dev)).past_key_values if n else None
    out = []
    for i in range(0, len(rows), batch):
        part = [r[n:] for r in rows[i:i + batch]]
        width = max(len(r) for r in part)
        ids = torch.tensor([[tok.pad_token_id] * (width - len(r)) + r for r in part], device=dev)
        tail = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in part], device=dev)
        past = copy.deepcopy(shared)
        if past is not None:
            past.batch_repeat_interleave(len(part))
        hs = model(input_ids=ids, attention_mask=torch.cat([tail.new_ones(len(part), n), tail], 1),
                   position_ids=n + (tail.cumsum(-1) - 1).clamp(min=0), past_key_values=past,
                   output_hidden_states=True, logits_to_keep=1).hidden_states
        out.append(torch.stack([h[:, -1] for h in hs[1:]]).float().cpu())
    return torch.cat(out, dim=1)


@torch.inference_mode()
def text_states(model, tok, text: str):
    """(every decoder layer's output over the text [L, T, d], float32 on the CPU; its tokens' char spans)."""
    enc = encode_offsets(tok, text)
    hs = model(input_ids=torch.tensor([enc["input_ids"]], device=model.device), output_hidden_states=True,
               logits_to_keep=1).hidden_states
    return torch.stack(hs[1:])[:, 0].float().cpu(), enc["offset_mapping"]


def precision(model) -> str:
    """The precision a model computes in: its dtype's name, or int8 (models.quantize_int8 keeps float32's dtype)."""
    if any(hasattr(m, "_packed_params") for m in model.modules()):
        return "int8"
    return str(model.dtype).removeprefix("torch.")


def stored_features(model, name: str, sources, compute, what: str, path=None) -> dict:
    """{kind: {name: tensor}} read from a model once and kept on disk: at `path`, else in the cache under
    `name` and a digest of `sources` (the bytes the features are read from: statement files, the prompts'
    token ids) and of the precision (float32's none: its key is the one from before it counted).
    Loaded where the file exists, else computed, each kind stamped with its "dtype" (the precision) and
    written. A file read in another precision is refused in one line (one from before the stamp is taken)."""
    prec = precision(model)
    if not path:
        digest = hashlib.sha1(b"" if prec == "float32" else prec.encode())
        for part in sources:
            digest.update(part)
        path = CACHE_DIR / f"{name}-{digest.hexdigest()[:12]}.pt"
    path = Path(path)
    if path.exists():
        found = torch.load(path)
        made = {f.get("dtype") for f in found.values()} - {None}
        if made - {prec}:
            raise InputError(f"{path}: {what} were read in {', '.join(sorted(made))} and this run is {prec}; "
                             f"they differ by precision: pass --dtype {min(made)} or another file")
        return found
    print(f"computing {what} into {path} (once)", file=sys.stderr)
    found = {kind: {**f, "dtype": prec} for kind, f in compute().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(found, path)
    return found


# ---------------------------------------------------------------------------------------------
# Retrieval

def open_retriever(spec, preset="seakr"):
    """The one entry point to retrieval (retrieval.py): passages, a corpus file, an index directory or
    es://HOST:PORT/INDEX, opened with the method's preset; returns an object with search(query, k)."""
    return retrieval.open_retriever(spec, preset)


def BM25(passages, k1=1.2, b=0.75):
    """In-memory BM25 over passages with the "seakr" preset (Lucene-parity; see retrieval.LocalBM25)."""
    return retrieval.LocalBM25(passages, "seakr", k1=k1, b=b)


# ----------------------------------------------------------------------------------------------
# The run loop every method uses

def add_common_args(parser: argparse.ArgumentParser, dataset: str = "hotpotqa") -> None:
    """The arguments every method shares, in two argparse groups that --help lists after the method's own
    (call it after adding those): the questions and passages, then the engineering (model, speed, precision,
    which questions, where the output goes)."""
    data = parser.add_argument_group("questions and passages")
    engineering = parser.add_argument_group("engineering")
    engineering.add_argument("--model", default=DEFAULT_MODEL,
                             help=f"embedded alias ({', '.join(EMBEDDED)}), Hugging Face id or local directory")
    data.add_argument("--dataset", default=dataset, help="a shipped demo set: " + ", ".join(DATASETS))
    data.add_argument("--data", help="any question file in a supported format (overrides --dataset)")
    data.add_argument("--corpus", default="demo",
                      help="'demo' (data/corpus.jsonl), 'contexts' (the questions' own paragraphs, "
                           "pooled), a corpus file (JSONL, DPR psgs_w100.tsv, FlashRAG JSONL), an index "
                           "directory (python retrieval.py build CORPUS DIR) or es://HOST:PORT/INDEX")
    engineering.add_argument("--limit", type=int, help="only the first N questions")
    engineering.add_argument("--skip", type=int, default=0,
                             help="leave out the first N of those (a shard: --limit 50 --skip 25 answers questions "
                                  "26-50 with the ids, seeds and --corpus contexts pool of the whole run, so shard "
                                  "outputs concatenate into the whole run's file)")
    engineering.add_argument("--output", help="JSONL file of per-question results (default: outputs/...); its "
                             "settings go beside it (.settings.json) and a rerun resumes it only if they match")
    engineering.add_argument("--overwrite", action="store_true",
                             help="start --output afresh instead of resuming it (its finished rows are deleted)")
    engineering.add_argument("--seed", type=int, default=0, help="base seed; each question derives its own")
    engineering.add_argument("--device", default="auto", help="auto, cpu or cuda")
    engineering.add_argument("--dtype", default="auto", choices=DTYPES,
                             help="auto (bfloat16 on GPUs, AMX CPUs and AMD's with AVX512-BF16, "
                                  "else float32), float32, bfloat16, float16, or int8 (CPU only; faster, but it loses "
                                  "the model's closed-book knowledge: common.quantize_int8)")
    engineering.add_argument("--linear", default="auto", choices=LINEARS,
                             help="kernel of the linear layers: auto (onednn where measured faster: x86 CPUs "
                                  "with AVX2 or more in float32, with AVX512-BF16 or AMX in bfloat16; else plain), "
                                  "plain (torch's nn.Linear: MKL for float32 on CPUs), onednn (oneDNN's linear on "
                                  "weights reordered at load; CPU, float32 or bfloat16); rounding differs, so a run "
                                  "file is resumed only with the kernel it began with")
    engineering.add_argument("--plain", action="store_true",
                             help="decode every model call with common.reference (a plain loop over transformers' "
                                  "own cache; no prefix cache, no batching) on torch's own linear layers "
                                  "(--linear plain): same outputs, slower")
    engineering.add_argument("--cache", metavar="DIR",
                             help="call cache: a model call whose inputs all equal a stored one's returns its "
                                  "stored results; new calls are stored in DIR (a sweep recomputes only the calls that "
                                  "differ; not a setting: the output is the same with or without it)")


def load_questions(args) -> list[dict]:
    return load_dataset(args.data or args.dataset, limit=args.limit)


class NothingToDo(Exception):
    """Every question a run asks for is already in its output file, with its settings: nothing to load."""


def _nothing_to_do(args, method: str, code_file: str, records: list[dict]) -> None:
    """Before any model loads: NothingToDo when every question is already in the output file, the settings
    refusal when it was made with others. A flag left to the method's default (None here: resolved once the
    model loads) passes where the file's was a default too (DEFAULTED), and run() compares the values."""
    out = Path(args.output) if args.output else default_output(method, args)
    saved = out.with_suffix(".settings.json")
    if getattr(args, "overwrite", False) or not out.exists() or not saved.exists():
        return
    try:
        done = {row["id"] for row in metrics.read_rows(out)}
        old = json.loads(saved.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError):
        return              # run() reports a damaged file, with the fix
    if not done:
        return
    every, left = run_settings(args, code_file), old.get(DEFAULTED)     # left: None in a file from before it
    now = {k: v for k, v in every.items() if v is not None}
    if left is not None and (given := [k for k, v in every.items() if v is None and old.get(k) is not None
                                       and k not in left]):
        raise InputError(f"{out} was made with {given[0]} = {old[given[0]]}, this run leaves it to the method's "
                         f"default; pass {given[0]} {old[given[0]]}, another --output, or --overwrite to start afresh")
    _resume_check(out, len(done), {**{k: v for k, v in old.items() if k not in now}, **now})
    skip = getattr(args, "skip", 0) or 0
    if not [r for r in records[skip:] if r["id"] not in done]:
        raise NothingToDo(f"all {len(records) - skip} questions are already in {out}; nothing to run "
                          "(--overwrite starts afresh, a larger --limit adds questions)")


def check_inputs(args, method: str | None = None, code_file: str | None = None) -> list[dict]:
    """Check every input a run names before a model loads (a model takes seconds to minutes): the
    question file (each record read, see load_dataset), --limit, --linear on this device and
    precision, a --corpus file and the --output path; with the run's `method` name and code file, also
    that --output is a .jsonl, whether it already holds every question (NothingToDo) or was made with other
    settings (InputError). Returns the questions. InputError with a one-line message otherwise. Also
    sets the kernel the run's load_model calls use (LINEAR: --linear, or plain with --plain), the one
    run_settings records."""
    global LINEAR
    if getattr(args, "limit", None) is not None and args.limit < 1:
        raise InputError(f"--limit {args.limit}: give a positive number of questions, or leave --limit out "
                         "for all of them")
    records = load_questions(args)
    check_skip(args, records)
    if getattr(args, "unset", None) is None:    # before the method resolves any: run_settings' DEFAULTED
        args.unset = ["--" + k.replace("_", "-") for k, v in sorted(vars(args).items()) if v is None]
    device = resolve_device(getattr(args, "device", "auto"))
    LINEAR = linear_of(args)        # what load_model uses in this run unless told otherwise
    resolve_linear(LINEAR, device, resolve_dtype(getattr(args, "dtype", "auto"), device)[0])
    corpus = getattr(args, "corpus", None)
    if corpus not in (None, "demo", "contexts") and not str(corpus).startswith(("es://", "es+https://")) \
            and not Path(corpus).exists():
        raise InputError(f"--corpus {corpus}: no such file or index directory; pass demo, contexts, a corpus "
                         "file, an index directory (python retrieval.py build CORPUS DIR) or es://HOST:PORT/INDEX")
    check_writable(Path(args.output) if args.output else Path("outputs") / "x.jsonl", run=method is not None)
    if getattr(args, "cache", None):
        check_cache_dir(args.cache)
    if method is not None:
        _nothing_to_do(args, method, code_file, records)
    return records


def check_skip(args, records: list[dict]) -> None:
    """InputError unless --skip leaves a question of those loaded (checked before any model loads)."""
    skip = getattr(args, "skip", 0) or 0
    if skip < 0 or (records and skip >= len(records)):
        raise InputError(f"--skip {skip}: {len(records)} questions are loaded; skip 0 to {len(records) - 1} of them")


def check_writable(out: Path, run: bool = True) -> None:
    """InputError unless `out` can be created or appended to, and a `run` file's ends in .jsonl (x.json and x would
    share x.jsonl's x.settings.json), the suggestion keeping a dotted name whole; nothing is created here."""
    where = out if out.exists() else next(p for p in out.parents if p.exists())
    if out.is_dir() or not (out.exists() or where.is_dir()) or not os.access(where, os.W_OK):
        raise InputError(f"cannot write {out} ({'a directory' if out.is_dir() else 'not writable'}); "
                         "pass --output with a writable path")
    if run and out.suffix != ".jsonl":
        raise InputError(f"--output {out}: a run file's name ends in .jsonl; pass --output "
                         f"{out.with_suffix('.jsonl') if out.suffix == '.json' else out.with_name(out.name + '.jsonl')}")


def load_retriever(args, records: list[dict], preset: str = "seakr"):
    """The retriever named by --corpus: 'demo', 'contexts' (the questions' own paragraphs), a corpus
    file, an index directory or es://HOST:PORT/INDEX, opened with the method's preset."""
    if args.corpus == "contexts":
        passages = retrieval.contexts_corpus(records)
        if not passages:
            raise InputError("--corpus contexts: the loaded questions carry no context paragraphs; "
                             "use --corpus demo or a corpus file")
        if lacking := sum(r.get("gold_in_contexts") is False for r in records):
            print(f"warning: --corpus contexts: the supporting paragraphs of {lacking} of {len(records)} questions "
                  "are not among their contexts (not the distractor setting), so the pool lacks them; for "
                  "HotpotQA's distractor setting read hotpot_dev_distractor_v1_100.json", file=sys.stderr)
        if any(r.get("supporting_only") for r in records):
            print("warning: --corpus contexts: these questions' contexts are their supporting paragraphs alone "
                  "(FlashRAG's MuSiQue), so every passage of the pool is gold: an oracle, not a distractor setting",
                  file=sys.stderr)
        return open_retriever(passages, preset)
    return open_retriever(str(DATA_DIR / "corpus.jsonl") if args.corpus == "demo" else args.corpus, preset)


def question_seed(base: int, qid: str) -> int:
    """A per-question seed: a resumed run draws from an uninterrupted one's random streams. subtle: not always to
    the same tokens: resumed, the few-shot head is prefilled whole, not reused from the question before
    (speed.py), the last float bits apart (about 1e-6 in float32), which can turn a near-tie."""
    import zlib
    return (base * 1_000_003 + zlib.crc32(str(qid).encode())) % (2**31)


def default_output(method: str, args) -> Path:
    data = Path(args.data).stem if args.data else args.dataset
    model = Path(args.model).name if args.model else DEFAULT_MODEL
    return Path("outputs") / f"{method}_{data}_{model}.jsonl"


GOLD_FIELDS = ("label", "best_answer", "correct_answers", "correct_answers_text", "incorrect_answers")
NOT_SETTINGS = ("limit", "skip", "output", "overwrite", "cache", "unset")  # which questions and where, not a row
DEFAULTED = "left to the method's default"   # the flags a run did not give and its method resolved (not compared)


def run_settings(args, code_file: str | None) -> dict:
    """What decides every row of an output file: each command-line flag (its flag name -> value) but
    NOT_SETTINGS, the precision and device the model computes in (`--dtype auto` resolved as
    load_model resolves it: a file begun in float32 on an AVX2 CPU is not resumed in bfloat16 on an AMX
    one), the kernel of its linear layers (`--linear`, resolved likewise: its rounding differs), the code
    (sha256 of the method file and of every project file imported: project_files), the method's data files
    (method_data_files) and the content of the question file and of the corpus file, or with `--corpus
    contexts` how many questions' paragraphs make the pool."""
    flags = {"--" + k.replace("_", "-"): v for k, v in sorted(vars(args).items()) if k not in NOT_SETTINGS}
    device = resolve_device(getattr(args, "device", "auto"))
    dtype = resolve_dtype(getattr(args, "dtype", "auto"), device)[0]
    flags["precision"] = f"{dtype} on {device.split(':')[0]}"   # torchrun's cuda:RANK is each rank's own GPU
    flags["linear layers"] = resolve_linear(linear_of(args), device, dtype)[0]
    data = args.data or (DATA_DIR / DATASETS[args.dataset] if args.dataset in DATASETS else args.dataset)
    corpus = getattr(args, "corpus", None)
    corpus = DATA_DIR / "corpus.jsonl" if corpus == "demo" else None if corpus in (None, "contexts") else corpus
    settings = {**flags, "method code": f"{Path(code_file or '-').name}, {speed.file_id(code_file or '-')}",
                **{f"{f.name} code": speed.file_id(f) for f in project_files(code_file)},
                **{f"{f.name} data": speed.file_id(f) for f in method_data_files(args, code_file)},
                "question file": speed.file_id(data), **({"corpus file": speed.file_id(corpus)} if corpus else {})}
    if getattr(args, "corpus", None) == "contexts":   # the pool is the first --limit questions' paragraphs: a run
        settings["contexts pooled from"] = args.limit or "all"   # resumed under another limit would search another
    if getattr(args, "unset", None) is not None:      # check_inputs' record of the flags not given
        settings[DEFAULTED] = [f for f in args.unset if flags.get(f) is not None]
    return json.loads(json.dumps(settings, default=str))     # as the settings file will read back


def method_data_files(args, code_file: str | None) -> list[Path]:
    """The data files a method's rows depend on besides its questions and corpus: its module's DATA_FILES
    (prompt exemplars, word lists, statements: data/) and any file a --*-data flag names instead."""
    module = next((m for m in list(sys.modules.values()) if code_file and getattr(m, "__file__", None)
                   and Path(m.__file__).resolve() == Path(code_file).resolve()), None)
    given = [Path(v) for k, v in sorted(vars(args).items()) if k.endswith("_data") and k != "data" and v]
    return [Path(f) for f in getattr(module, "DATA_FILES", ())] + given


def project_files(code_file: str | None = None) -> list[Path]:
    """The project's shared files this process has imported (common.py, eval.py, retrieval.py, questions.py,
    ...): what a run's rows depend on besides its method file (`code_file`, its own entry). The other method
    files and view.py are no part of a run, though a test process may have imported them."""
    root, skip = Path(__file__).resolve().parent, Path(code_file).resolve() if code_file else None
    found = {Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    return sorted(f for f in found if f.parent == root and f.suffix == ".py" and f != skip and f.is_file()
                  and f.stem not in ("seakr", "ctrla", "rowen", "view", "analysis"))


def read_settings(path: Path, fix: str = "") -> dict:
    """A run's settings file (<output>.settings.json) as a dict; InputError, one line ending in `fix`,
    where it cannot be read or holds no JSON object."""
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read ({e}){fix}") from None
    if not isinstance(saved, dict):
        raise InputError(f"{path}: not a run's settings (a JSON object){fix}")
    return saved


# A question file or corpus given by another path (a local copy elsewhere, or data/raw/X after `make data`)
# is the same input when its content is: the setting holding its hash decides
SAME_BY_CONTENT = {"--data": "question file", "--corpus": "corpus file"}


def _resume_check(out: Path, rows: int, settings: dict) -> None:
    """Resume only the run that was asked for: InputError naming the first differing setting."""
    fixes = "pass another --output, or --overwrite to start it afresh"
    path = out.with_suffix(".settings.json")
    if not path.exists():
        raise InputError(f"{out} has {rows} finished questions but no {path.name} to check they are this "
                         f"run's settings; {fixes}")
    old = read_settings(path, f"; {fixes}")
    if (key := first_difference(old, settings)) is not None:
        raise InputError(f"{out} was made with {key} = {old.get(key, '(unset)')}, this run has "
                         f"{settings.get(key, '(unset)')}; {fixes}")


def first_difference(old: dict, now: dict) -> str | None:
    """The first setting (in sorted order) whose value differs between two settings files, or None; a question
    file or corpus named by another path is the same input when its content is (SAME_BY_CONTENT)."""
    for key in sorted((set(old) | set(now)) - {DEFAULTED}):
        content = SAME_BY_CONTENT.get(key)      # a file named by another path is the same input if its bytes are
        if content and old.get(content) == now.get(content) and now.get(content) not in (None, "missing"):
            continue
        if old.get(key, "(unset)") != now.get(key, "(unset)"):
            return key
    return None


def finished_rows(out: Path) -> dict:
    """{id: row} of the rows already in OUT, a row cut short dropped first; InputError for a damaged file."""
    _finish_last_line(out)
    try:
        return {row["id"]: row for row in metrics.read_rows(out)}
    except ValueError as e:
        raise InputError(str(e)) from None
    except KeyError:
        raise InputError(f"{out}: a row without an id; pass another --output or --overwrite") from None


def _finish_last_line(out: Path) -> None:
    """A row cut short by an interruption is dropped (and recomputed); a complete last row without its
    newline gets one (the next row would otherwise be appended to its line)."""
    data = out.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    try:
        json.loads(data[cut:])
        with open(out, "ab") as f:      # in place: an interruption here loses no finished row
            f.write(b"\n")
    except ValueError:
        os.truncate(out, cut)


_BAR: list = []     # the progress bar of the run in progress, for progress()


def progress(text: str) -> None:
    """Show what the question in hand is doing beside the run's progress bar (a Rowen question takes minutes)."""
    for bar in _BAR:
        bar.set_postfix_str(text, refresh=True)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during run(): the message says what was saved and how to resume."""


def run(args, method: str, solve, records: list[dict] | None = None, code: str | None = None) -> dict:
    """Answer every question with solve(record) -> {prediction, retrievals, model_calls, trace}: one JSON
    line per question as soon as it is done, the run's settings (run_settings) beside the output
    (<output>.settings.json). A rerun resumes: ids already in the output are skipped, if the settings are
    the same (else InputError; --overwrite starts afresh). A question whose solve raises InputError (a
    prompt longer than the model's context) is a failed row (prediction "", "error": the message; scored
    wrong). Then the summary (eval.summarize), printed and saved. The settings hash `code`, the method's
    file (default: the file that defines solve, else the program run)."""
    code = code or getattr(getattr(solve, "__code__", None), "co_filename", None) or \
        getattr(sys.modules["__main__"], "__file__", None)
    if getattr(args, "plain", False):    # REUSE_PREFIX: CtrlA's monitor cache too (shared_cache)
        speed.PLAIN, speed.REUSE_PREFIX, speed.BATCH = True, False, False
    records = check_inputs(args) if records is None else records
    check_skip(args, records)
    records = records[getattr(args, "skip", 0) or 0:]
    out = Path(args.output) if args.output else default_output(method, args)
    rank, world = launcher_rank()
    if world > 1:
        return run_shard(args, method, solve, records, out, code)
    return answer_all(args, method, solve, records, out, code)


def answer_all(args, method: str, solve, records: list[dict], out: Path, code: str) -> dict:
    """run()'s loop over `records` into `out`: resume, settings (of the method file `code`), one row per
    question, summary."""
    from tqdm import tqdm
    check_writable(out)
    settings = run_settings(args, code)
    done = {}
    if out.exists() and getattr(args, "overwrite", False):
        out.unlink()
    if out.exists():
        done = finished_rows(out)
    if done:
        _resume_check(out, len(done), settings)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fh = open(out, "a", encoding="utf-8")
        side = out.with_suffix(".settings.tmp")     # written whole, then renamed: never left half-written
        side.write_text(json.dumps(settings, indent=1) + "\n")
        side.replace(out.with_suffix(".settings.json"))
    except OSError as e:
        raise InputError(f"cannot write {out} ({e.strerror}); pass --output with a writable path") from None
    todo = [r for r in records if r["id"] not in done]
    if done:
        print(f"resuming {out}: {len(records) - len(todo)} of {len(records)} questions already done", file=sys.stderr)
    cache, speed.CALL_CACHE = speed.CALL_CACHE, check_cache_dir(args.cache) if getattr(args, "cache", None) else None
    before, where = dict(speed.CACHE_STATS), machine(resolve_device(getattr(args, "device", "auto")))
    with fh:
        try:
            for rec in (bar := tqdm(todo, desc=method, unit="q", dynamic_ncols=True)):
                _BAR[:] = [bar]
                start, cpu_start = time.time(), time.process_time()
                try:
                    res, error = solve(rec), None
                except retrieval.Unavailable:   # the search service is down: stop here, every row kept
                    raise
                except InputError as e:  # e.g. a question longer than the model's context
                    res, error = {"prediction": ""}, str(e)
                    tqdm.write(f"failed {rec['id']}: {e}")
                row = {"id": rec["id"], "dataset": rec.get("dataset"), "question": rec["question"],
                       "answers": rec["answers"], **{k: rec[k] for k in GOLD_FIELDS if k in rec},
                       "prediction": res["prediction"], "retrievals": res.get("retrievals", 0),
                       "model_calls": res.get("model_calls", 0), "seconds": round(time.time() - start, 3),
                       # this process's CPU time, every thread's: a pause (SIGSTOP) adds to seconds, not to this
                       "cpu_seconds": round(time.process_time() - cpu_start, 3),
                       "cpu": where,   # a file may grow on machines of several kinds: its seconds name theirs
                       "libraries": models.libraries(),   # and under other versions: its rows name theirs
                       "trace": res.get("trace", {}), **({"error": error} if error else {})}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                done[rec["id"]] = row
        except KeyboardInterrupt:
            finished = sum(r["id"] in done for r in records)
            again = "without --overwrite " if getattr(args, "overwrite", False) else "again "   # it deletes the rows
            raise Interrupted(f"{finished} of {len(records)} questions are saved in {out}; "
                              f"run the same command {again}to resume") from None
        finally:
            _BAR.clear()
            if speed.CALL_CACHE is not None:
                n = {k: speed.CACHE_STATS[k] - before.get(k, 0) for k in ("served", "computed", "bypassed")}
                print(f"call cache {speed.CALL_CACHE}: {n['served']} model calls served, {n['computed']} computed"
                      + (f", {n['bypassed']} computed past it (a forward hook on the model)" if n["bypassed"] else ""),
                      file=sys.stderr)
            speed.CALL_CACHE = cache
    rows = [done[r["id"]] for r in records if r["id"] in done]
    stats = metrics.summarize(rows)
    failed = sum("error" in r for r in rows)
    summary = {"method": method, "model": args.model, "data": args.data or args.dataset,
               "corpus": getattr(args, "corpus", None), "output": str(out), **stats, "failed": failed}
    print(metrics.format_table([(out.stem, stats)]))
    if failed:
        print(f"{failed} of {len(rows)} questions failed (scored as wrong; each row's \"error\" says why)")
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out} ({len(rows)} questions; settings and summary beside it)", file=sys.stderr)
    if launcher_rank()[1] == 1:      # a shard's file goes; run_shard names the merged one
        print(view_hint(out), file=sys.stderr)
    return summary


def view_hint(out: Path) -> str:
    """The line every run ends with: the command that shows its file's decisions (view.py)."""
    return f"each question's decisions, in a page that opens offline: python view.py {out} -o {out.with_suffix('.html')} --open"


def shard_file(out: Path, rank: int | str, world: int | str) -> Path:    # str: a glob of them
    return out.with_name(f"{out.stem}.rank{rank}-of-{world}.jsonl")


def run_shard(args, method: str, solve, records: list[dict], out: Path, code: str) -> dict:
    """run() under a launcher (`torchrun --nproc-per-node N seakr.py ...`): this process answers every N-th
    question from its rank into a shard file beside OUT (resumable, as any run: shard_file), waits for the
    others (torch.distributed's barrier, over gloo), and rank 0 writes OUT: OUT's rows of other questions,
    then this run's from OUT and every shard (an interrupted run's under another process count too) in the
    questions' order, with OUT's settings and summary, and removes the shards. Each question keeps its seed
    (question_seed), the --corpus contexts pool the whole run's: OUT is one process's but for times and cpu."""
    rank, world = launcher_rank()
    settings = run_settings(args, code)
    done = finished_rows(out) if out.exists() and not getattr(args, "overwrite", False) else {}
    if done:
        _resume_check(out, len(done), settings)
    stale = [f for f in sorted(out.parent.glob(shard_file(out, "*", "*[0-9]").name)) if not f.stem.endswith(f"-of-{world}")]
    for f in [] if getattr(args, "overwrite", False) else stale:    # an interrupted run's, another process count:
        _resume_check(f, len(rows := finished_rows(f)), settings)    # its finished rows count as done
        done.update(rows)
    mine = [r for r in records[rank::world] if r["id"] not in done]
    part = shard_file(out, rank, world)
    shard_args = argparse.Namespace(**{**vars(args), "output": str(part)})
    answer_all(shard_args, f"{method} [{rank + 1}/{world}]", solve, mine, part, code)
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(days=30))
    dist.barrier()                       # every shard written
    if rank == 0:
        for r in range(world):
            done.update({row["id"]: row for row in metrics.read_rows(shard_file(out, r, world))})
        ours = {r["id"] for r in records}     # OUT's rows beyond this run's --skip / --limit stay, first
        rows = [row for i, row in done.items() if i not in ours] + [done[r["id"]] for r in records if r["id"] in done]
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
        tmp.replace(out)
        out.with_suffix(".settings.json").write_text(json.dumps(settings, indent=1) + "\n")
        stats = metrics.summarize(rows)
        summary = {"method": method, "model": args.model, "data": args.data or args.dataset,
                   "corpus": getattr(args, "corpus", None), "output": str(out), **stats,
                   "failed": sum("error" in r for r in rows), "processes": world}
        out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        for f in [shard_file(out, r, world) for r in range(world)] + stale:
            for done_file in (f, f.with_suffix(".settings.json"), f.with_suffix(".summary.json")):
                done_file.unlink(missing_ok=True)
        print(metrics.format_table([(out.stem, stats)]))
        print(f"wrote {out} ({len(rows)} questions from {world} processes; settings and summary beside it)",
              file=sys.stderr)
        print(view_hint(out), file=sys.stderr)
    dist.barrier()                       # OUT written before any process ends
    dist.destroy_process_group()
    return summary if rank == 0 else {}


def main_guard(main) -> None:
    """Run a CLI main(): bad input becomes one line on stderr and exit code 2, no traceback; Ctrl-C
    (SIGINT) stops at once, with exit code 130.

    subtle: a process started in the background by a non-interactive shell (`cmd &` in a script,
    nohup) inherits SIGINT *ignored*, and Python then installs no KeyboardInterrupt handler: such a
    run did not stop on SIGINT at all. The handler is installed here whatever was inherited."""
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except NothingToDo as e:
        print(str(e), file=sys.stderr)
    except KeyboardInterrupt as e:
        print(f"interrupted: {str(e) or 'finished questions are saved; rerun the command to resume'}", file=sys.stderr)
        sys.exit(130)
