"""Generation, one-prefill sampling and hooks on a tiny random LLaMA (hand-checkable, fast)."""
import math

import pytest
import torch

import common
import speed
import models


def full_logprobs(model, ids):
    """Log-softmax at every position of one uncached forward pass (the reference)."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)


def reference_greedy(model, tok, prompt, n):
    ids = common.encode(tok, prompt)
    out = []
    for _ in range(n):
        t = int(full_logprobs(model, ids + out)[-1].argmax())
        if t == tok.eos_token_id:
            break
        out.append(t)
    return out


def test_greedy_matches_uncached_reference_and_logprobs(tiny):
    model, tok = tiny
    g = common.greedy(model, tok, "Question: abc\nAnswer:", max_new_tokens=12)
    ref = reference_greedy(model, tok, "Question: abc\nAnswer:", 12)
    assert g.token_ids == ref
    assert g.text == tok.decode(ref)
    lp = full_logprobs(model, common.encode(tok, "Question: abc\nAnswer:") + ref)
    start = len(common.encode(tok, "Question: abc\nAnswer:")) - 1
    for i, t in enumerate(ref):
        assert g.logprobs[i] == pytest.approx(float(lp[start + i, t]), abs=1e-4)
    assert g.finish in ("length", "eos")


def test_stop_string_cuts_text_and_keeps_the_completing_token(tiny):
    model, tok = tiny
    full = common.greedy(model, tok, "xyz", max_new_tokens=16)
    assert len(full.text) >= 6
    stop = full.text[4:6]                      # a two-character stop string taken from the output
    at = full.text.find(stop)
    g = common.greedy(model, tok, "xyz", max_new_tokens=16, stop=("@@@", stop))
    assert g.text == full.text[:at]
    assert g.finish == stop
    # one character per token: the stop is completed by token at+len(stop)-1, which is kept
    assert g.token_ids == full.token_ids[:at + len(stop)]


def test_batched_greedy_equals_one_by_one(tiny):
    model, tok = tiny
    prompts = ["a", "Question: who?\nAnswer:", "The quick brown fox"]
    batch = common.greedy(model, tok, prompts, max_new_tokens=10, stop=("\n",))
    for p, b in zip(prompts, batch):
        one = common.greedy(model, tok, p, max_new_tokens=10, stop=("\n",))
        assert (b.text, b.token_ids, b.finish) == (one.text, one.token_ids, one.finish)


def test_sampling_prefills_once_and_follows_the_model_distribution(tiny, fed_tokens):
    model, tok = tiny
    prompt = "Hello there"
    with fed_tokens(model) as fed:
        samples = common.sample(model, tok, prompt, k=12, max_new_tokens=6, seed=1)
    prefills = [n for n in fed if n > 1]                    # passes of more than one position (not decode steps)
    assert prefills == [len(common.encode(tok, prompt))]   # the prompt went through the model once
    ids = common.encode(tok, prompt)
    for s in samples:                                       # each row's tokens are scored as conditionals
        lp = full_logprobs(model, ids + s.token_ids)
        for i, t in enumerate(s.token_ids):
            assert s.logprobs[i] == pytest.approx(float(lp[len(ids) - 1 + i, t]), abs=1e-4)
    # the rows are drawn, not decoded greedily: they differ, and are the reference loop's draws for the seed
    assert len({tuple(s.token_ids) for s in samples}) > 1
    ref = common.reference(model, tok, prompt, 12, with_greedy=False, max_new_tokens=6, seed=1)
    assert [(s.text, s.token_ids, s.finish) for s in samples] == [(r.text, r.token_ids, r.finish) for r in ref]


def test_first_token_frequencies_match_softmax(tiny):
    model, tok = tiny
    prompt = "abc"
    probs = full_logprobs(model, common.encode(tok, prompt))[-1].exp()
    n = 3000
    draws = common.sample(model, tok, prompt, k=n, max_new_tokens=1, seed=3)
    counts = torch.zeros_like(probs)
    for d in draws:
        counts[d.token_ids[0] if d.token_ids else tok.eos_token_id] += 1
    top = probs.topk(5).indices
    for t in top:                                            # 4 standard errors
        p = float(probs[t])
        assert abs(float(counts[t]) / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-3


def test_sampling_is_repeatable_and_with_greedy_row_zero(tiny):
    model, tok = tiny
    a = common.sample(model, tok, "abc", k=5, max_new_tokens=5, seed=7, with_greedy=True)
    b = common.sample(model, tok, "abc", k=5, max_new_tokens=5, seed=7, with_greedy=True)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert len(a) == 6
    assert a[0].token_ids == common.greedy(model, tok, "abc", max_new_tokens=5).token_ids


def _freq(logits, n=20000, **kw):
    draws = common.draw(logits.expand(n, -1), generator=torch.Generator().manual_seed(0), **kw)
    return torch.bincount(draws, minlength=logits.shape[-1]).float() / n


def test_draw_top_k_top_p_and_temperature():
    # top-k 2 of [3, 2, 1, 0]: only the first two, in the ratio e^3 : e^2
    f = _freq(torch.tensor([[3.0, 2.0, 1.0, 0.0]]), temperature=1.0, top_k=2, top_p=1.0)
    assert f[2:].sum() == 0 and abs(f[0] - 0.7311) < 0.02
    # probabilities 0.5/0.3/0.2, mass before each token 0, 0.5, 0.8: top_p 0.7 keeps two (0.625/0.375),
    # top_p 0.5 keeps only the first
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    f = _freq(logits, temperature=1.0, top_k=0, top_p=0.7)
    assert f[2] == 0 and abs(f[0] - 0.625) < 0.02
    assert _freq(logits, temperature=1.0, top_k=0, top_p=0.5).tolist() == [1.0, 0.0, 0.0]
    # temperature 0.5 squares the probabilities: 0.25/0.09/0.04 over 0.38
    f = _freq(logits, temperature=0.5, top_k=0, top_p=1.0)
    assert torch.allclose(f, torch.tensor([0.658, 0.237, 0.105]), atol=0.02)
    # top-k and the full-vocabulary path agree on the same filter
    g = _freq(logits, temperature=1.0, top_k=2, top_p=1.0)
    assert g[2] == 0 and abs(g[0] - 0.625) < 0.02
    # the top-k branch's own nucleus and temperature (SeaKR: top_k 50, top_p 0.9), over 4 tokens so that
    # top_k 3 < vocabulary takes that branch. Temperature 1, top_p 0.7: the top 3 are 0.5/0.3/0.2, mass
    # before each 0, 0.5, 0.8, so two stay: 0.625/0.375 (a nucleus cut on the mass up to and including the
    # token, 0.5/0.8/1.0, would keep the first alone: [1, 0, 0, 0])
    logits4 = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.0]]))
    f = _freq(logits4, temperature=1.0, top_k=3, top_p=0.7)
    assert f[2:].sum() == 0 and abs(f[0] - 0.625) < 0.02
    # temperature 0.5 over the top 3: 0.25/0.09/0.04 over 0.38 = 0.658/0.237/0.105 (unscaled: 0.5/0.3/0.2)
    f = _freq(logits4, temperature=0.5, top_k=3, top_p=1.0)
    assert torch.allclose(f, torch.tensor([0.658, 0.237, 0.105, 0.0]), atol=0.02)
    # and then top_p 0.7: mass before each 0, 0.658, 0.895, so two stay, 0.25/0.34 = 0.735 and 0.09/0.34 =
    # 0.265 (unscaled by the temperature: 0.625/0.375; cut on the mass including the token: [1, 0, 0, 0])
    f = _freq(logits4, temperature=0.5, top_k=3, top_p=0.7)
    assert torch.allclose(f, torch.tensor([0.735, 0.265, 0.0, 0.0]), atol=0.02) and f[2:].sum() == 0
    # top_p 0 (or below): the mass before the first token, 0, is already >= top_p, yet the first token
    # stays, on both paths (it dropped too, and the draw failed on all-zero probabilities)
    assert _freq(logits, temperature=1.0, top_k=0, top_p=0.0).tolist() == [1.0, 0.0, 0.0]
    assert _freq(logits4, temperature=1.0, top_k=3, top_p=0.0).tolist() == [1.0, 0.0, 0.0, 0.0]


def test_hidden_state_is_read_at_substituted_eos(tiny):
    model, tok = tiny
    mlp = common.decoder_layers(model)[1].mlp
    prompt = "Question: x\nAnswer:"
    g = common.greedy(model, tok, prompt, max_new_tokens=7, hidden_module=mlp)
    ids = common.encode(tok, prompt)
    last = g.token_ids[:-1] if g.finish != "eos" else g.token_ids
    with common.record_output(mlp) as outs, torch.no_grad():
        model(torch.tensor([ids + last + [tok.eos_token_id]]))
    assert torch.allclose(g.hidden, outs[0][0, -1], atol=1e-5)
    # the same state for each sampled row, read in the batch
    for s in common.sample(model, tok, prompt, k=4, max_new_tokens=7, seed=0, hidden_module=mlp):
        last = s.token_ids[:-1] if s.finish != "eos" else s.token_ids
        with common.record_output(mlp) as outs, torch.no_grad():
            model(torch.tensor([ids + last + [tok.eos_token_id]]))
        assert torch.allclose(s.hidden, outs[0][0, -1], atol=1e-4)


def test_record_output_equals_hidden_states_and_hooks_are_removed(tiny):
    model, tok = tiny
    layer = common.decoder_layers(model)[2]
    ids = torch.tensor([common.encode(tok, "some text")])
    with torch.no_grad():
        ref = model(ids, output_hidden_states=True).hidden_states[3]
    before = dict(layer._forward_hooks)   # transformers keeps a capture hook of its own here
    with common.record_output(layer) as outs, torch.no_grad():
        model(ids)
    assert torch.allclose(outs[0], ref, atol=1e-6)
    assert dict(layer._forward_hooks) == before


def test_zero_vector_changes_nothing_and_hook_leaves_on_exception(tiny):
    model, tok = tiny
    layer = common.decoder_layers(model)[1]
    base = common.greedy(model, tok, "abc", max_new_tokens=8)
    before = dict(layer._forward_hooks)
    with common.add_to_output(layer, torch.zeros(32)):
        same = common.greedy(model, tok, "abc", max_new_tokens=8)
    assert same.token_ids == base.token_ids
    with pytest.raises(RuntimeError):
        with common.add_to_output(layer, torch.ones(32) * 5):
            raise RuntimeError("boom")
    assert dict(layer._forward_hooks) == before
    # a non-zero vector acts on every position (prompt too): the first-step logits move
    ids = torch.tensor([common.encode(tok, "abc")])
    with torch.no_grad():
        a = model(ids).logits
        with common.add_to_output(layer, torch.ones(32)):
            b = model(ids).logits
    assert not torch.allclose(a, b)


def test_prompt_helpers(tiny):
    _, tok = tiny
    assert common.encode(tok, "Answer: ") == common.encode(tok, "Answer:")
    assert common.encode(tok, "ab")[0] == tok.bos_token_id
    assert common.encode(tok, "<s>ab").count(tok.bos_token_id) == 1
    text = common.chat_prompt(tok, "Hi?", system="Be brief.")    # no chat template: plain transcript
    assert text == "System: Be brief.\n\nUser: Hi?\n\nAssistant:"
    # the transcript's reply ends where the model starts the next user turn; a chat template needs no stop
    assert common.turn_stops(tok) == ("\nUser:",)
    assert common.turn_stops(type("T", (), {"chat_template": "{{ messages }}"})()) == ()



# a template in the manner of Mistral-7B-Instruct-v0.1's first one: user and assistant turns only
NO_SYSTEM_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
                      "{% elif m['role'] == 'assistant' %}{{ m['content'] }}{{ eos_token }}{% else %}"
                      "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")


def test_a_template_without_a_system_turn_gets_the_system_text_in_the_first_user_turn(real_tok):
    import copy
    tok = copy.deepcopy(real_tok)
    tok.chat_template = NO_SYSTEM_TEMPLATE
    bos, eos = tok.bos_token or "", tok.eos_token
    assert common.chat_prompt(tok, "Hi?") == f"{bos}[INST] Hi? [/INST]"
    assert common.chat_prompt(tok, "Hi?", system="Be brief.") == f"{bos}[INST] Be brief.\n\nHi? [/INST]"
    shots = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
    assert common.chat_prompt(tok, "Hi?", "Be brief.", shots) == (
        f"{bos}[INST] Be brief.\n\n1+1? [/INST]2{eos}[INST] Hi? [/INST]")
    tok.chat_template = "{{ raise_exception('broken template') }}"   # any other refusal is not hidden
    for system in (None, "Be brief."):
        with pytest.raises(common.TemplateError, match="broken template"):
            common.chat_prompt(tok, "Hi?", system=system)

def test_prefix_reuse_gives_the_same_outputs_and_skips_the_shared_tokens(tiny):
    model, tok = tiny
    head = "Question: the shared few-shot head goes here\nAnswer: fine. "
    prompts = [head + "Question: one\nAnswer:", head + "Question: two\nAnswer:", head + "Q"]
    speed.REUSE_PREFIX = False
    plain = [common.greedy(model, tok, p, max_new_tokens=8) for p in prompts]
    plain_s = common.sample(model, tok, prompts[1], k=3, max_new_tokens=6, seed=5)
    speed.REUSE_PREFIX = True
    speed.forget_prefix()
    try:
        common.greedy(model, tok, prompts[0], max_new_tokens=8)
        seen, h = [], model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[1]))
        try:
            reused = [common.greedy(model, tok, p, max_new_tokens=8) for p in prompts]
        finally:
            h.remove()
        reused_s = common.sample(model, tok, prompts[1], k=3, max_new_tokens=6, seed=5)
    finally:
        speed.REUSE_PREFIX = True
    assert [g.token_ids for g in reused] == [g.token_ids for g in plain]
    assert [g.token_ids for g in reused_s] == [g.token_ids for g in plain_s]
    # the second prompt's prefill fed only what follows the shared head
    shared = len(common.encode(tok, head + "Question: t")) - 1   # ends with the space before "two"
    prefills = [n for n in seen if n > 1]
    assert seen[0] == 1                     # prompts[0] again: only its last token is fed
    assert prefills[0] == len(common.encode(tok, prompts[1])) - shared
    # the same prompt twice: all but its last token come from the cache
    common.greedy(model, tok, prompts[2], max_new_tokens=2)
    seen2, h = [], model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen2.append(i[0].shape[1]))
    try:
        common.greedy(model, tok, prompts[2], max_new_tokens=2)
    finally:
        h.remove()
    assert seen2[0] == 1



def test_shared_cache_serves_the_shared_prefix_only(tiny, monkeypatch):
    """speed.shared_cache (CtrlA's monitor): the KV cache of a pass over ids A serves ids B's first n tokens,
    n their shared prefix but never all of B, cropped in place (a negative crop); nothing under MIN_SHARED
    shared, nor with REUSE_PREFIX off (--plain)."""
    model, _ = tiny
    a = list(range(5, 45))
    with torch.no_grad():
        cache = model(input_ids=torch.tensor([a]), use_cache=True).past_key_values
    assert speed.shared_cache(a[:speed.MIN_SHARED - 1] + [50], a, cache) == (0, None)
    monkeypatch.setattr(speed, "REUSE_PREFIX", False)
    assert speed.shared_cache(a, a, cache) == (0, None) and cache.get_seq_length() == 40
    monkeypatch.setattr(speed, "REUSE_PREFIX", True)
    crops = []
    real = type(cache).crop
    monkeypatch.setattr(type(cache), "crop", lambda self, n: crops.append(n) or real(self, n))
    assert speed.shared_cache(a + [50], a, cache) == (40, cache) and crops == []     # all of the cache, uncropped
    assert speed.shared_cache(a[:30] + [50, 51], a, cache) == (30, cache) and crops == [-10]
    assert speed.shared_cache(a[:30], a[:30], cache) == (29, cache) and cache.get_seq_length() == 29

def test_buffered_cache_layer_equals_concatenation_and_grows():
    from transformers.cache_utils import DynamicLayer
    plain = DynamicLayer()
    prompt_k, prompt_v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    plain.update(prompt_k, prompt_v)
    buf = speed._BufferedLayer(plain, rows=3, room=1)        # room for one token: the second one grows it
    ref_k = prompt_k.expand(3, -1, -1, -1)
    for _ in range(2):
        k, v = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
        got_k, got_v = buf.update(k, v)
        ref_k = torch.cat([ref_k, k], -2)
    assert torch.equal(got_k, ref_k) and buf.get_seq_length() == 7 and got_v.shape == (3, 2, 7, 4)
    buf.batch_select_indices(torch.tensor([0, 2]))           # finished rows leave (indices increasing)
    assert torch.equal(buf.keys, ref_k[[0, 2]])
    buf.batch_select_indices(torch.tensor([1]))
    assert torch.equal(buf.keys, ref_k[[2]]) and torch.equal(buf.values[0], got_v[2])
    assert torch.equal(plain.keys, prompt_k)                  # the prompt cache was not written into


def test_alternating_prompt_families_each_find_their_cached_prefix(tiny):
    model, tok = tiny
    a = "Question: the first family's long shared head\nAnswer: fine. Question: "
    b = "Write a search query for the second family of prompts, which differ. "
    speed.forget_prefix()
    for p in (a + "one", b + "two"):
        common.greedy(model, tok, p, max_new_tokens=3)
    seen, h = [], model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[1]))
    try:
        g = common.greedy(model, tok, a + "three", max_new_tokens=3)
    finally:
        h.remove()
    shared = len(common.encode(tok, a)) + 1     # encode drops a's final space alone; "a three" keeps it
    assert seen[0] == len(common.encode(tok, a + "three")) - shared
    speed.REUSE_PREFIX = False
    try:
        assert common.greedy(model, tok, a + "three", max_new_tokens=3).token_ids == g.token_ids
    finally:
        speed.REUSE_PREFIX = True


def test_a_16_bit_decoding_step_attends_in_float32_on_cpu(tiny, monkeypatch):
    # torch's CPU kernel is several times slower on 16-bit states for one query (speed._sdpa_grouped):
    # a decoding step's states attend in float32 and come back in their dtype; a prefill stays 16-bit
    monkeypatch.setattr(speed, "HALF", (torch.bfloat16, torch.float16))   # as on a CPU without AMX
    model, tok = tiny
    attn = common.decoder_layers(model)[0].self_attn
    sdpa = torch.nn.functional.scaled_dot_product_attention
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4, 1, 8), torch.randn(3, 2, 9, 8), torch.randn(3, 2, 9, 8)
    mask = torch.ones(3, 1, 1, 9, dtype=torch.bool)
    mask[0, ..., :3] = False                                      # row 0 left-padded by three
    for dt in (torch.bfloat16, torch.float16):
        ours, _ = speed._sdpa_grouped(attn, q.to(dt), k.to(dt), v.to(dt), mask, scaling=0.3)
        up = sdpa(q.to(dt).float(), k.to(dt).float(), v.to(dt).float(), attn_mask=mask, scale=0.3, enable_gqa=True)
        assert ours.dtype == dt and torch.equal(ours, up.transpose(1, 2).to(dt))
        ours, _ = speed._sdpa_grouped(attn, q.to(dt), k.to(dt), v.to(dt), None, scaling=0.3)   # no mask
        assert torch.equal(ours, sdpa(q.to(dt).float(), k.to(dt).float(), v.to(dt).float(), scale=0.3,
                                      enable_gqa=True).transpose(1, 2).to(dt))
    q2, m2 = torch.randn(3, 4, 2, 8).bfloat16(), torch.ones(3, 1, 2, 9, dtype=torch.bool)
    ours, _ = speed._sdpa_grouped(attn, q2, k.bfloat16(), v.bfloat16(), m2, scaling=0.3)     # two queries: 16-bit
    assert torch.equal(ours, sdpa(q2, k.bfloat16(), v.bfloat16(), attn_mask=m2, scale=0.3,
                                  enable_gqa=True).transpose(1, 2).contiguous())
    monkeypatch.setattr(speed, "HALF", (torch.float16,))                  # as on an AMX CPU: its own kernel
    ours, _ = speed._sdpa_grouped(attn, q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, scaling=0.3)
    assert torch.equal(ours, sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), attn_mask=mask, scale=0.3,
                                  enable_gqa=True).transpose(1, 2).contiguous())


def test_grouped_attention_equals_transformers_sdpa_with_padding(tiny):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    model, tok = tiny
    assert model.config._attn_implementation == "sdpa_grouped"
    attn = common.decoder_layers(model)[0].self_attn
    assert attn.num_key_value_groups == 2
    q, k, v = torch.randn(3, 4, 5, 8), torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 8)
    mask = torch.ones(3, 1, 5, 5, dtype=torch.bool).tril()
    mask[0, :, :, :2] = False                                    # row 0 left-padded by two
    mask[0, :, :2, :2] = torch.eye(2, dtype=torch.bool)          # (pads see themselves: no NaN rows)
    ours, _ = speed._sdpa_grouped(attn, q, k, v, mask, scaling=0.3)
    ref, _ = sdpa_attention_forward(attn, q, k, v, mask, scaling=0.3)
    assert torch.allclose(ours, ref, atol=1e-6)
    # and the model itself: a padded batch decodes as its rows do alone (the test above), with the
    # outputs of the plain "sdpa" implementation
    prompts = ["a", "Question: who?\nAnswer:"]
    ours = [g.token_ids for g in common.greedy(model, tok, prompts, max_new_tokens=6)]
    model.set_attn_implementation("sdpa")
    try:
        ref = [g.token_ids for g in common.greedy(model, tok, prompts, max_new_tokens=6)]
    finally:
        model.set_attn_implementation("sdpa_grouped")
    assert ours == ref


def test_batch_prefills_the_shared_head_once_and_matches_one_by_one(tiny):
    model, tok = tiny
    head = "System: a long shared head of the chat template\nUser: "
    prompts = [head + "first question?", head + "2nd?", head + "a third, longer question?"]
    speed.forget_prefix()
    seen, h = [], model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)))
    try:
        batch = common.greedy(model, tok, prompts, max_new_tokens=8)
    finally:
        h.remove()
    n_head = len(common.encode(tok, head)) + 1        # the head's final space is shared too
    tails = [len(common.encode(tok, p)) - n_head for p in prompts]
    assert seen[:2] == [(1, n_head), (3, max(tails))]   # the head once, then the padded tails
    speed.REUSE_PREFIX = speed.BATCH = False
    try:
        alone = [common.greedy(model, tok, p, max_new_tokens=8) for p in prompts]
    finally:
        speed.REUSE_PREFIX = speed.BATCH = True
    assert [g.token_ids for g in batch] == [g.token_ids for g in alone]


def test_next_turn_continues_each_rows_kept_cache(tiny):
    """A batch whose prompts continue the last greedy batch's rows (prompt + answer + a new turn)
    feeds only the new tokens, and decodes what the plain path decodes; so does a single prompt."""
    model, tok = tiny
    firsts = ["Question: who wrote it?\nAnswer:", "Q: 2nd one, longer?\nA:", "Tell me a story:"]
    turn = "\nUser: and briefly?\nAssistant:"
    speed.forget_prefix()
    first = common.greedy(model, tok, firsts, max_new_tokens=8)
    seconds = [f + g.text + turn for f, g in zip(firsts, first)]
    seen, h = [], model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)))
    try:
        batch = common.greedy(model, tok, seconds, max_new_tokens=6)
        single = common.greedy(model, tok, seconds[1] + batch[1].text + turn, max_new_tokens=6)
    finally:
        h.remove()
    # each row kept its prompt and the answer tokens fed back: all but the last of an answer cut at
    # max_new_tokens (one character a token here), so the new turn and that token are fed
    assert all(g.finish == "length" for g in first + [batch[1]])
    prefills = [s for s in seen if s[1] > 1]
    assert prefills == [(3, len(turn) + 1), (1, len(turn) + 1)]
    speed.REUSE_PREFIX = speed.BATCH = False
    try:
        plain = [common.greedy(model, tok, p, max_new_tokens=6) for p in seconds]
        plain_single = common.greedy(model, tok, seconds[1] + batch[1].text + turn, max_new_tokens=6)
    finally:
        speed.REUSE_PREFIX = speed.BATCH = True
    assert [g.token_ids for g in batch] == [g.token_ids for g in plain]
    assert single.token_ids == plain_single.token_ids


def test_shared_prompt_attention_equals_sdpa_over_copied_prompts():
    torch.manual_seed(0)
    rows, heads, kv_heads, prompt_len, own, dim = 3, 4, 2, 6, 2, 8
    q = torch.randn(rows, heads, 1, dim)
    pk, pv = torch.randn(1, kv_heads, prompt_len, dim), torch.randn(1, kv_heads, prompt_len, dim)
    k, v = torch.randn(rows, kv_heads, own, dim), torch.randn(rows, kv_heads, own, dim)
    full_k = torch.cat([pk.expand(rows, -1, -1, -1), k], -2)
    full_v = torch.cat([pv.expand(rows, -1, -1, -1), v], -2)
    ref = torch.nn.functional.scaled_dot_product_attention(q, full_k, full_v, scale=0.4, enable_gqa=True)
    ours = speed._attend_shared_prompt(q, k, v, (pk, pv, None), None, 0.4)
    assert ours.shape == (rows, 1, heads, dim)
    assert torch.allclose(ours, ref.transpose(1, 2), atol=1e-6)
    mask = torch.ones(rows, 1, 1, prompt_len + own, dtype=torch.bool)
    mask[1, :, :, 2] = mask[2, :, :, prompt_len] = False
    ref = torch.nn.functional.scaled_dot_product_attention(q, full_k, full_v, attn_mask=mask, scale=0.4,
                                                           enable_gqa=True)
    assert torch.allclose(speed._attend_shared_prompt(q, k, v, (pk, pv, None), mask, 0.4), ref.transpose(1, 2),
                          atol=1e-6)


def test_samples_with_a_shared_prompt_equal_samples_with_a_copy_per_row(tiny, monkeypatch):
    model, tok = tiny
    mlp = common.decoder_layers(model)[1].mlp
    prompt = "Question: which samples?\nAnswer:"
    kw = dict(k=6, max_new_tokens=9, seed=3, with_greedy=True, hidden_module=mlp, top_k=20, top_p=0.9,
              stop=("e", "a", "o"))                 # rows end at different steps and leave the cache
    used, attend = [], speed._attend_shared_prompt
    monkeypatch.setattr(speed, "_attend_shared_prompt", lambda *a: used.append(1) or attend(*a))
    shared = common.sample(model, tok, prompt, **kw)
    assert used and len({len(g.token_ids) for g in shared}) > 1
    speed.SHARE_PROMPT = False
    try:
        copied = common.sample(model, tok, prompt, **kw)
    finally:
        speed.SHARE_PROMPT = True
    assert [g.token_ids for g in shared] == [g.token_ids for g in copied]
    for a, b in zip(shared, copied):
        assert torch.allclose(a.hidden, b.hidden, atol=1e-5)


@pytest.mark.parametrize("share", [True, False])
def test_sample_many_gives_each_prompt_what_it_gets_alone(tiny, share):
    model, tok = tiny
    mlp = common.decoder_layers(model)[1].mlp
    head = "Context: a shared head of few-shot examples\n"
    prompts = [head + "[1] first passage\nQ: x?\nA:", head + "[1] 2nd\nQ: x?\nA:", head + "[1] a third one, longer\nQ: x?\nA:"]
    kw = dict(max_new_tokens=8, with_greedy=True, hidden_module=mlp, top_k=20, top_p=0.9, stop=("e", "o"))
    speed.SHARE_PROMPT = share
    try:
        together = common.sample_many(model, tok, prompts, 4, seeds=[5, 6, 7], **kw)
        alone = [common.sample(model, tok, p, 4, seed=s, **kw) for p, s in zip(prompts, [5, 6, 7])]
    finally:
        speed.SHARE_PROMPT = True
    for t, a in zip(together, alone):
        assert [g.token_ids for g in t] == [g.token_ids for g in a]
        assert [g.finish for g in t] == [g.finish for g in a]
        for x, y in zip(t, a):
            assert torch.allclose(x.hidden, y.hidden, atol=1e-5)
    assert len({len(g.token_ids) for g in together[0] + together[1]}) > 1   # rows left the batch


def test_prefix_cache_is_kept_per_steering(tiny):
    model, tok = tiny
    layer = common.decoder_layers(model)[1]
    head = "Question: a prompt long enough to be cached\nAnswer:"
    speed.REUSE_PREFIX = False
    try:
        plain_ref = common.greedy(model, tok, head + " z", max_new_tokens=6).token_ids
        with common.add_to_output(layer, torch.ones(32)):
            steered_ref = common.greedy(model, tok, head + " xy", max_new_tokens=6).token_ids
    finally:
        speed.REUSE_PREFIX = True
    assert plain_ref != steered_ref
    speed.forget_prefix()
    common.greedy(model, tok, head + " x", max_new_tokens=6)                 # a plain cache of the head
    seen, h = [], model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[1]))
    try:
        with common.add_to_output(layer, torch.ones(32)):                    # the plain cache is not used
            common.greedy(model, tok, head + " x", max_new_tokens=6)
        with common.add_to_output(layer, torch.ones(32) * 1.0):              # same values, new tensor:
            steered = common.greedy(model, tok, head + " xy", max_new_tokens=6).token_ids   # reused
        plain = common.greedy(model, tok, head + " z", max_new_tokens=6).token_ids
    finally:
        h.remove()
    # the first steered call prefills everything; the second steered call and the plain one find
    # their own kind of cache and feed one token each
    assert [n for n in seen if n > 1] == [len(common.encode(tok, head + " x"))]
    assert steered == steered_ref and plain == plain_ref


def test_greedy_resumes_from_token_ids_exactly(tiny_real):
    """A continuation resumed from prompt ids + generated ids equals one longer greedy decode, on both tokenizer
    kinds; encode passes ids through untouched."""
    import common
    model, tok = tiny_real
    prompt = "Question: Who directed the film? Answer:"
    assert common.encode(tok, [5, 6, 7]) == [5, 6, 7]
    whole = common.greedy(model, tok, prompt, max_new_tokens=12)
    first = common.greedy(model, tok, prompt, max_new_tokens=5)
    rest = common.greedy(model, tok, common.encode(tok, prompt) + first.token_ids, max_new_tokens=7)
    assert first.token_ids + rest.token_ids == whole.token_ids


def test_trailing_space_is_a_lone_token_on_both_tokenizer_kinds(real_tok):
    """encode's reason for dropping a prompt's trailing space: on both kinds it is a token of its own."""
    import common
    with_space = real_tok("Answer: ", add_special_tokens=False)["input_ids"]
    without = real_tok("Answer:", add_special_tokens=False)["input_ids"]
    assert with_space[:-1] == without and real_tok.decode(with_space[-1:]).strip() == ""
    assert common.encode(real_tok, "Answer: ") == common.encode(real_tok, "Answer:")


def test_continuations_keep_their_leading_space_on_both_tokenizer_kinds(real_tok):
    """Generation.text is the continuation as it reads after the prompt: " yes" after "So the answer is",
    where a SentencePiece decode of the same tokens alone reads "yes" (its decoder strips one leading
    space), and byte tokens of one character decode together."""
    import common
    head = real_tok("So the answer is", add_special_tokens=False)["input_ids"]
    for tail in (" yes", " Île-de-France", " 1,200."):
        full = real_tok("So the answer is" + tail, add_special_tokens=False)["input_ids"]
        assert full[:len(head)] == head
        assert common.decode_continuations(real_tok, [full[len(head):]]) == [tail]
    alone = real_tok.decode(real_tok(" yes", add_special_tokens=False)["input_ids"])
    assert alone == ("yes" if real_tok.bos_token else " yes")       # why: SentencePiece drops the space
    eos = real_tok.eos_token_id        # special tokens are left out, as before
    assert common.decode_continuations(real_tok, [[eos], []]) == ["", ""]


def test_greedy_text_reads_on_from_its_prompt(tiny_real):
    """prompt text + Generation.text == the decode of prompt + generated tokens, on both kinds, on both
    paths (a random model's tokens: words, pieces and byte tokens in any order)."""
    import copy
    import common
    model, tok = tiny_real
    prompt = "Question: where is Paris?\nAnswer:"
    ids = common.encode(tok, prompt)
    # a copy of the model whose first token is " yes" ("▁yes" / "Ġyes" pieces): its lm_head row for that
    # token made to score 100 on the prompt's last state
    first = tok(" yes", add_special_tokens=False)["input_ids"][0]
    model = copy.deepcopy(model)
    with torch.no_grad():
        h = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, -1]
        model.lm_head.weight[first] = h * 100 / h.dot(h)
    for g in (common.greedy(model, tok, prompt, max_new_tokens=12),
              common.reference(model, tok, prompt, max_new_tokens=12)[0]):
        assert g.token_ids[0] == first and g.text.startswith(" ")
        whole = tok.decode(ids + g.token_ids, skip_special_tokens=True)
        assert tok.decode(ids, skip_special_tokens=True) + g.text == whole


# ----------------------------------------------------------------------------------------------
# The fast path against the reference (common.reference: a plain loop over transformers' own cache)

def assert_same(fast, ref, atol=1e-5):
    """Same texts, tokens and ends; log-probabilities and hidden states equal up to float rounding."""
    assert [(g.text, g.token_ids, g.finish) for g in fast] == [(g.text, g.token_ids, g.finish) for g in ref]
    for f, r in zip(fast, ref):
        assert f.logprobs == pytest.approx(r.logprobs, abs=atol)
        assert (f.hidden is None) == (r.hidden is None)
        if f.hidden is not None:
            assert torch.allclose(f.hidden, r.hidden, atol=atol)


def test_fast_path_equals_the_reference(tiny_real):
    """greedy (alone and batched), sample and sample_many give what reference() gives, with each
    row's hidden state at its final EOS-substituted position, on both tokenizer kinds."""
    model, tok = tiny_real
    mlp = common.decoder_layers(model)[1].mlp
    speed.forget_prefix()
    head = "Question: Who directed the film Laughter In Hell? Answer: The film"
    prompts = [head + " Laughter", head + " was directed by", "What is the capital of France?"]
    kw = dict(max_new_tokens=10, stop=("e", "o"), hidden_module=mlp)
    ref = [common.reference(model, tok, p, **kw)[0] for p in prompts]
    assert_same([common.greedy(model, tok, p, **kw) for p in prompts], ref)
    assert_same(common.greedy(model, tok, prompts, **kw), ref)                  # one batch
    skw = dict(kw, top_k=30, top_p=0.9, temperature=1.3, with_greedy=True)
    ref_s = [common.reference(model, tok, p, 5, seed=s, **skw) for p, s in zip(prompts, [3, 4, 5])]
    assert ref_s[0][0].token_ids == ref[0].token_ids                          # row 0 is greedy
    assert len({tuple(g.token_ids) for g in ref_s[0]}) > 2                      # the rows differ
    assert len({len(g.token_ids) for g in ref_s[0] + ref_s[1]}) > 1             # and end at different steps
    assert_same(common.sample(model, tok, prompts[0], 5, seed=3, **skw), ref_s[0])
    for fast, r in zip(common.sample_many(model, tok, prompts, 5, seeds=[3, 4, 5], **skw), ref_s):
        assert_same(fast, r)


def test_reference_reads_the_hidden_state_at_the_substituted_eos(tiny_real):
    model, tok = tiny_real
    mlp = common.decoder_layers(model)[0].mlp
    prompt = "Question: What is the capital of France? Answer:"
    ids = common.encode(tok, prompt)
    for g in common.reference(model, tok, prompt, 3, max_new_tokens=6, seed=1, hidden_module=mlp, stop=("a",)):
        last = g.token_ids if g.finish == "eos" else g.token_ids[:-1]
        with common.record_output(mlp) as outs, torch.no_grad():
            model(torch.tensor([ids + last + [tok.eos_token_id]]))
        assert torch.allclose(g.hidden, outs[0][0, -1].float(), atol=1e-5)
        assert g.logprobs == pytest.approx(
            [float(full_logprobs(model, ids + g.token_ids[:i])[-1, t]) for i, t in enumerate(g.token_ids)], abs=1e-4)


def test_plain_runs_the_reference(tiny, monkeypatch):
    model, tok = tiny
    monkeypatch.setattr(speed, "PLAIN", True)
    monkeypatch.setattr(speed, "_prefill", lambda *a: pytest.fail("--plain used the fast path"))
    mlp = common.decoder_layers(model)[1].mlp
    g = common.greedy(model, tok, ["Question: abc", "xyz"], max_new_tokens=6, hidden_module=mlp)
    assert_same(g, [common.reference(model, tok, p, max_new_tokens=6, hidden_module=mlp)[0]
                    for p in ["Question: abc", "xyz"]], atol=0)
    s = common.sample_many(model, tok, ["ab", "cd"], 3, seeds=[1, 2], max_new_tokens=5, with_greedy=True)
    assert [[x.token_ids for x in row] for row in s] == \
        [[x.token_ids for x in common.reference(model, tok, p, 3, seed=sd, max_new_tokens=5)] for p, sd in
         [("ab", 1), ("cd", 2)]]


def test_samples_on_an_eager_attention_model_see_the_prompt(tiny_real):
    """A model loaded with attn_implementation="eager" (or flash) never calls _sdpa_grouped, which alone
    knows that shared-prompt rows keep the prompt aside: its samples must fall back to a prompt copy
    per row and still equal the reference."""
    from conftest import make_model
    _, tok = tiny_real
    model = make_model(len(tok))
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    model.set_attn_implementation("eager")
    mlp = common.decoder_layers(model)[1].mlp
    prompt = "Question: What is the capital of France? Answer: Paris is the capital of"
    kw = dict(max_new_tokens=8, seed=2, with_greedy=True, hidden_module=mlp, top_k=30)
    assert_same(common.sample(model, tok, prompt, 4, **kw), common.reference(model, tok, prompt, 4, **kw))


def test_a_prompt_longer_than_the_context_is_an_input_error(tiny, monkeypatch):
    model, tok = tiny                                 # one token a character
    monkeypatch.setattr(model.config, "max_position_embeddings", 512)
    prompt = "x" * 500
    for call in (lambda: common.greedy(model, tok, prompt, max_new_tokens=20),
                 lambda: common.sample(model, tok, prompt, 2, max_new_tokens=20),
                 lambda: common.reference(model, tok, prompt, max_new_tokens=20)):
        with pytest.raises(common.InputError, match="prompt of 501 tokens \\+ 20 new ones exceeds the model's "
                                                    "context of 512 tokens"):
            call()
    assert len(common.greedy(model, tok, prompt, max_new_tokens=11).token_ids) <= 11     # 512 fits


def test_an_empty_prompt_or_no_new_token_is_an_input_error(tiny):
    """A batch's empty row (a text prompt with no BOS encodes to no token) was all padding on the fast path
    and decoded a made-up answer where the reference raised; max_new_tokens 0 still wrote a token."""
    model, tok = tiny
    for call in (lambda: common.greedy(model, tok, [[], [5, 6]], max_new_tokens=3),
                 lambda: common.sample_many(model, tok, [[5, 6], []], 2, seeds=[0, 1], max_new_tokens=3),
                 lambda: common.greedy(model, tok, [5, 6], max_new_tokens=0)):
        with pytest.raises(common.InputError, match="tokens and .* new ones: nothing to continue"):
            call()


@pytest.mark.slow
def test_fast_path_equals_the_reference_on_smollm2():
    # float32 on every machine: --dtype auto would pick bfloat16 on AMX CPUs, where batched and unbatched
    # products round differently and the tolerance below would not hold
    model, tok = common.load_model("smollm2-135m", "float32")
    mlp = common.decoder_layers(model)[len(common.decoder_layers(model)) // 2 - 1].mlp
    prompt = common.chat_prompt(tok, "Who directed the film Laughter In Hell?")
    kw = dict(max_new_tokens=16, stop=("\n",), hidden_module=mlp)
    ref = common.reference(model, tok, prompt, 4, seed=7, with_greedy=True, **kw)
    assert_same([common.greedy(model, tok, prompt, **kw)], ref[:1], atol=1e-4)
    assert_same(common.sample(model, tok, prompt, 4, seed=7, with_greedy=True, **kw), ref, atol=1e-4)


# ----------------------------------------------------------------------------------------------
# --linear onednn: oneDNN's linear layers (models.OneDNNLinear) against the plain modules

def wide_model(tok, tie=False):
    """A random LLaMA wide enough (256) that oneDNN's sums round differently from MKL's."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      initializer_range=0.1, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, tie_word_embeddings=tie, attention_bias=True)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    speed.use_grouped_attention(model)
    return model


def onednn_twin(model):
    import copy
    twin = copy.deepcopy(model)
    models.use_onednn_linear(twin)
    return twin


def test_onednn_linear_equals_nn_linear_on_any_input_shape():
    torch.manual_seed(0)
    lin = torch.nn.Linear(300, 500)
    fast = models.OneDNNLinear(lin)
    assert (fast.weight.shape, fast.weight.dtype, fast.weight.is_mkldnn) == (lin.weight.shape, torch.float32, True)
    x = torch.randn(2, 7, 300)
    with torch.no_grad():
        for inp in (x, x[0], x[:, :1], x.transpose(0, 1), torch.randn(300, 9).t()):   # 3 dims, 2, views, strided
            want, got = lin(inp), fast(inp)
            assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
        assert torch.equal(fast.weight.to_dense(), lin.weight)          # the same numbers, another layout


def test_onednn_fast_path_equals_the_plain_reference(tiny_real):
    """greedy (alone and batched), sample and sample_many on oneDNN's linear layers give what
    reference() gives on the plain modules: the same texts and tokens, log-probabilities and hidden
    states within 1e-4, on both tokenizer kinds."""
    _, tok = tiny_real
    plain = wide_model(tok)
    fast = onednn_twin(plain)
    assert not any(type(m) is torch.nn.Linear for m in fast.modules())
    assert sum(isinstance(m, models.OneDNNLinear) for m in fast.modules()) == 2 * 7 + 1
    ids = torch.tensor([common.encode(tok, "Question: What is the capital of France?")])
    with torch.no_grad():
        a, b = plain(ids).logits, fast(ids).logits
    assert 0 < float((a - b).abs().max()) < 1e-4          # rounding differs, within tolerance
    speed.forget_prefix()
    mlp = lambda m: common.decoder_layers(m)[1].mlp        # noqa: E731  SeaKR's hook point
    head = "Question: Who directed the film Laughter In Hell? Answer: The film"
    prompts = [head + " Laughter", head + " was directed by", "What is the capital of France?"]
    kw = dict(max_new_tokens=10, stop=("e", "o"))
    ref = [common.reference(plain, tok, p, hidden_module=mlp(plain), **kw)[0] for p in prompts]
    assert_same([common.greedy(fast, tok, p, hidden_module=mlp(fast), **kw) for p in prompts], ref, atol=1e-4)
    assert_same(common.greedy(fast, tok, prompts, hidden_module=mlp(fast), **kw), ref, atol=1e-4)
    skw = dict(kw, top_k=30, top_p=0.9, temperature=1.3, with_greedy=True)
    ref_s = [common.reference(plain, tok, p, 5, seed=s, hidden_module=mlp(plain), **skw)
             for p, s in zip(prompts, [3, 4, 5])]
    assert len({tuple(g.token_ids) for g in ref_s[0]}) > 2                      # the rows differ
    assert_same(common.sample(fast, tok, prompts[0], 5, seed=3, hidden_module=mlp(fast), **skw), ref_s[0], atol=1e-4)
    for got, r in zip(common.sample_many(fast, tok, prompts, 5, seeds=[3, 4, 5], hidden_module=mlp(fast), **skw),
                      ref_s):
        assert_same(got, r, atol=1e-4)


def test_hooks_on_mlp_and_decoder_layers_fire_on_onednn_models(tiny_real):
    """SeaKR reads an MLP's output, CtrlA adds to decoder layers' outputs: both act the same on a model
    whose linear layers are oneDNN's."""
    _, tok = tiny_real
    plain = wide_model(tok)
    fast = onednn_twin(plain)
    ids = torch.tensor([common.encode(tok, "Question: What is the capital of France?")])
    seen, logits = {}, {}
    for name, m in (("plain", plain), ("fast", fast)):
        layer = common.decoder_layers(m)[0]
        with common.record_output(layer.mlp) as mlp_out, common.record_output(layer) as layer_out, \
                common.add_to_output(layer, torch.full((256,), 0.5)), torch.no_grad():
            logits[name] = m(ids).logits
        seen[name] = (mlp_out, layer_out)
        with torch.no_grad():
            moved = not torch.allclose(logits[name], m(ids).logits)
        assert moved                                            # the steering vector acted
    for a, b in zip(seen["plain"], seen["fast"]):
        assert len(a) == len(b) == 1 and torch.allclose(a[0], b[0], atol=1e-4)
    assert torch.allclose(logits["plain"], logits["fast"], atol=1e-4)


def test_tied_lm_head_gets_its_own_onednn_copy_and_the_embedding_stays():
    from conftest import make_bytelevel_tokenizer
    tok = make_bytelevel_tokenizer()
    plain = wide_model(tok, tie=True)
    assert plain.lm_head.weight is plain.get_input_embeddings().weight
    fast = onednn_twin(plain)
    assert isinstance(fast.lm_head, models.OneDNNLinear) and fast.lm_head.weight.is_mkldnn
    embedding = fast.get_input_embeddings().weight
    assert not embedding.is_mkldnn and torch.equal(embedding, plain.get_input_embeddings().weight)
    assert torch.equal(fast.lm_head.weight.to_dense(), embedding)          # the same numbers, its own copy
    assert isinstance(common.decoder_layers(fast)[0].mlp.down_proj, models.OneDNNLinear)
    ids = torch.tensor([common.encode(tok, "What is the capital of France?")])
    with torch.no_grad():
        a, b = plain(ids).logits, fast(ids).logits
    assert 0 < float((a - b).abs().max()) < 1e-4          # rounding differs, within tolerance


@pytest.mark.slow
def test_onednn_fast_path_equals_the_plain_reference_on_smollm2():
    plain, tok = common.load_model("smollm2-135m", "float32", "cpu", "plain")
    fast, _ = common.load_model("smollm2-135m", "float32", "cpu", "onednn")
    assert any(isinstance(m, models.OneDNNLinear) for m in fast.modules())
    assert isinstance(fast.lm_head, models.OneDNNLinear)   # tied to the embedding: a reordered copy
    mlp = lambda m: common.decoder_layers(m)[len(common.decoder_layers(m)) // 2 - 1].mlp   # noqa: E731
    prompt = common.chat_prompt(tok, "Who directed the film Laughter In Hell?")
    kw = dict(max_new_tokens=16, stop=("\n",))
    ref = common.reference(plain, tok, prompt, 4, seed=7, with_greedy=True, hidden_module=mlp(plain), **kw)
    assert_same([common.greedy(fast, tok, prompt, hidden_module=mlp(fast), **kw)], ref[:1], atol=1e-4)
    assert_same(common.sample(fast, tok, prompt, 4, seed=7, with_greedy=True, hidden_module=mlp(fast), **kw), ref,
                atol=1e-4)


def test_only_plain_key_value_caches_are_cut_and_reused():
    # a sliding window (Gemma 3) has dropped what a shorter prefix needs; a linear-attention state (hybrid
    # models) cannot be cut at all (transformers raises on crop): neither serves a prefix
    from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionLayer
    cache = DynamicCache()
    for extra, ok in ((DynamicLayer(), True), (DynamicSlidingWindowLayer(sliding_window=4), False),
                      (LinearAttentionLayer(), False)):
        cache.layers = [DynamicLayer(), extra]
        assert speed._reusable(cache) is ok
        keep, got = common.shared_cache(list(range(40)), list(range(40)), cache)
        assert (keep, got is cache) == ((39, True) if ok else (0, False))
