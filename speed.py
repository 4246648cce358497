"""The fast path of common's model calls, and the call cache. Nothing a method means lives here.

common.greedy(), sample() and sample_many() give what common.reference() gives, the plain loop a reader
checks in one screen; unless --plain (PLAIN), they compute it here, faster (tests/test_generation.py
checks it equal; benchmarks/bench_sampling.py measures it):

- the rules both paths follow (common re-exports them; reference() reads them): the Generation a row
  becomes, where a row ends (eos_ids), how its text reads (decode_continuations), how a token is drawn (draw)
- the fast path: fast_greedy() and fast_sample(), over one prefill per prompt, a prompt's prefix KV cache
  reused across calls, independent prompts decoded as one batch, k samples reading one shared copy of
  their prompt's KV cache (an attention function of ours: sdpa_grouped), rows leaving the batch as they end;
  shared_cache() for a caller's own forward passes (CtrlA's monitor)
- the call cache (--cache DIR): a call whose inputs all equal a stored one's returns the stored rows
  (through_cache; the key: call_key)
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers.cache_utils import DynamicLayer

from models import attends_in_float32, cpu_flags, cpu_name
# bad input: a one-line message, no traceback; defined in retrieval.py, which imports no project file
from retrieval import InputError


class ContextTooLong(InputError):
    """A prompt and its continuation past the model's context (common.check_context): what a method may
    answer around (SeaKR ends its chain, Rowen keeps r0), where any other InputError is not its to catch."""


# ----------------------------------------------------------------------------------------------
# What both paths follow (common.reference reads these too)

@dataclass
class Generation:
    """One decoded continuation."""
    text: str                      # decoded as it reads after the prompt (decode_continuations), cut before the first stop string
    token_ids: list[int]           # generated tokens, up to the one that completed the stop (EOS excluded)
    logprobs: list[float]          # log p(token) under the model (temperature 1, no top-k/top-p)
    finish: str                    # the stop string that ended it, "eos" or "length"
    hidden: torch.Tensor | None = None  # hidden_module's output at the final position (see common.reference)

    @property
    def probs(self) -> list[float]:
        return [float(torch.tensor(lp).exp()) for lp in self.logprobs]


def eos_ids(model, tok) -> set[int]:
    """Every token id that ends a turn: the tokenizer's EOS and the generation config's list."""
    ids = {tok.eos_token_id}
    cfg = getattr(model.generation_config, "eos_token_id", None)
    ids.update(cfg if isinstance(cfg, list) else [cfg])
    return {i for i in ids if i is not None}


def decode_continuations(tok, rows: list[list[int]]) -> list[str]:
    """The texts of generated token rows as they read after their prompt, special tokens left out.

    subtle: a SentencePiece decoder (LLaMA-2, Mistral) strips the leading space of the text it decodes,
    so a continuation decoded alone loses its first space ("▁yes" -> "yes", and "So the answer is" +
    it reads "...isyes"). Each row is decoded behind an anchor token ("a") and the anchor's own text
    cut off: " yes". Byte-level BPE decodes the same either way."""
    anchor, head = _ANCHORS.get(tok) or _ANCHORS.setdefault(tok, _anchor(tok))
    texts = tok.batch_decode([[anchor] + list(r) for r in rows], skip_special_tokens=True)
    return [t[len(head):] if t.startswith(head) else tok.decode(r, skip_special_tokens=True)
            for t, r in zip(texts, rows)]


def _anchor(tok) -> tuple[int, str]:
    """(id, text) of the token that decode_continuations puts before each row."""
    anchor = tok("a", add_special_tokens=False)["input_ids"][-1]
    return anchor, tok.decode([anchor], skip_special_tokens=True)


_ANCHORS = weakref.WeakKeyDictionary()   # tokenizer -> _anchor(tokenizer)


def draw(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
          generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from softmax(logits / temperature) cut to the top-k tokens, then to the
    nucleus top-p (a token stays while the mass before it is below top_p; the first always stays),
    as the HF and vLLM samplers do. With top-k the sort and the draw run over the k candidates, not
    the whole vocabulary; without it the draw runs over the vocabulary in its own order."""
    if top_k and top_k < logits.shape[-1]:
        values, ids = logits.topk(top_k, dim=-1)              # sorted, highest first
        probs = (values / temperature).softmax(-1)
        if top_p < 1.0:
            drop = probs.cumsum(-1) - probs >= top_p
            drop[..., 0] = False                                              # even at top_p <= 0
            probs = probs.masked_fill(drop, 0.0)                              # multinomial renormalises
        choice = torch.multinomial(probs.cpu(), 1, generator=generator).to(ids.device)
        return ids.gather(-1, choice).squeeze(-1)
    probs = (logits / temperature).softmax(-1)
    if top_p < 1.0:
        ranked, order = probs.sort(dim=-1, descending=True)
        drop = ranked.cumsum(-1) - ranked >= top_p
        drop[..., 0] = False
        probs = probs.masked_fill(drop.scatter(-1, order, drop), 0.0)
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)


# ----------------------------------------------------------------------------------------------
# The fast path: what common's calls run unless --plain

PLAIN = False            # True (--plain): common's calls run common.reference() itself, nothing below

