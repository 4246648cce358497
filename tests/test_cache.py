"""The call cache (--cache DIR): exact hits, every input in the key, hooks past it, damaged entries
recomputed, the fast path's state after a hit, and a run's file the same with and without it."""
import argparse
import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import common
import models
import speed
import ctrla
import seakr
from conftest import make_model, make_tokenizer

PROMPT = "Question: what is the capital of France?\nAnswer:"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The call cache on, in tmp_path, from a fresh prefix cache (as a new process starts)."""
    monkeypatch.setattr(speed, "CALL_CACHE", tmp_path / "calls")
    monkeypatch.setattr(speed, "CACHE_STATS", {"served": 0, "computed": 0, "bypassed": 0})
    speed.forget_prefix()
    yield tmp_path / "calls"
    speed.forget_prefix()


def same(a, b):
    """Two Generations equal in every field, bit for bit."""
    return (a.text, a.token_ids, a.logprobs, a.finish) == (b.text, b.token_ids, b.logprobs, b.finish) and (
        (a.hidden is None and b.hidden is None) or torch.equal(a.hidden, b.hidden))


def model_refused(monkeypatch):
    """Any model forward fails from here on: what follows must be served."""
    monkeypatch.setattr(speed, "_prefill", lambda *a, **k: pytest.fail("the model ran"))
    monkeypatch.setattr(common, "reference", lambda *a, **k: pytest.fail("the model ran"))


def test_a_stored_call_is_returned_exactly_and_runs_no_model(tiny, cache, monkeypatch):
    model, tok = tiny
    mlp = common.decoder_layers(model)[1].mlp
    kw = dict(temperature=0.9, top_k=20, top_p=0.95, max_new_tokens=12, stop=("\n",), hidden_module=mlp,
              with_greedy=True)
    samples = common.sample_many(model, tok, [PROMPT, PROMPT + " P"], 3, seeds=[5, 6], **kw)
    batch = common.greedy(model, tok, [PROMPT, "Question: who?"], max_new_tokens=10, hidden_module=mlp)
    one = common.greedy(model, tok, PROMPT, max_new_tokens=10)
    assert speed.CACHE_STATS == {"served": 0, "computed": 3, "bypassed": 0}
    assert len(list(cache.rglob("*.pt"))) == 3 and not list(cache.rglob("*.tmp"))
    speed.forget_prefix()
    model_refused(monkeypatch)
    again = common.sample_many(model, tok, [PROMPT, PROMPT + " P"], 3, seeds=[5, 6], **kw)
    assert all(same(a, b) for p, q in zip(samples, again) for a, b in zip(p, q))
    assert all(g.hidden is not None and g.hidden.untyped_storage().nbytes() == g.hidden.numel() * 4
               for p in again for g in p)                          # each row's own state stored, not its step's
    assert all(same(a, b) for a, b in zip(batch, common.greedy(model, tok, [PROMPT, "Question: who?"],
                                                                max_new_tokens=10, hidden_module=mlp)))
    assert same(one, common.greedy(model, tok, common.encode(tok, PROMPT), max_new_tokens=10))  # ids: same call
    assert speed.CACHE_STATS == {"served": 3, "computed": 3, "bypassed": 0}


def test_every_input_is_in_the_key(tiny, cache, monkeypatch):
    model, tok = tiny
    layers = common.decoder_layers(model)
    base = dict(k=3, seeds=[5], temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=12, stop=("\n",),
                hidden_module=1, with_greedy=True)           # a layer index: that layer's MLP in the model used

    def key(m=model, t=tok, call="sample", ids=None, **kw):
        settings = {**base, **kw}
        if settings["hidden_module"] is not None:
            settings["hidden_module"] = common.decoder_layers(m)[settings["hidden_module"]].mlp
        return speed.call_key(m, t, call, ids or [common.encode(tok, PROMPT)], settings)
    assert key() == key() and key(m=copy.deepcopy(model)) == key()     # the same weights elsewhere: a hit
    other_weights = copy.deepcopy(model)
    with torch.no_grad():
        other_weights.model.layers[2].mlp.down_proj.weight.mul_(1.01)
    kernel = copy.deepcopy(model)
    kernel.kernel = "onednn"                                           # speed.KERNEL_ATTR
    # oneDNN's reordered weight is a layer's only copy and no part of the state dict: a fine-tune that
    # differs in one linear layer must still miss
    onednn, onednn_other = copy.deepcopy(model), copy.deepcopy(other_weights)
    models.use_onednn_linear(onednn)
    models.use_onednn_linear(onednn_other)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    more_eos = copy.deepcopy(model)
    more_eos.generation_config.eos_token_id = [2, 5]                # EOS ids {2} -> {2, 5}, same weights
    variants = {
        "prompt": key(ids=[common.encode(tok, PROMPT + " x")]), "k": key(k=4), "seed": key(seeds=[6]),
        "temperature": key(temperature=0.9), "top_k": key(top_k=20), "top_p": key(top_p=0.9),
        "max tokens": key(max_new_tokens=13), "stop": key(stop=("\n", ".")), "with greedy": key(with_greedy=False),
        "hidden module": key(hidden_module=2), "no hidden state": key(hidden_module=None),
        "greedy call": key(call="greedy"), "another model": key(m=make_model(len(tok), seed=1)),
        "its weights": key(m=other_weights), "kernel": key(m=kernel), "attention": key(m=eager),
        "oneDNN": key(m=onednn), "its weights on oneDNN": key(m=onednn_other),
        "precision": key(m=copy.deepcopy(model).to(torch.bfloat16)),
        "tokenizer": key(t=_other_tokenizer()), "eos ids": key(m=more_eos),
        "decode spaces": key(t=_spaces_cleaned(tok)),      # same backend: decode's text differs
    }
    speed.PLAIN = True
    try:
        variants["--plain"] = key()
    finally:
        speed.PLAIN = False
    real_file_id = speed.file_id
    # the fast path's switches, the entry format, the code (common.py's id, models.py's, torch's and transformers'
    # versions) and the machine (CPU name, thread count): each set one at a time, then restored
    for name, owner, attr, value in [
            ("no batching", speed, "BATCH", False), ("no prefix reuse", speed, "REUSE_PREFIX", False),
            ("no shared prompt", speed, "SHARE_PROMPT", False), ("entry format", speed, "_CACHE_FORMAT", 2),
            ("common.py", speed, "file_id", lambda path: "1 bytes, sha256 0123456789abcdef"),
            ("models.py", speed, "file_id",
             lambda path: "2 bytes, sha256 0123456789abcdef" if Path(path).name == "models.py" else real_file_id(path)),
            ("torch version", speed.torch, "__version__", "0.0.1"),
            ("transformers version", speed.transformers, "__version__", "0.0.1"),
            ("cpu name", speed, "cpu_name", lambda: "Other CPU (GenuineIntel, family 6, model 1)")]:
        with monkeypatch.context() as m:
            m.setattr(owner, attr, value)
            variants[name] = key()
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        variants["threads"] = key()
    finally:
        torch.set_num_threads(threads)
    with common.add_to_output(layers[1], torch.ones(32)):
        variants["steering"] = key()
    with common.add_to_output(layers[1], 2 * torch.ones(32)):
        variants["another vector"] = key()
    with common.add_to_output(layers[2], torch.ones(32)):
        variants["another layer"] = key()
    keys = [key()] + list(variants.values())
    assert len(set(keys)) == len(keys), [n for n, k in variants.items() if keys.count(k) > 1]
    assert key() == keys[0]                                            # steering off again: the plain key


def test_the_weights_sample_reaches_the_last_element_of_a_large_tensor():
    """SmolLM2's embedding has 28,311,552 values: a float32 linspace would index past its end."""
    for n in (1, 2, 4095, 4096, 4097, 28_311_552, 2 ** 33 + 3):
        idx = speed.evenly_spaced(n, 4096)
        assert len(idx) == min(n, 4096) and int(idx[0]) == 0 and int(idx[-1]) == n - 1
        assert bool((idx[1:] > idx[:-1]).all())