# Reuse of cached prompt prefixes (the few-shot examples, the chat template's head, the question,
# earlier steps): a single prompt that shares its start with one of the last PREFIX_SLOTS single
# prompts starts from that prompt's KV cache and pays only for its new tokens. Several slots let calls
# that alternate between prompt families (a step prompt, then a query prompt, ...) each find theirs.
# REUSE_PREFIX = False (and BATCH = False: independent prompts one by one) turn them off.
REUSE_PREFIX = True
BATCH = True
SHARE_PROMPT = True      # k samples read one shared copy of their prompt's KV cache (_SharedPromptLayer)
MIN_SHARED = 16          # shorter shared prefixes are not worth a cache fork
PREFIX_SLOTS = 4         # prompts kept per model, most recent first (about 46 KB a token for SmolLM2-135M)
_LAST = {}               # (model id, active steering) -> [(token ids, KV cache)] of recent prefills
ROW_CACHE_BYTES = 2 ** 30  # the rows of the last greedy call kept, up to this size (a conversation's next turn),
                           # per steering: CtrlA's steered and plain calls keep theirs each (2 GiB at most)
_ROWS = {}               # (model id, active steering) -> [(token ids, one-row KV cache)] of the last greedy call
STEERING = []            # (module id, digest of the vector) of each common.add_to_output in force


def fast_greedy(model, tok, ids: list[list[int]], max_new_tokens: int, stop: tuple[str, ...],
                hidden_module) -> list[Generation]:
    """common.greedy() computed on the fast path: one Generation per prompt (token ids)."""
    if len(ids) > 1 and not BATCH:
        return [fast_greedy(model, tok, [row], max_new_tokens, stop, hidden_module)[0] for row in ids]
    logits, past, mask, pos = _prefill(model, tok, ids)
    _ROWS.pop(_cache_key(model), None)   # only the last greedy call's rows are kept
    past = _for_decoding(model, past, len(ids), max_new_tokens + 1)
    return _decode(model, tok, logits, past, mask, pos, sampled=torch.zeros(len(ids), dtype=torch.bool),
                   max_new_tokens=max_new_tokens, stop=stop, temperature=1.0, top_k=0, top_p=1.0,
                   generators=None, hidden_module=hidden_module, prompt_ids=ids)


def fast_sample(model, tok, ids: list[list[int]], k: int, seeds: list[int], *, temperature: float, top_k: int,
                top_p: float, max_new_tokens: int, stop: tuple[str, ...], hidden_module,
                with_greedy: bool) -> list[list[Generation]]:
    """common.sample_many() computed on the fast path: k (+1) Generations per prompt (token ids), from one
    prefill of the prompts (their shared head once), decoded as one batch; each prompt's rows draw from
    a generator seeded with its own seed, so each gets the texts a call of its own would give."""
    kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens,
              stop=stop, hidden_module=hidden_module, with_greedy=with_greedy)
    if len(ids) > 1 and not BATCH:
        return [fast_sample(model, tok, [row], k, [s], **kw)[0] for row, s in zip(ids, seeds)]
    logits, past, mask, pos = _prefill(model, tok, ids)
    per = k + int(with_greedy)
    rows = per * len(ids)
    past = _for_decoding(model, past, rows, max_new_tokens + 1, shared_prompt=SHARE_PROMPT)
    sampled = torch.ones(rows, dtype=torch.bool)
    if with_greedy:
        sampled[::per] = False
    generators = [g for seed in seeds for g in [torch.Generator().manual_seed(seed)] * per]
    outs = _decode(model, tok, logits.repeat_interleave(per, 0), past, mask.repeat_interleave(per, 0),
                   pos.repeat_interleave(per), sampled=sampled, max_new_tokens=max_new_tokens,
                   stop=stop, temperature=temperature, top_k=top_k, top_p=top_p,
                   generators=generators, hidden_module=hidden_module)
    return [outs[i * per:(i + 1) * per] for i in range(len(ids))]


def forget_prefix() -> None:
    """Drop every cached prefix KV state."""
    _LAST.clear()
    _ROWS.clear()


# How: a prompt's prefix KV cache is kept and reused across calls (_prefill, _LAST, _ROWS);
# independent prompts are decoded as one left-padded batch; k samples of one prompt read one shared
# copy of its KV cache (_SharedPromptLayer, attended to by _sdpa_grouped); decoding writes into
# preallocated buffers (_BufferedLayer); rows that finish leave the batch (_decode).

def _forward(model, ids, mask, positions, past):
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                past_key_values=past, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :].float(), out.past_key_values


def _cache_key(model) -> tuple:
    """Cached prefixes and kept rows are per model and per set of active steering vectors."""
    return id(model), tuple(sorted(STEERING))


def _fork(cache):
    """A second handle on a KV cache. Cache updates rebind their tensors (torch.cat, indexing,
    slicing) and never write into them, so sharing the tensors is safe and copies nothing.
    (_BufferedLayer writes in place, but only into a buffer of its own, past the shared tokens.)"""
    twin = copy.copy(cache)
    twin.layers = [copy.copy(layer) for layer in cache.layers]
    return twin


class _BufferedLayer(DynamicLayer):
    """A decoding cache layer with room for the tokens still to come.

    DynamicLayer appends with torch.cat, which copies every cached token (the whole prompt, once per
    row) at every step. Here keys and values are views of buffers allocated once, with the prompt
    copied into each row (the only copy), and a step writes its own slot. Rows that finish leave with
    batch_select_indices, as before.
    """

    def __init__(self, layer: DynamicLayer, rows: int, room: int):
        super().__init__()
        b, heads, n, dim = layer.keys.shape
        self.dtype, self.device, self.is_initialized = layer.keys.dtype, layer.keys.device, True
        self._k = layer.keys.new_empty(rows, heads, n + room, dim)
        self._v = layer.values.new_empty(rows, heads, n + room, layer.values.shape[-1])
        # prompt i fills rows i * per ... (i + 1) * per - 1 (a one-prompt cache: all rows)
        self._k.view(b, rows // b, heads, n + room, dim)[:, :, :, :n] = layer.keys[:, None]
        self._v.view(b, rows // b, heads, n + room, -1)[:, :, :, :n] = layer.values[:, None]
        self._n = n
        self._views()

    def _views(self):
        self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]

    def update(self, key_states, value_states, *args, **kwargs):
        new = key_states.shape[-2]
        if self._n + new > self._k.shape[-2]:      # out of room: grow (not reached when room is enough)
            more = max(self._n + new, 2 * self._k.shape[-2]) - self._k.shape[-2]
            self._k = torch.cat([self._k, self._k.new_empty(*self._k.shape[:2], more, self._k.shape[-1])], -2)
            self._v = torch.cat([self._v, self._v.new_empty(*self._v.shape[:2], more, self._v.shape[-1])], -2)
        self._k[:, :, self._n:self._n + new] = key_states
        self._v[:, :, self._n:self._n + new] = value_states
        self._n += new
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices):
        """Keep the rows `indices` (increasing), moved up in place: indexing would build a second
        buffer while the first is still alive (the peak memory of k samples would double)."""
        for new, old in enumerate(indices.tolist()):
            if new != old:                     # old >= new: a row is read before it is overwritten
                self._k[new].copy_(self._k[old])
                self._v[new].copy_(self._v[old])
        self._k, self._v = self._k[:len(indices)], self._v[:len(indices)]
        self._views()

    def crop(self, tokens_to_remove):
        raise NotImplementedError("a decoding cache is not cropped")