def _other_tokenizer():
    tok = make_tokenizer()
    tok.add_tokens(["Paris"])                                          # same ids for the prompt, other text
    return tok


def test_a_stored_call_serves_only_the_same_steering(tiny, cache):
    model, tok = tiny
    layer = common.decoder_layers(model)[2]
    plain = common.greedy(model, tok, PROMPT, max_new_tokens=10)
    with common.add_to_output(layer, 3 * torch.ones(32)):
        steered = common.greedy(model, tok, PROMPT, max_new_tokens=10)
    assert steered.token_ids != plain.token_ids and speed.CACHE_STATS["computed"] == 2
    with common.add_to_output(layer, 3 * torch.ones(32)):
        assert same(common.greedy(model, tok, PROMPT, max_new_tokens=10), steered)
    assert same(common.greedy(model, tok, PROMPT, max_new_tokens=10), plain)
    assert speed.CACHE_STATS == {"served": 2, "computed": 2, "bypassed": 0}


def test_a_call_under_any_other_hook_is_computed_and_the_hook_fires(tiny, cache):
    model, tok = tiny
    layer = common.decoder_layers(model)[1]
    stored = common.greedy(model, tok, PROMPT, max_new_tokens=10)
    with common.record_output(layer) as outs:                          # CtrlA's kind of recording
        again = common.greedy(model, tok, PROMPT, max_new_tokens=10)
    assert outs and again.token_ids == stored.token_ids                 # computed: the hook saw it
    seen = []
    handle = layer.mlp.register_forward_pre_hook(lambda m, i: seen.append(1))
    try:
        common.sample(model, tok, PROMPT, 2, max_new_tokens=5, seed=1)
        common.sample(model, tok, PROMPT, 2, max_new_tokens=5, seed=1)
    finally:
        handle.remove()
    assert seen and speed.CACHE_STATS == {"served": 0, "computed": 1, "bypassed": 3}
    # transformers' own output-capturing hooks (installed by a forward with output_hidden_states) record
    # nothing unless asked: they do not keep calls from the cache
    with torch.no_grad():
        model(input_ids=torch.tensor([common.encode(tok, PROMPT)]), output_hidden_states=True)
    assert any(l._forward_hooks for l in common.decoder_layers(model))
    assert same(common.greedy(model, tok, PROMPT, max_new_tokens=10), stored)     # served
    assert speed.CACHE_STATS["served"] == 1


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "another key"])
def test_a_damaged_entry_is_recomputed_never_trusted(tiny, cache, damage, capsys):
    model, tok = tiny
    want = common.greedy(model, tok, PROMPT, max_new_tokens=10)
    other = common.greedy(model, tok, PROMPT, max_new_tokens=11)
    (path, other_path) = sorted(cache.rglob("*.pt"), key=lambda p: p.stat().st_mtime_ns)
    data = path.read_bytes()
    path.write_bytes({"truncated": data[:len(data) // 2], "garbage": b"not a torch file", "empty": b"",
                      "another key": other_path.read_bytes()}[damage])
    speed.forget_prefix()
    assert same(common.greedy(model, tok, PROMPT, max_new_tokens=10), want)
    assert speed.CACHE_STATS == {"served": 0, "computed": 3, "bypassed": 0}
    assert path.read_bytes() == data                                   # rewritten whole
    assert same(common.greedy(model, tok, PROMPT, max_new_tokens=10), want) and speed.CACHE_STATS["served"] == 1


def test_an_interrupted_write_leaves_no_entry(tiny, cache, monkeypatch):
    model, tok = tiny

    def interrupted(obj, f):
        open(f, "wb").write(b"PK\x03\x04 half")
        raise KeyboardInterrupt
    monkeypatch.setattr(speed.torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        common.greedy(model, tok, PROMPT, max_new_tokens=10)
    assert not [p for p in cache.rglob("*") if p.is_file()]


def test_calls_after_a_hit_give_what_they_give_without_the_cache(tiny, cache, monkeypatch):
    """A hit runs no prefill and keeps no rows, so the fast path's prefix cache (_LAST) and kept rows
    (_ROWS) then hold what earlier calls left: the calls after it must still give their own results."""
    model, tok = tiny
    mlp = common.decoder_layers(model)[1].mlp

    kept = []

    def calls():
        first = common.greedy(model, tok, PROMPT, max_new_tokens=12)
        kept.append([ids for ids, _ in speed._ROWS.get(speed._cache_key(model), [])])
        ids = common.encode(tok, PROMPT) + first.token_ids
        turn = common.greedy(model, tok, ids + common.encode(tok, "\nSo:")[1:], max_new_tokens=12)  # continues it
        drawn = common.sample(model, tok, PROMPT + " Paris", 3, max_new_tokens=12, seed=2, hidden_module=mlp,
                              with_greedy=True)
        return [first, turn, *drawn]
    monkeypatch.setattr(speed, "CALL_CACHE", None)
    want = calls()                                                     # no cache, fresh state
    speed.forget_prefix()
    speed.CALL_CACHE = cache
    common.greedy(model, tok, PROMPT, max_new_tokens=12)               # stores the first call only
    speed.forget_prefix()
    common.greedy(model, tok, "Question: something else entirely, and long enough", max_new_tokens=12)
    got = calls()                                                      # first served, the others computed
    assert speed.CACHE_STATS["served"] == 1
    assert kept[0] and kept[1] == []            # the hit kept no rows, and left none of an earlier call behind
    for a, b in zip(got, want):
        assert (a.text, a.token_ids, a.finish) == (b.text, b.token_ids, b.finish)
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)     # the fast path's own tolerance
        assert a.hidden is None or torch.allclose(a.hidden, b.hidden, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# End to end: a run's file is the same with the cache (cold or warm) as without it

def rows(path):
    """The rows of a run file, without the timing fields ("seconds", "cpu_seconds")."""
    return [{k: v for k, v in json.loads(line).items() if k not in ("seconds", "cpu_seconds")}
            for line in path.read_text().splitlines()]


def test_seakr_files_are_identical_with_and_without_the_cache(tiny, tmp_path, monkeypatch, capsys):
    model, tok = tiny
    monkeypatch.setattr(seakr.common, "load_model", lambda *a, **k: tiny)
    monkeypatch.setattr(seakr, "MAX_NEW_TOKENS", 40)

    def run(name, delta, cache=None):
        speed.forget_prefix()                                         # each run as a process of its own
        out = tmp_path / f"{name}.jsonl"
        seakr.main(["--dataset", "hotpotqa", "--limit", "2", "--samples", "3", "--threshold", str(delta),
                    "--output", str(out)] + (["--cache", str(tmp_path / cache)] if cache else []))
        err = capsys.readouterr().err
        served = [line for line in err.splitlines() if line.startswith("call cache")]
        return rows(out), (served[-1].split(": ")[1] if served else None)
    plain, none = run("plain", 0.7)
    assert none is None and {r["retrievals"] for r in plain} != {0}       # the runs retrieve
    cold, said = run("cold", 0.7, "calls")
    assert cold == plain and said.startswith("0 model calls served")
    warm, said = run("warm", 0.7, "calls")
    assert warm == plain and said.endswith(" served, 0 computed")
    settings = lambda name: json.loads((tmp_path / f"{name}.settings.json").read_text())
    assert settings("warm") == settings("plain") and "--cache" not in settings("warm")   # not a setting
    # a sweep: the next delta is served the calls it shares with the first run, computes the others
    other, said = run("other", 0.3, "calls")
    other_plain, _ = run("other-plain", 0.3)
    assert other == other_plain and other != plain
    served, computed = [int(x.split()[0]) for x in said.split(", ")]
    assert served > 0 and computed > 0
    # a file begun without the cache resumes with it (and the other way round): same settings, so a
    # rerun of its questions finds nothing left to do (and no settings refusal)
    out = tmp_path / "plain.jsonl"
    with pytest.raises(common.NothingToDo):
        seakr.main(["--dataset", "hotpotqa", "--limit", "2", "--samples", "3", "--threshold", "0.7", "--output",
                    str(out), "--cache", str(tmp_path / "calls")])
    assert rows(out) == plain


@pytest.fixture(scope="module")
def ctrla_model():
    tok = make_tokenizer()
    model = make_model(len(tok), seed=3, layers=6)
    statements = [{"statement": s, "topic": "Science", "style": style} for s, style in [
        ("Water boils at one hundred degrees.", "confident"), ("The Moon orbits us, I guess?", "unconfident"),
        ("Plants need light to grow.", "confident"), ("Ice is frozen water, maybe.", "unconfident")]]
    feats = {kind: ctrla.features(model, tok, kind, n_pairs=24, rows=statements) for kind in ctrla.PERSONAS}
    return model, tok, feats


def test_ctrla_files_are_identical_with_and_without_the_cache(ctrla_model, tmp_path, capsys):
    """CtrlA steers its segments (in the key) and monitors them with hidden states (transformers' hooks)."""
    model, tok, feats = ctrla_model
    s = ctrla.Settings(tau=1e9, steer=(-2, -3), monitor=(-2, -3, -4), answer_tokens=30)  # all flagged
    p = argparse.ArgumentParser()
    common.add_common_args(p, dataset="popqa")

    data = tmp_path / "popqa.jsonl"
    data.write_text("".join(json.dumps({"id": i, "question": q, "answers": [a], "prop": "place", "s_wiki_title": a}) + "\n"
                            for i, (q, a) in enumerate([("Where is the Eiffel Tower?", "Paris"),
                                                        ("Where is the Moon?", "Space")])))

    def run(name, cache=None):
        speed.forget_prefix()
        args = p.parse_args(["--data", str(data), "--output", str(tmp_path / f"{name}.jsonl")]
                            + (["--cache", str(tmp_path / cache)] if cache else []))
        records = common.check_inputs(args)
        r = ctrla.Run(model, tok, feats, common.load_retriever(args, records, preset="ctrla"), replace(s))
        common.run(args, "ctrla", lambda rec: ctrla.solve(r, rec), records)
        return rows(tmp_path / f"{name}.jsonl"), capsys.readouterr().err
    plain, _ = run("plain")
    assert any(r["retrievals"] for r in plain)
    cold, err = run("cold", "calls")
    assert cold == plain
    cold_served, cold_computed = calls_said(err)
    assert cold_served == 0 and cold_computed > 0                     # every call computed and stored
    warm, err = run("warm", "calls")
    assert warm == plain
    assert calls_said(err) == (cold_computed, 0)                       # every one of them served


def calls_said(err):
    """(served, computed) from a run's "call cache DIR: S model calls served, C computed" line."""
    [line] = [line for line in err.splitlines() if line.startswith("call cache ")]
    served, computed = line.split(": ", 1)[1].split(", ")[:2]
    assert served.endswith(" model calls served") and computed.endswith(" computed"), line
    return int(served.split()[0]), int(computed.split()[0])


def test_a_cache_path_that_is_a_file_is_one_line_of_bad_input(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = argparse.ArgumentParser()
    common.add_common_args(p)
    for where, why in [(blocker, "not a directory"), (blocker / "sub", "not writable")]:
        args = p.parse_args(["--dataset", "nq", "--cache", str(where), "--output", str(tmp_path / "o.jsonl")])
        with pytest.raises(common.InputError, match=f"--cache {where}: {why}; pass --cache with a writable"):
            common.check_inputs(args)


def test_run_all_passes_one_cache_to_every_run(tmp_path):
    import sys
    sys.path.insert(0, str(common.DATA_DIR.parent / "benchmarks"))
    import run_all
    a = argparse.Namespace(data=tmp_path / "q.json", corpus="contexts", limit=2, model=None, verifier=None,
                           out=tmp_path, runs=["all"], deltas=[2.5], taus=[], zs=[], extra=[],
                           cache=tmp_path / "calls")
    for name in run_all.runs(a):
        cmd = run_all.command(name, a)
        assert cmd[cmd.index("--cache") + 1] == str(tmp_path / "calls")
    assert "--cache" not in run_all.command("seakr", argparse.Namespace(**{**vars(a), "cache": None}))  # --no-cache


def _spaces_cleaned(tok):
    """tok with clean_up_tokenization_spaces flipped: " ," decodes to "," (a flag kept outside the backend)."""
    other = copy.deepcopy(tok)
    other.clean_up_tokenization_spaces = not tok.clean_up_tokenization_spaces
    assert other.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    return other