class _SharedPromptLayer(_BufferedLayer):
    """k samples of one prompt: the prompt's keys and values stay ONE copy, shared by every row; the
    buffers hold only each row's own new tokens.

    subtle: the attention function must know to look at the prompt too. update() returns the rows'
    own keys with the prompt's keys and values attached as the attribute `shared_prompt`, and
    _sdpa_grouped attends over [shared prompt, own tokens] in one softmax (_attend_shared_prompt).
    """

    def __init__(self, layer: DynamicLayer, rows: int, room: int):
        DynamicLayer.__init__(self)
        b, heads, self._p, dim = layer.keys.shape
        self.group = torch.arange(b, device=layer.keys.device).repeat_interleave(rows // b)  # row -> prompt
        self.prompt = (layer.keys, layer.values)
        self.dtype, self.device, self.is_initialized = layer.keys.dtype, layer.keys.device, True
        self._k = layer.keys.new_empty(rows, heads, room, dim)
        self._v = layer.values.new_empty(rows, heads, room, layer.values.shape[-1])
        self._n = 0
        self._views()

    def _views(self):
        super()._views()
        self.keys.shared_prompt = self.prompt + (self.group,)

    def batch_select_indices(self, indices):
        super().batch_select_indices(indices)
        self.group = self.group[torch.as_tensor(indices, device=self.group.device)]   # a layer on another GPU
        self._views()

    def get_seq_length(self) -> int:
        return self._p + self._n


def _attend_shared_prompt(query, keys, values, prompt, mask, scaling):
    """softmax(q [P-keys, own keys]^T * scaling) [P-values; own values] for R rows that share their
    first P positions, reading the shared ones once for all rows: query [R, heads, q, d], own
    keys/values [R, kv_heads, n, d], prompt keys/values [1, kv_heads, P, d]; returns [R, q, heads, d]
    like transformers' attention functions. A grouped kv head serves heads // kv_heads query heads.
    With several prompts (prompt keys [b, ...]), `group` names each row's prompt and each prompt's
    rows are attended to together."""
    pk, pv, group = prompt
    if pk.shape[0] > 1:
        out = query.new_empty(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
        for g in group.unique().tolist():
            idx = (group == g).nonzero().squeeze(1)
            out[idx] = _attend_shared_prompt(query[idx], keys[idx], values[idx], (pk[g:g + 1], pv[g:g + 1], None),
                                             None if mask is None else mask[idx], scaling)
        return out
    rows, heads, q_len, dim = query.shape
    kv_heads, prompt_len = pk.shape[1], pk.shape[2]
    q = query.reshape(rows, kv_heads, heads // kv_heads * q_len, dim)     # [R, G, per*q, d]
    # prompt part: one matmul per kv head over all rows' queries
    q_all = q.transpose(0, 1).reshape(kv_heads, -1, dim)                 # [G, R*per*q, d]
    s_prompt = (q_all @ pk[0].transpose(-1, -2)).view(kv_heads, rows, -1, prompt_len).transpose(0, 1)
    s_own = q @ keys.transpose(-1, -2)                                   # [R, G, per*q, n]
    scores = torch.cat([s_prompt, s_own], dim=-1) * (scaling if scaling is not None else dim ** -0.5)
    if mask is not None:                                                 # [R, 1, q, P + n]
        m = mask[:, :, None].expand(rows, 1, heads // kv_heads, q_len, mask.shape[-1])
        m = m.reshape(rows, 1, -1, mask.shape[-1])
        scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m
    w = scores.float().softmax(-1).to(query.dtype)    # in float32, as transformers' eager attention
    w_prompt = w[..., :prompt_len].transpose(0, 1).reshape(kv_heads, -1, prompt_len)
    out = (w_prompt @ pv[0]).view(kv_heads, rows, -1, dim).transpose(0, 1) + w[..., prompt_len:] @ values
    return out.reshape(rows, heads, q_len, dim).transpose(1, 2).contiguous()


def _for_decoding(model, cache, rows: int, room: int, shared_prompt: bool = False):
    """The prefill cache ready for decoding `rows` rows and up to `room` more tokens. shared_prompt:
    the rows continue one prompt (k samples), which then stays one copy (_SharedPromptLayer).
    Sliding-window layers (Gemma 3) keep their own update, one prompt copy per row.

    subtle: only _sdpa_grouped knows that a _SharedPromptLayer's keys miss the prompt; any other
    attention function (a model loaded with "eager" or "flash_attention_2") would attend without the
    prompt and decode nonsense, silently. Such a model gets one prompt copy per row instead."""
    shared_prompt = shared_prompt and model.config._attn_implementation == "sdpa_grouped"
    make = _SharedPromptLayer if shared_prompt and rows > 1 else _BufferedLayer
    cache.layers = [make(layer, rows, room) if type(layer) is DynamicLayer
                    else _repeated(layer, rows) for layer in cache.layers]
    return cache


def _repeated(layer, rows):
    if layer.keys is not None and layer.keys.shape[0] != rows:
        layer.batch_repeat_interleave(rows // layer.keys.shape[0])
    return layer


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@torch.no_grad()  # subtle: without it the prefill's activation graph lives as long as its cache
def _prefill(model, tok, rows: list[list[int]]):
    """Forward pass over prompts given as token ids: (last logits, KV cache, attention mask, next positions).

    One prompt starts from the cached prompt (of the last PREFIX_SLOTS) or the kept row of the last
    greedy call (_ROWS) it shares the most leading tokens with, if at least MIN_SHARED. Several prompts
    are decoded as a batch, left-padded, and start from whichever saves more: each row from the kept
    row it continues (a conversation's next turn: _stitched_rows), or the head they all share (a chat
    template's system turn, few-shot examples, a question), prefilled once through the one-prompt path
    and its cache. Sliding-window caches (Gemma 3) are never cropped, so they always start afresh.
    """
    if len(rows) == 1:
        return _prefill_one(model, rows[0])
    dev = model.device
    head = min(min(_shared_prefix(rows[0], r) for r in rows[1:]), min(len(r) for r in rows) - 1)
    stitched = _stitched_rows(model, rows, beat=(head if head >= MIN_SHARED else 0) * len(rows)) \
        if REUSE_PREFIX else None
    if stitched is not None:
        cached, past = stitched
    else:
        cached, past = [0] * len(rows), None
        if REUSE_PREFIX and head >= MIN_SHARED:
            _, past, _, _ = _prefill_one(model, rows[0][:head])
            if not _reusable(past):
                past = None
            else:
                cached = [head] * len(rows)
                past.batch_repeat_interleave(len(rows))
    width_cached = max(cached)
    tails = [r[c:] for r, c in zip(rows, cached)]
    width = max(len(t) for t in tails)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(t)) + t for t in tails], device=dev)
    tail_mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in tails], device=dev)
    head_mask = torch.tensor([[0] * (width_cached - c) + [1] * c for c in cached], device=dev, dtype=torch.long)
    mask = torch.cat([head_mask, tail_mask], dim=-1)
    positions = torch.tensor(cached, device=dev)[:, None] + (tail_mask.cumsum(-1) - 1).clamp(min=0)
    logits, past = _forward(model, ids, mask, positions, past)
    return logits, past, mask, positions[:, -1] + 1


def _stitched_rows(model, rows: list[list[int]], beat: int = 0):
    """Each prompt's KV cache taken from the kept row (of the last greedy call) it continues, for a
    batch whose rows then feed the same number of new tokens T: row i keeps its first len_i - T
    tokens (at most what it shares with its kept row), left-padded. Returns (cached tokens per row,
    cache), or None when that saves no more than `beat` tokens (then nothing is built)."""
    kept = _ROWS.get(_cache_key(model), [])
    if not kept:
        return None
    best = []
    for ids in rows:
        shared = [min(_shared_prefix(ids, k[0]), len(ids) - 1) for k in kept]
        j = max(range(len(kept)), key=shared.__getitem__)
        best.append((shared[j], kept[j][1]) if shared[j] >= MIN_SHARED else (0, None))
    feed = max(len(ids) - n for ids, (n, _) in zip(rows, best))
    cached = [max(0, len(ids) - feed) for ids in rows]
    if sum(cached) <= beat:
        return None
    width = max(cached)
    template = next(c for _, c in best if c is not None)
    past = _fork(template)
    for li, layer in enumerate(past.layers):
        ref = template.layers[li]
        parts_k, parts_v = [], []
        for c, (_, row) in zip(cached, best):
            k = ref.keys.new_zeros(1, ref.keys.shape[1], width, ref.keys.shape[-1])
            v = ref.values.new_zeros(1, ref.values.shape[1], width, ref.values.shape[-1])
            if c:
                k[:, :, width - c:] = row.layers[li].keys[:, :, :c]
                v[:, :, width - c:] = row.layers[li].values[:, :, :c]
            parts_k.append(k)
            parts_v.append(v)
        layer.keys, layer.values = torch.cat(parts_k), torch.cat(parts_v)
    return cached, past


def _keep_rows(model, past, mask, rows: list[tuple[int, list[int]]]) -> None:
    """Keep rows of a greedy batch's decoding cache for the next call (row j of the cache holds `ids`
    at its unmasked positions, first to last), up to ROW_CACHE_BYTES in all."""
    store = _ROWS.setdefault(_cache_key(model), [])
    used = sum(_cache_bytes(c) for _, c in store)
    per_token = _cache_bytes(past) // max(1, past.layers[0].keys.shape[0] * past.layers[0].keys.shape[-2])
    for j, ids in rows:
        if used + per_token * len(ids) > ROW_CACHE_BYTES:
            return
        used += per_token * len(ids)
        real = mask[j].nonzero().squeeze(1)[:len(ids)]
        where = {}                  # real's copy on each layer's device (device_map over several GPUs)
        row = copy.copy(past)
        row.layers = []
        for layer in past.layers:
            one = DynamicLayer()
            one.lazy_initialization(layer.keys, layer.values)
            at = where.setdefault(layer.keys.device, real.to(layer.keys.device))
            one.keys, one.values = layer.keys[j:j + 1, :, at], layer.values[j:j + 1, :, at]  # copies
            row.layers.append(one)
        store.append((ids, row))


def _reusable(cache) -> bool:
    """Whether a cache's prefix can be cut and forked: plain key/value layers only. A sliding window (Gemma 3)
    has dropped what a shorter prefix needs, and a linear-attention state (hybrid models) cannot be cut."""
    return all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))


def _cache_bytes(cache) -> int:
    return sum(l.keys.numel() * l.keys.element_size() + l.values.numel() * l.values.element_size()
               for l in cache.layers)


def _prefill_one(model, ids: list[int]):
    dev = model.device
    key = _cache_key(model)
    slots = _LAST.setdefault(key, [])
    keep, past = 0, None
    candidates = slots + _ROWS.get(key, [])
    if REUSE_PREFIX and candidates:
        shared = [min(_shared_prefix(ids, s[0]), len(ids) - 1) for s in candidates]
        best = max(range(len(candidates)), key=shared.__getitem__)
        cache = candidates[best][1]
        if shared[best] >= MIN_SHARED and _reusable(cache):
            keep, past = shared[best], _fork(cache)
            if keep < past.get_seq_length():   # crop(0) would empty it on 4.x: see shared_cache
                past.crop(keep - past.get_seq_length())
    mask = torch.ones(1, len(ids), dtype=torch.long, device=dev)
    positions = torch.arange(keep, len(ids), device=dev)[None]
    logits, past = _forward(model, torch.tensor([ids[keep:]], device=dev), mask, positions, past)
    slots[:] = [(ids, _fork(past))] + [s for s in slots if s[0] != ids][:PREFIX_SLOTS - 1]
    return logits, past, mask, torch.tensor([len(ids)], device=dev)


def shared_cache(ids: list[int], cached_ids: list[int], cache) -> tuple[int, object]:
    """A caller's own prefix reuse (CtrlA's monitor): (n, cache) where a forward pass over `ids` may start
    from `cache`, the KV cache of a pass over `cached_ids`, cropped in place to the n leading tokens they
    share (never all of ids); (0, None) when under MIN_SHARED are shared, REUSE_PREFIX is off (--plain) or
    the cache cannot be cut (_reusable). Causal attention leaves a shared prefix's states unchanged.
    subtle: only a negative crop means "remove that many" on every transformers version (4.x reads
    crop(0) as "keep 0 tokens", 5.x a positive length as deprecated)."""
    keep = min(_shared_prefix(ids, cached_ids), len(ids) - 1)
    if not REUSE_PREFIX or keep < MIN_SHARED or not _reusable(cache):
        return 0, None
    if keep < cache.get_seq_length():
        cache.crop(keep - cache.get_seq_length())
    return keep, cache


@torch.inference_mode()
def _decode(model, tok, logits, past, mask, next_pos, *, sampled: torch.Tensor, max_new_tokens: int,
            stop: tuple[str, ...], temperature: float, top_k: int, top_p: float,
            generators: list | None, hidden_module, prompt_ids: list[list[int]] | None = None) -> list[Generation]:
    """Batched decoding from a filled KV cache; row r samples if sampled[r] else decodes greedily,
    drawing from generators[r] (the rows of one prompt share theirs, so they draw what they would alone).

    A row ends at EOS, at a stop string or after max_new_tokens. With a hidden_module, the row's
    last token is then replaced by EOS and fed once more, and the module's output at that position
    is kept: the official SeaKR code (modified vLLM stop checker) does exactly this, so the state
    read is that of prompt + generated[:-1] + [EOS]. The extra step rides along with the other
    rows' next step, so it costs no separate forward pass.

    With prompt_ids (greedy calls), each row's cache is kept when it finishes (_keep_rows): the next
    call may continue the conversation (a prompt that starts with this prompt and its answer).
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
    keep_rows = prompt_ids is not None and REUSE_PREFIX and all(type(l) is _BufferedLayer for l in past.layers)

    def leave(js):   # rows j of the cache, finished: keep prompt + the tokens fed for them (not EOS)
        if keep_rows:
            _keep_rows(model, past, mask, [(j, prompt_ids[alive[j]] + (gen[alive[j]] if finish[alive[j]] == "eos"
                                                                       else gen[alive[j]][:-1])) for j in js])
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
                leave([j for j in range(len(alive)) if j not in keep])
                idx = torch.tensor(keep, device=logits.device)
                past.batch_select_indices(idx)
                logits, mask, next_pos = logits[idx], mask[idx], next_pos[idx]
                alive = [alive[j] for j in keep]
            logp = torch.log_softmax(logits, dim=-1)
            pick = logits.argmax(-1)
            drawing = [j for j, r in enumerate(alive) if sampled[r]]
            for source in dict.fromkeys(generators[alive[j]] for j in drawing):   # in row order
                js = [j for j in drawing if generators[alive[j]] is source]
                pick[js] = draw(logits[js], temperature, top_k, top_p, source)
            feed = pick.clone()
            picks, chosen = pick.tolist(), logp.gather(-1, pick[:, None]).squeeze(-1).tolist()
            going = []
            for j, r in enumerate(alive):
                if picks[j] in ends:
                    finish[r], feed[j] = "eos", eos
                else:
                    gen[r].append(picks[j])
                    lps[r].append(chosen[j])
                    going.append(j)
            # one call into the tokenizer for all rows; only the stop-string search is per row
            decoded = decode_continuations(tok, [gen[alive[j]] for j in going])
            for j, text in zip(going, decoded):
                r = alive[j]
                texts[r] = text
                hits = [(text.find(s), s) for s in stop if s in text]
                if hits:
                    at, s = min(hits)
                    texts[r], finish[r] = text[:at], s
                elif len(gen[r]) >= max_new_tokens:
                    finish[r] = "length"
                if finish[r] is not None:
                    feed[j] = eos
            if hidden_module is None and all(finish[r] is not None for r in alive):
                break
            mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=-1)
            logits, past = _forward(model, feed[:, None], mask, next_pos[:, None], past)
            next_pos = next_pos + 1
        leave(range(len(alive)))
    finally:
        if hook is not None:
            hook.remove()
    return [Generation(texts[r], gen[r], lps[r], finish[r], hidden[r]) for r in range(n)]


# Attention over a shared prompt, and grouped key/value heads kept grouped (load_model switches a model to it)

HALF = attends_in_float32(cpu_flags())   # 16-bit states whose CPU decoding steps attend in float32 (_sdpa_grouped)


def _sdpa_grouped(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' "sdpa" attention, except for three things. Rows that share their prompt in the
    cache (_SharedPromptLayer) read it once for all rows (_attend_shared_prompt). On CPU, a decoding
    step of 16-bit states attends in float32 (the note below). And on CPU,
    grouped key/value heads (GQA) stay grouped under a padding mask: transformers then copies every
    key/value head once for each query head it serves (repeat_kv: the whole cache, three times over
    for SmolLM2, per layer and step), while torch's enable_gqa reads them in place (40 ms -> 2.6 ms
    per layer for 21 rows x 800 tokens on one CPU core, same output). Everything else goes to
    transformers' function unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    prompt = getattr(key, "shared_prompt", None)
    if prompt is not None:
        return _attend_shared_prompt(query, key, value, prompt, attention_mask, scaling), None
    if query.device.type == "cpu" and query.dtype in HALF and query.shape[2] == 1:
        # subtle: torch's CPU attention kernel is 5-6x slower on 16-bit states than on float32 ones for
        # a decoding step's one query where the CPU has no AMX (9 rows x 1,000 keys: 7.5 ms in bfloat16,
        # 1.5 ms in float32; a whole 9-row step of Qwen2.5-Coder-0.5B 176.7 ms, 96.7 ms so; AMD EPYC Zen 4,
        # benchmarks/README.md), so a step attends in float32 and returns its dtype, as far from float32's
        # output as the kernel's (at most 1.0e-3 to 1.8e-3 off in both: benchmarks/bench_attention.py).
        # With AMX the kernel is the faster one and HALF leaves bfloat16 out (models.attends_in_float32).
        mask = attention_mask if attention_mask is None or attention_mask.dtype == torch.bool else attention_mask.float()
        out, weights = _sdpa_grouped(module, query.float(), key.float(), value.float(), mask, dropout, scaling,
                                     **kwargs)
        return out.to(query.dtype), weights
    if (attention_mask is None or getattr(module, "num_key_value_groups", 1) == 1 or query.device.type != "cpu"
            or kwargs.get("position_bias") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_grouped_attention(model) -> None:
    """Switch a model that runs on "sdpa" to _sdpa_grouped (its masks are sdpa's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register("sdpa_grouped", _sdpa_grouped)
    ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa_grouped", sdpa_mask)
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation("sdpa_grouped")


# ----------------------------------------------------------------------------------------------
# Call cache (--cache DIR)
#
# As lm-evaluation-harness's --use_cache: a greedy() / sample_many() call whose inputs all equal an
# earlier one's returns the stored rows (texts, token ids, log-probabilities, finish, hidden states:
# exactly, as torch.save wrote them) instead of running the model, so a threshold sweep or an
# ablation recomputes only the calls that differ from a run already made. Off unless --cache is given
# (common.run sets CALL_CACHE). The key (call_key) is everything a call's rows depend on: the model (its
# config, its modules as printed, a sample of every weight: _model_fingerprint), the tokenizer,
# precision, kernel path, attention function, device kind and CPU threads, the decoding path (--plain
# or the fast path's switches), the code (common.py, speed.py, models.py, torch and transformers
# versions), the steering vectors in force on its modules, and the call's own arguments (prompt token
# ids, k, seeds, sampling settings, max tokens, stop strings, which module's hidden state).
#
# subtle: a hit returns exactly what the earlier call returned. The fast path's own result for the
# same inputs can differ in the last float bits with what its prefix cache held (a prompt prefilled
# whole or from a cached head: 1e-6 in a log-probability; tested within 1e-4 of reference()), so a
# call served from another run's history equals its recomputation to that tolerance, and the same
# command run again gives the same file bit for bit (tests/test_cache.py).

CALL_CACHE: Path | None = None    # the cache directory of this run (--cache), None: off
CACHE_STATS = {"served": 0, "computed": 0, "bypassed": 0}   # calls, since the process started
KERNEL_ATTR = "kernel"            # the model's resolved matrix-product kernel choice, where load_model sets one
_FINGERPRINTS = {}                # id(model or tokenizer) -> (weak reference to it, its fingerprint)
_CACHE_FORMAT = 1                 # bump when the stored entry's layout changes


def check_cache_dir(path) -> Path:
    """--cache DIR: InputError unless it is (or can be made) a writable directory; nothing is created."""
    path = Path(path)
    where = path if path.exists() else next(p for p in path.parents if p.exists())
    if not where.is_dir() or not os.access(where, os.W_OK):
        raise InputError(f"--cache {path}: {'not a directory' if where == path else 'not writable'}; "
                         "pass --cache with a writable directory")
    return path


def through_cache(model, tok, call: str, ids: list[list[int]], compute, **settings) -> list[list[Generation]]:
    """compute() -> rows per prompt, served from CALL_CACHE when an equal call is stored there.

    A call made while any other forward hook is on the model (record_output, a hook of the caller's)
    is computed, never served: the hook would not see a stored call. Only steering (add_to_output)
    is in the key; transformers' own output-capturing hooks record only under output_* flags, which
    these calls never set."""
    if CALL_CACHE is None:
        return compute()
    key = call_key(model, tok, call, ids, settings)
    if key is None:
        CACHE_STATS["bypassed"] += 1
        return compute()
    digest = hashlib.sha256(key.encode()).hexdigest()
    path = CALL_CACHE / digest[:2] / f"{digest}.pt"
    rows = [settings.get("k", 0) + int(settings.get("with_greedy", True))] * len(ids)
    outs = _read_entry(path, key, rows)
    if outs is not None:
        CACHE_STATS["served"] += 1
        if call == "greedy":    # as computing it would: only the last greedy call's rows are kept
            _ROWS.pop(_cache_key(model), None)
        return outs
    outs = compute()
    CACHE_STATS["computed"] += 1
    _write_entry(path, key, outs)
    return outs


def call_key(model, tok, call: str, ids: list[list[int]], settings: dict) -> str | None:
    """The call's key as canonical JSON, or None when a forward hook other than steering is on the model."""
    names, steering = {}, []
    for name, module in model.named_modules():
        names[id(module)] = name
        for hook in [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]:
            if getattr(hook, "__module__", "") == "transformers.utils.output_capturing":
                continue
            if not hasattr(hook, "steering"):
                return None
            steering.append([name, hook.steering])
    g = torch.nn.modules.module
    if g._global_forward_hooks or g._global_forward_pre_hooks:
        return None
    hidden = settings.pop("hidden_module", None)
    if hidden is not None and id(hidden) not in names:
        return None              # not this model's module: nothing to name it by
    settings["hidden_module"] = None if hidden is None else names[id(hidden)]
    settings["stop"] = list(settings["stop"])
    dev = model.device
    key = {"format": _CACHE_FORMAT, "call": call, "model": _fingerprint(model, _model_fingerprint),
           "tokenizer": _fingerprint(tok, _tokenizer_fingerprint), "dtype": str(model.dtype),
           "kernel": str(getattr(model, KERNEL_ATTR, "default")),
           "attention": str(getattr(model.config, "_attn_implementation", None)),
           "device": (f"cuda, {torch.cuda.get_device_name(dev)}" if dev.type == "cuda"
                      else f"{dev.type}, {cpu_name()}, {torch.get_num_threads()} threads"),
           "path": "reference" if PLAIN else {"batch": BATCH, "reuse_prefix": REUSE_PREFIX, "share_prompt": SHARE_PROMPT},
           "code": {"common.py": file_id(Path(__file__).with_name("common.py")), "speed.py": file_id(__file__),
                    "models.py": file_id(Path(__file__).with_name("models.py")),
                    "torch": torch.__version__,
                    "transformers": transformers.__version__},
           "eos": sorted(eos_ids(model, tok)), "steering": steering, "prompts": ids, **settings}
    return json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)


def _fingerprint(obj, compute) -> str:
    """compute(obj), once per object (a later object at the same id is not taken for it)."""
    held = _FINGERPRINTS.get(id(obj))
    if held is None or held[0]() is not obj:
        held = _FINGERPRINTS[id(obj)] = (weakref.ref(obj), compute(obj))
    return held[1]


def _model_fingerprint(model) -> str:
    """sha256 of the config, the modules as printed (classes, shapes, int8 layers) and, for every tensor
    of the state dict and every buffer, its name, dtype, shape and 4,096 evenly spaced values (exact bytes;
    all of a smaller tensor; a oneDNN weight read densely, one at a time). Milliseconds, not a pass over
    every weight (but under --linear onednn: densifying 55 MB took 36 ms on a Zen 3 EPYC, about 4 s for
    Qwen2.5-Coder-1.5B's weights): any other checkpoint or fine-tune changes them, an edit of a few single
    weights might not. Computed at the model's first cached call."""
    config = {k: v for k, v in model.config.to_dict().items() if k != "_name_or_path"}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode() + repr(model).encode())

    def add(name, value):
        if isinstance(value, (tuple, list)):
            for i, v in enumerate(value):
                add(f"{name}.{i}", v)
            return
        if not torch.is_tensor(value):
            digest.update(f"{name}={value!r};".encode())
            return
        t = value.dequantize() if value.is_quantized else value.to_dense() if value.is_mkldnn else value
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        if t.numel() and not t.is_meta:
            flat = t.detach().reshape(-1)
            digest.update(flat[evenly_spaced(flat.numel(), 4096).to(flat.device)].cpu().float().numpy().tobytes())
    with torch.no_grad():
        tensors = model.state_dict()
        # subtle: models.OneDNNLinear's reordered weight, the layer's only copy, is a buffer kept out of the
        # state dict (persistent=False): without this its weights were not in the key
        tensors.update((name, b) for name, b in model.named_buffers() if name not in tensors)
        for name, value in tensors.items():
            add(name, value)
    return digest.hexdigest()


def evenly_spaced(n: int, count: int) -> torch.Tensor:
    """min(n, count) indices spread evenly over 0 .. n - 1, both ends included, in integer arithmetic
    (a float32 linspace rounds the last index of a 28M-element tensor past its end)."""
    count = min(n, count)
    return torch.arange(count, dtype=torch.int64) * (n - 1) // max(count - 1, 1)


def _tokenizer_fingerprint(tok) -> str:
    """sha256 of the whole tokenizer (vocabulary, merges, normalizer, decoder, special tokens) and of the
    decode flag kept outside its backend (clean_up_tokenization_spaces: the text of the same tokens)."""
    data = tok.backend_tokenizer.to_str() if hasattr(tok, "backend_tokenizer") else \
        json.dumps(sorted(tok.get_vocab().items())) + repr(tok)
    data += f"\nclean_up_tokenization_spaces={getattr(tok, 'clean_up_tokenization_spaces', None)}"
    return hashlib.sha256(data.encode()).hexdigest()


def _read_entry(path: Path, key: str, rows: list[int]) -> list[list[Generation]] | None:
    """The stored rows of `key`, or None when there are none, or the file is unreadable, cut short or
    not this key's (then the call is computed again and the entry rewritten)."""
    try:
        entry = torch.load(path, map_location="cpu", weights_only=True)
        if entry["key"] != key or [len(p) for p in entry["outs"]] != rows:
            return None
        return [[Generation(r["text"], r["token_ids"], r["logprobs"], r["finish"], r["hidden"]) for r in p]
                for p in entry["outs"]]
    except FileNotFoundError:
        return None
    except Exception:   # noqa: BLE001 (any damage: a truncated zip, a wrong layout, a stray file)
        print(f"call cache: {path} is unreadable; recomputing that call", file=sys.stderr)
        return None


def _write_entry(path: Path, key: str, outs: list[list[Generation]]) -> None:
    """Store one call's rows atomically (a temporary file renamed): an interrupted run leaves no
    partial entry. A cache that cannot be written is said once; the run goes on without it."""
    # subtle: a row's hidden state is a view into its decoding step's output; torch.save would write
    # that whole output (every row of the step) once per step, 5x the bytes of the rows' own states
    entry = {"key": key, "outs": [[{"text": g.text, "token_ids": list(g.token_ids), "logprobs": list(g.logprobs),
                                    "finish": g.finish, "hidden": None if g.hidden is None else g.hidden.clone()}
                                   for g in p] for p in outs]}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(entry, tmp)
        os.replace(tmp, path)
    except BaseException as e:   # Ctrl-C included: no temporary file is left behind either
        tmp.unlink(missing_ok=True)
        if not isinstance(e, OSError):
            raise
        if not CACHE_STATS.get("unwritable"):
            CACHE_STATS["unwritable"] = 1
            print(f"call cache: cannot write {path.parent} ({e.strerror}); going on without storing", file=sys.stderr)


HASH_LIMIT = 2 ** 28     # files up to 256 MiB are identified by content, larger ones by size and mtime


def file_id(path) -> str:
    """A file's identity as the keys name it (the call cache's, a run's settings): its size and the start
    of its sha256 (size and mtime past HASH_LIMIT), "missing" where there is none."""
    path = Path(path)
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size > HASH_LIMIT:
        return f"{size} bytes, mtime {path.stat().st_mtime_ns}"
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"{size} bytes, sha256 {digest.hexdigest()[:16]}"
