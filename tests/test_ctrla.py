"""CtrlA: the math on hand-made tensors; hooks, monitoring and the loop on tiny random models; refusal
handling on a scripted model."""
import argparse
import copy
import itertools
import json
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import analysis
import common
import ctrla
import eval as metrics
from conftest import make_model, make_tokenizer

STATEMENTS = [{"statement": s, "topic": "Science", "style": style} for s, style in [
    ("Water boils at one hundred degrees.", "confident"), ("The Moon orbits us, I guess?", "unconfident"),
    ("Plants need light to grow.", "confident"), ("Ice is frozen water, maybe.", "unconfident")]]
PASSAGES = [{"id": "p1", "title": "Eiffel Tower", "text": "The Eiffel Tower is in Paris, France."},
            {"id": "p2", "title": "Paris", "text": "Paris is the capital of France."},
            {"id": "p3", "title": "Moon", "text": "The Moon orbits the Earth once a month."}]


def unit(v):
    return v / v.norm()


def hooks(model):
    """Forward hooks on the decoder layers (transformers installs its own output-capturing ones the
    first time hidden states are requested, so tests compare before and after)."""
    return [dict(layer._forward_hooks) for layer in common.decoder_layers(model)]


# ---------------------------------------------------------------- features

def test_pca_direction_agrees_with_svd():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 40, generator=g) @ torch.randn(40, 40, generator=g) + 2.0
    d, mean = ctrla.pca_direction(x)
    top = torch.linalg.svd(x - x.mean(0), full_matrices=False).Vh[0]
    assert abs(float(d @ top)) > 0.999
    assert torch.allclose(mean, x.mean(0)) and abs(float(d.norm()) - 1) < 1e-5
    # the same states give the same direction to the bit (pca_lowrank's random sketch is seeded), and the
    # caller's random stream is left where it was
    state = torch.random.get_rng_state()
    assert torch.equal(ctrla.pca_direction(x)[0], d) and torch.equal(torch.random.get_rng_state(), state)


def test_sign_rule():
    pos, neg = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.0, 0.0, 5.0])
    assert ctrla.direction_sign(pos, neg) == 1.0       # positive higher in 2 of 3 pairs
    assert ctrla.direction_sign(neg, pos) == -1.0
    assert ctrla.direction_sign(pos, pos) == 1.0       # a tie counts as +1
    # after sign fixing, the positive prompt projects higher in most training pairs at every layer
    g = torch.Generator().manual_seed(1)
    base = torch.randn(3, 64, 16, generator=g)
    shift = torch.stack([unit(torch.randn(16, generator=g)) for _ in range(3)])[:, None]
    pos, neg = base + shift, base - shift
    first_pos = torch.tensor([random.Random(i).random() < 0.5 for i in range(64)])
    first = torch.where(first_pos[None, :, None], pos, neg)
    second = torch.where(first_pos[None, :, None], neg, pos)
    states = torch.stack([first, second], dim=2).reshape(3, 128, 16)   # pairs flattened, shuffled
    feats = ctrla.read_features(states, first_pos)
    for layer in range(3):
        d = feats["sign"][layer] * feats["direction"][layer]
        assert ((pos[layer] @ d) > (neg[layer] @ d)).float().mean() > 0.5
        assert torch.allclose(feats["mean"][layer], (states[layer, 0::2] - states[layer, 1::2]).mean(0))


def test_prefixes_and_pairs():
    tok = make_tokenizer()
    pos = common.chat_prompt(tok, "Pretend you're an honest person making statements about the world.")
    neg = common.chat_prompt(tok, "Pretend you're an untruthful person making statements about the world.")
    assert ctrla.statement_prefixes(tok, pos, "abcdefghij") == \
        [common.encode(tok, pos + " " + x) for x in ["a", "ab", "abc", "abcd"]]   # T - 6 prefixes
    assert ctrla.statement_prefixes(tok, pos, "abcdef") == []
    flat, first_pos, used = ctrla.contrast_pairs(tok, ["abcdefghij", "klmnopqrst", "uvwxyzabcd"],
                                                 ctrla.PERSONAS["honesty"], n_pairs=6)
    assert len(flat) == 12 and len(first_pos) == 6 and used == 2
    rng = random.Random(0)
    for i, x in enumerate(["a", "ab", "abc", "abcd", "k", "kl"]):
        order = [common.encode(tok, pos + " " + x), common.encode(tok, neg + " " + x)]  # "Assistant:", " ", x
        positive = order[0]
        rng.shuffle(order)
        assert flat[2 * i:2 * i + 2] == order and bool(first_pos[i]) == (order[0] == positive)


SKELETON = "The skeleton of an adult has 206 bones in all of it."


@pytest.mark.parametrize("kind", ["sentencepiece", "bytelevel"])
def test_a_prefix_ending_in_a_space_token_keeps_it(kind, sp_tok, bpe_tok):
    """Prefixes are cut from the token ids of persona + statement: the prefix that ends in the lone space
    token before "206" ("▁" on SentencePiece, "Ġ" on byte-level BPE, as Qwen splits digits) keeps it,
    where a prefix text would lose its trailing space in common.encode and repeat the prefix before it."""
    tok = sp_tok if kind == "sentencepiece" else bpe_tok
    flat, _, used = ctrla.contrast_pairs(tok, [SKELETON], ctrla.PERSONAS["honesty"], n_pairs=100)
    flat = [common.encode(tok, f) for f in flat]         # what the model reads
    head = common.chat_prompt(tok, ctrla.PERSONA.format("an honest"))
    n = len(common.encode(tok, head))
    whole = common.encode(tok, head + " " + SKELETON)
    # in this context the statement is 30 tokens (SentencePiece) / 32 (byte-level): 24 / 26 prefixes
    want_t = {"sentencepiece": 30, "bytelevel": 32}[kind]
    assert len(whole) - n == want_t and used == 1
    honest = sorted((f for f in flat if f[:n] == whole[:n]), key=len)
    assert honest == [whole[:n + i] for i in range(1, want_t - 6 + 1)]
    space = "▁" if kind == "sentencepiece" else "Ġ"
    ends = [tok.convert_ids_to_tokens(p[-2:]) for p in honest]
    assert ["s", space] in ends and [space, "2" if kind == "bytelevel" else "<0x32>"] in ends



def test_steered_generation_reads_one_bos_where_the_template_writes_it(sp_tok):
    """Ours: every prompt as the chat template writes it, Mistral's "<s>" included, read once (common.encode
    adds no second one). Official: the steered pipeline encodes with add_special_tokens=False and its
    "[INST]" text has no "<s>", so its steered segments are generated without BOS (docs/ctrla.md)."""
    tok = copy.deepcopy(sp_tok)
    tok.chat_template = MISTRAL_TEMPLATE
    ids = common.encode(tok, ctrla.build_prompt(tok, "short", "Who directed Laughter In Hell?", gen=["The film"]))
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1

MISTRAL_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }}"
                    " [/INST]{% else %}{{ m['content'] }}</s>{% endif %}{% endfor %}")
CHATML_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
FILM = "The film Laughter In Hell was directed by Edward L. Cahn."


def test_contrast_prompts_follow_the_template(real_tok):
    """Official: "[INST] Pretend you're ... [/INST] " + prefix; after a template ending in a newline
    (ChatML) no space. On SentencePiece the model then reads exactly the statement's own tokens."""
    tok = copy.deepcopy(real_tok)
    tok.chat_template = MISTRAL_TEMPLATE
    flat, _, _ = ctrla.contrast_pairs(tok, [FILM], ctrla.PERSONAS["honesty"], n_pairs=2)
    honest = "[INST] Pretend you're an honest person making statements about the world. [/INST] "
    liar = honest.replace("an honest", "an untruthful")
    bos = tok.bos_token or ""
    ids = lambda *texts: sorted(common.encode(tok, t) for t in texts)   # the official strings, encoded
    assert sorted(flat[:2]) == ids(bos + honest + "The", bos + liar + "The")
    assert sorted(flat[2:]) == ids(bos + honest + "The film", bos + liar + "The film")
    if tok.bos_token:   # SentencePiece: the prompt ends in the statement's own tokens "▁The", "▁film"
        assert tok.convert_ids_to_tokens(flat[2])[-2:] == tok.tokenize(FILM)[:2]
    tok.chat_template = CHATML_TEMPLATE
    flat, _, _ = ctrla.contrast_pairs(tok, [FILM], ctrla.PERSONAS["confidence"], n_pairs=2)
    # the statement's tokens as they follow "\n": "The" (byte-level), "T", "he" (this SentencePiece)
    want = ids(*(f"<|im_start|>user\nPretend you're {p} person making statements about the "
                 f"world.<|im_end|>\n<|im_start|>assistant\nThe" for p in ("a confident", "an unconfident")))
    assert all(w in flat for w in want)


def test_next_segment_is_one_greedy_decode(tiny_real, monkeypatch):
    """Pausing at every space (each a false sentence end) and resuming gives exactly the text one greedy
    decode gives: no space lost after the prompt (SentencePiece), none doubled (byte-level BPE)."""
    model, tok = tiny_real
    run = ctrla.Run(model, tok, {"honesty": random_features(4, 32)}, None, ctrla.Settings(lam=0.0, steer=(-1,)))
    monkeypatch.setattr(ctrla, "SENTENCE_STOPS", (" ",))
    for question in ["Who directed the film Laughter In Hell?", "What is the capital of France?"]:
        prompt = ctrla.build_prompt(tok, "short", question, gen=["Paris is the capital of France."])
        run.calls = 0
        got = ctrla.next_segment(run, prompt)
        whole = common.greedy(model, tok, prompt, max_new_tokens=ctrla.SEGMENT_TOKENS)
        want = ctrla.first_sentence(tok.decode(whole.token_ids, skip_special_tokens=True))
        assert run.calls >= 2 and got == (want[0], whole.finish == "eos" and not want[1])


# ---------------------------------------------------------------- layers and steering

@pytest.mark.parametrize("n_layers, steer, monitor", [(32, list(range(15, 28)), list(range(8, 23))),
                                                      (30, list(range(13, 26)), list(range(6, 21)))])
def test_layer_mapping(n_layers, steer, monitor):
    steer_keys, monitor_keys = common.layer_keys("5:18"), common.layer_keys("10:25")
    assert steer_keys == list(range(-5, -18, -1)) and monitor_keys == list(range(-10, -25, -1))
    assert sorted(common.decoder_index(k, n_layers) for k in steer_keys) == steer
    assert sorted(common.decoder_index(k, n_layers) for k in monitor_keys) == monitor
    with pytest.raises(common.InputError):
        common.decoder_index(-n_layers - 1, n_layers)
    with pytest.raises(common.InputError):
        common.layer_keys("18:5")


def test_default_ranges_moved_to_a_shallower_model():
    # Gemma-3-270M has 18 layers: 5:18 -> round(2.81):round(10.1) = 3:10, 10:25 -> round(5.6):round(14.1) = 6:14
    assert common.scaled_range("5:18", 18) == "3:10" and common.scaled_range("10:25", 18) == "6:14"
    assert common.scaled_range("10:25", 32) == "10:25"                 # the reference model: unchanged
    assert common.scaled_range("5:18", 2) == "1:2"                     # never empty, never past the top
    for spec in ("5:18", "10:25"):
        keys = common.layer_keys(common.scaled_range(spec, 18))
        assert all(common.decoder_index(k, 18) >= 0 for k in keys)


def test_layer_ranges_beyond_the_model_name_their_flag(tiny):
    """A range past the model names its flag and value; the defaults past a shallower model name both
    flags with the same share of its depth (scaled_range by hand: 5:18 -> round(0.6):round(2.3) = 1:2,
    10:25 -> 1:3 on 4 layers)."""
    model = tiny[0]                                       # 4 decoder layers
    defaults = {"--steer-layers": "5:18", "--monitor-layers": "10:25"}
    with pytest.raises(common.InputError, match=r"^--monitor-layers 2:9: tiny has 4 decoder layers; pass B:E "
                                                r"with E <= 5$"):
        common.check_layer_ranges(model, "tiny", {"--steer-layers": "1:3", "--monitor-layers": "2:9"}, defaults, "M")
    with pytest.raises(common.InputError, match=r"^the default layer ranges \(5:18, 10:25; M has 32 layers\) need 24 "
                                                r"decoder layers and tiny has 4; .* --steer-layers 1:2 --monitor-layers 1:3$"):
        common.check_layer_ranges(model, "tiny", defaults, defaults, "M")
    common.check_layer_ranges(model, "tiny", {"--steer-layers": "1:3", "--monitor-layers": "2:5"}, defaults, "M")


def test_key_reads_the_decoder_layer_output():
    tok = make_tokenizer()
    model = make_model(len(tok), layers=6)
    ids = torch.tensor([common.encode(tok, "hello there")])
    layers = common.decoder_layers(model)
    with common.record_output(layers[common.decoder_index(-3, 6)]) as rec, torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    assert torch.allclose(hs[-3], rec[0])


def random_features(n_layers, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"direction": torch.stack([unit(torch.randn(d, generator=g)) for _ in range(n_layers)]),
            "sign": torch.tensor([1.0, -1.0] * (n_layers // 2) + [1.0] * (n_layers % 2)),
            "mean": 0.1 * torch.randn(n_layers, d, generator=g), "statements_used": 0}


def test_steering_hook(tiny):
    model, tok = tiny
    feats = random_features(4, 32)
    layers = common.decoder_layers(model)
    before = hooks(model)
    prompt = "User: hello\n\nAssistant:"
    base = common.greedy(model, tok, prompt, max_new_tokens=24)
    with ctrla.steering(model, feats, [-1, -2, -3], 0.0):
        assert common.greedy(model, tok, prompt, max_new_tokens=24).token_ids == base.token_ids
    # the steered layer's output moves by exactly lam * sign * d at every position
    ids = torch.tensor([common.encode(tok, prompt)])
    with common.record_output(layers[3]) as plain, torch.no_grad():
        model(input_ids=ids)
    with ctrla.steering(model, feats, [-1], 2.0), common.record_output(layers[3]) as steered, torch.no_grad():
        model(input_ids=ids)
    delta = steered[0] - plain[0]
    want = 2.0 * feats["sign"][-1] * feats["direction"][-1]
    assert torch.allclose(delta, want.expand_as(delta), atol=1e-5)
    with ctrla.steering(model, feats, [-1, -2], 5.0):
        assert common.greedy(model, tok, prompt, max_new_tokens=24).token_ids != base.token_ids
    with pytest.raises(RuntimeError), ctrla.steering(model, feats, [-1, -2], 5.0):
        raise RuntimeError("hooks must go even so")
    assert hooks(model) == before
    assert common.greedy(model, tok, prompt, max_new_tokens=24).token_ids == base.token_ids


# ---------------------------------------------------------------- monitoring

def test_token_scores_by_hand():
    states = torch.tensor([[[1.0, 0.0], [0.0, 2.0]], [[3.0, 1.0], [1.0, 1.0]]])    # 2 layers, 2 tokens
    dirs = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    means = torch.tensor([[0.5, 0.0], [0.0, 0.5]])
    signs = torch.tensor([1.0, -1.0])
    # token 0: (1 - .5) and -(1 - .5) -> 0; token 1: (0 - .5) and -(1 - .5) -> -0.5
    assert torch.allclose(ctrla.token_scores(states, dirs, signs, means), torch.tensor([0.0, -0.5]))


def test_monitoring_decision():
    g = torch.Generator().manual_seed(0)
    s = 0.1 * torch.randn(200, generator=g)
    s[7], s[20] = 30.0, -30.0      # population std ~3, so both lie beyond 5 std of the median
    clamped = ctrla.clamp_outliers(s)
    med = s.quantile(0.5)
    assert clamped[7] == med and clamped[20] == med
    keep = torch.ones(200, dtype=torch.bool)
    keep[[7, 20]] = False
    assert torch.equal(clamped[keep], s[keep])
    assert ctrla.unconfident(torch.tensor([0.0, -1e-6, 1e-6])).tolist() == [False, True, False]
    assert ctrla.unconfident(torch.tensor([0.5, 1.5]), tau=1.0).tolist() == [True, False]
    for c in (1e-3, 3.0, 1e4):   # with tau = 0 a positive scale never changes a decision
        assert torch.equal(ctrla.unconfident(ctrla.clamp_outliers(c * s)), ctrla.unconfident(clamped))


def test_monitor_reuses_the_shared_prefix(tiny, fed_tokens):
    model, tok = tiny
    run = ctrla.Run(model, tok, {"confidence": random_features(4, 32)}, None,
                    ctrla.Settings(monitor=(-1, -2, -3)))
    head = "User: where is the tower?\n\nAssistant: It is in Paris."
    with fed_tokens(model) as fed:
        ctrla.monitor(run, head, 30, "where is the tower?", [])
        ctrla.monitor(run, head + " It is tall.", len(head) + 1, "where is the tower?", ["It is in Paris."])
    # BOS and one token per character, the blank line "\n\n" one (<unk>): head is len(head) tokens, all fed
    # by the first pass; the second keeps them and feeds only " It is tall.", 12 tokens
    assert fed == [len(head), 12]
    reused = run.cache[2]
    run.cache = None
    ctrla.monitor(run, head + " It is tall.", len(head) + 1, "where is the tower?", ["It is in Paris."])
    assert torch.allclose(reused, run.cache[2], atol=1e-5)


# ---------------------------------------------------------------- words, refusals, queries

QUESTION = "What is Henry Feilden's occupation?"
SEGMENT = "Henry Feilden is a politician."


def char_spans(text):
    return [(i, i + 1) for i in range(len(text))]


def test_new_information_rule():
    every = [True] * len(SEGMENT)
    flagged = ctrla.flag_words(SEGMENT, 0, char_spans(SEGMENT), every, QUESTION, [])
    assert [SEGMENT[a:b] for a, b in flagged] == ["politician."]        # spec fact 8
    assert ctrla.flag_words(SEGMENT, 0, char_spans(SEGMENT), every, QUESTION, ["He was a politician."]) == []
    only_is = [14 <= i < 16 for i in range(len(SEGMENT))]                 # "is": a stop word
    assert ctrla.flag_words(SEGMENT, 0, char_spans(SEGMENT), only_is, QUESTION, []) == []
    # spans are offsets in the monitored text, where the segment starts at `start`
    text = "Q: x\nA: " + SEGMENT
    assert ctrla.flag_words(SEGMENT, 8, char_spans(text), [True] * len(text), QUESTION, []) == [(19, 30)]
    assert not ctrla.is_new_information("--", QUESTION, [])              # punctuation only
    assert not ctrla.is_new_information("Feilden's", QUESTION, [])
    assert ctrla.is_new_information("Politician", QUESTION, [])


def test_refusal_detector():
    for text in ["I don't know.", "I'm not sure about that.", "I do not know.", "The cause is unknown.",
                 "The text does not mention his birthplace.", "I DON'T KNOW"]:
        assert ctrla.is_refusal(text), text
    for text in ["Paris is the capital of France.", "He knows the answer.", "Surely it is Paris."]:
        assert not ctrla.is_refusal(text), text


def test_refusal_detector_is_narrow():
    """The official phrases: refusals match, ordinary facts with "not" / "unable" do not."""
    for text in ["Penguins do not have teeth.", "He was unable to attend.", "She does not have a car.",
                 "More information came to light in 1990.", "They could not find the ship until 1985.",
                 "He is not certain to win."]:
        assert not ctrla.is_refusal(text), text
    for text in ["The author is not specified in the given content.", "I'm unable to provide an answer.",
                 "There is no information about his birthplace.", "I cannot confirm that."]:
        assert ctrla.is_refusal(text), text


def test_stop_words_are_spacys():
    words = ctrla.stop_words()
    assert len(words) == 326 and {"first", "many", "became", "n't", "\u2019s"} <= words
    assert "spaCy" in ctrla.STOP_FILE.read_text(encoding="utf-8").splitlines()[0]
    for w in ["first", "Many", "became", "Afterwards,", "--", "\u2014", "\u201c\u2014\u201d", "(...)"]:
        assert not ctrla.is_new_information(w, QUESTION, []), w
    assert ctrla.is_new_information("\u201cPolitician\u201d", QUESTION, [])
    segment = "He first became a politician \u2014 in 1950."
    flagged = ctrla.flag_words(segment, 0, char_spans(segment), [True] * len(segment), QUESTION, [])
    assert [segment[a:b] for a, b in flagged] == ["politician", "1950."]


# The official column: HSLiu-Initial/CtrlA's own cleaning (code/model/utils.py split_contractions and
# remove_punctuation, as adaptive_retrieval.py:279-286 apply them), run outside the project on each word.
@pytest.mark.parametrize("word, official", [
    ("'relevant'", "re"), ("'dark'", "d"), ("'tis", "t"),   # a mark splits anywhere, no word boundary
    ("Feilden's", "feilden"), ("don't", "do"), ("isn't,", "is"),
    ("DON'T", "dont"), ("O'Reilly", "oreilly"),              # case-sensitive marks; the apostrophe goes
    ("it\u2019s", "it\u2019s"),                              # a curly apostrophe is no mark, no ASCII punctuation
    ("\u201cPolitician\u201d", "\u201cpolitician\u201d"), ("--", ""), ("\u2014", "\u2014")])
def test_clean_word_is_the_officials(word, official):
    assert ctrla.clean_word(word) == official


def test_word_set_is_the_officials_process_sentence():
    """Every part of every word, the contraction marks' own parts ("s", "nt", "re") included; the official
    process_sentence on the same text gives the list below (its set)."""
    text = "What is Henry Feilden's occupation? I don't 'relevant' it\u2019s"
    official = ["what", "is", "henry", "feilden", "s", "occupation", "i", "do", "nt", "re", "levant", "it\u2019s"]
    assert ctrla.word_set(text) == set(official)


def test_new_information_reads_words_as_official():
    """'relevant' cleans to "re", a spaCy stop word, so it never triggers (official too); "It’s" stays a
    word, new information (official too); a mark's part of a question word ("s" of "Feilden's") is a
    question word."""
    assert "re" in ctrla.stop_words() and "s" not in ctrla.stop_words()
    assert not ctrla.is_new_information("'relevant'", QUESTION, [])
    assert ctrla.is_new_information("relevant", QUESTION, [])
    assert ctrla.is_new_information("it\u2019s", QUESTION, []) and not ctrla.is_new_information("it's", QUESTION, [])
    assert not ctrla.is_new_information("'salty'", QUESTION, [])           # "s", a part of "Feilden's"
    assert ctrla.is_new_information("'salty'", "Where is Paris?", [])
    segment = "It\u2019s a 'relevant' politician."
    flagged = ctrla.flag_words(segment, 0, char_spans(segment), [True] * len(segment), QUESTION, [])
    assert [segment[a:b] for a, b in flagged] == ["It\u2019s", "politician."]


def test_refusal_detector_reads_the_text_as_written():
    """No curly apostrophe is made straight (official sentence_matches_pattern on these: False, True, False,
    False; the last is one of our phrases, in ASCII like the official ones)."""
    assert not ctrla.is_refusal("I don\u2019t have information about him.")
    assert ctrla.is_refusal("I don't have information about him.")
    assert not ctrla.is_refusal("I\u2019m not sure who he is.")
    assert ctrla.is_refusal("I'm not sure who he is.")



def test_refusal_phrases_are_the_officials_then_ours():
    """data/ctrla_refusals.txt: the official sentence_matches_pattern's 93 phrases in their order, then our
    three after a line marking them; the detector is any phrase, escaped, on word boundaries, in any case."""
    lines = ctrla.REFUSAL_FILE.read_text(encoding="utf-8").splitlines()
    assert "code/model/utils.py:150-188 (sentence_matches_pattern)" in " ".join(lines[:3])
    phrases = common.word_list(ctrla.REFUSAL_FILE)
    assert len(phrases) == 96 and phrases[:3] == ("not specified", "not mentioned", "don't have information")
    assert lines[-4].startswith("# ours") and phrases[-3:] == ("i don't know", "i'm not sure", "i am not sure")
    pattern = ctrla.refusal_pattern()
    assert pattern.pattern == r"\b(" + "|".join(re.escape(p) for p in phrases) + r")\b" and pattern.flags & re.IGNORECASE
    assert all(ctrla.is_refusal(f"Well: {p.upper()}.") for p in phrases)
    assert not ctrla.is_refusal("The unknowns of the unclearly marked road.")


def test_query_exemplars_are_the_papers_then_ours_and_a_bad_file_is_one_error(tmp_path, monkeypatch):
    """TVQ's and REWRITE's exemplars (data/ctrla_query_exemplars.json): five each, the paper's two first, each
    a user turn of the prompt's labelled fields and the search query as the reply, in order; a missing or
    malformed file is one error naming it."""
    shots = ctrla.query_exemplars()
    assert [len(shots["tvq"]), len(shots["rewrite"])] == [5, 5]
    assert shots["tvq"][0] == ["What is Franz Seitz Sr.'s occupation?",        # Prompt B.1's first
                               "Franz Seitz Sr.'s occupation is not specified in the given content.",
                               "What was Franz Seitz Sr.'s profession?"]
    assert shots["rewrite"][1][1:] == ["What genre does the film Xanadu belong to?",       # Prompt B.2's second
                                       'What is the significance or meaning of "Xanadu" in the film\'s title?']
    seen = []
    monkeypatch.setattr(common, "greedy", lambda m, t, prompt, **k: seen.append(prompt) or common.Generation(
        "Query: Where did the Pilgrims sail from?\nmore", [], [], "stop"))
    run = ctrla.Run(None, make_tokenizer(), {}, None, ctrla.Settings())
    assert ctrla.write_query(run, ctrla.REWRITE, "Q?", "R.") == "Where did the Pilgrims sail from?"
    history = [m for q, ref, query in shots["rewrite"] for m in (
        {"role": "user", "content": f"Original question: {q}\nReference query: {ref}"},
        {"role": "assistant", "content": query})]
    assert seen == [common.chat_prompt(run.tok, "Original question: Q?\nReference query: R.", ctrla.REWRITE[0], history)]
    bad = tmp_path / "exemplars.json"
    monkeypatch.setattr(ctrla, "QUERY_FILE", bad)
    for text in (None, "{", '{"tvq": []}', '{"tvq": [["q", "a"]], "rewrite": []}', '{"tvq": [], "rewrite": ["qaq"]}'):
        if text is not None:
            bad.write_text(text)
        ctrla.query_exemplars.cache_clear()
        with pytest.raises(common.InputError, match="exemplars.json: no TVQ / rewrite exemplars .*; restore data/"):
            ctrla.query_exemplars()
    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(common.InputError, match="exemplars.json: no TVQ / rewrite exemplars"):     # read before it
        ctrla.main(["--output", str(tmp_path / "out.jsonl")])
    ctrla.query_exemplars.cache_clear()

class RankedHits:
    """A retriever stand-in: each query's hits in a fixed order."""
    def __init__(self, hits):
        self.hits = hits

    def search(self, query, k):
        return [{"id": t, "title": t, "text": t} for t in self.hits[query][:k]]


def test_multihop_takes_the_top_three_in_total():
    run = ctrla.Run(None, None, {}, RankedHits({"q": "ABCDE", "tvq": "BFGHI"}), ctrla.Settings())
    assert [d["id"] for d in ctrla.search(run, ["q", "tvq"], "hotpotqa")] == ["A", "B", "F"]
    assert [d["id"] for d in ctrla.search(run, ["q"], "2wikimultihopqa")] == ["A", "B", "C"]
    assert [d["id"] for d in ctrla.search(run, ["q", "tvq"], "short")] == list("ABCDFGH")   # 4 + 4, deduplicated
    assert [d["id"] for d in ctrla.search(run, ["q"], "short")] == list("ABCDE")


def test_monitor_crop_is_right_on_any_version(tiny, monkeypatch, fed_tokens):
    """transformers 4.x reads crop(n) as "keep n tokens" (n < 0: drop -n); a cache that must keep every
    token must not be cropped to 0."""
    from transformers import DynamicCache

    def crop_4x(self, max_length):
        if max_length < 0:
            max_length = self.get_seq_length() - abs(max_length)
        for layer in self.layers:
            layer.keys, layer.values = layer.keys[..., :max_length, :], layer.values[..., :max_length, :]
    model, tok = tiny
    head = "User: where is the tower?\n\nAssistant: It is in Paris."
    steps = [(head, 30, []), (head + " It is tall.", len(head) + 1, ["It is in Paris."]),
             (head + " It is old.", len(head) + 1, ["It is in Paris."])]   # keep = all, then keep < all
    fresh = []
    for text, start, prev in steps:
        run = ctrla.Run(model, tok, {"confidence": random_features(4, 32)}, None, ctrla.Settings(monitor=(-1, -2, -3)))
        fresh.append(ctrla.monitor(run, text, start, "where is the tower?", prev)["scores"])
    crops = []
    monkeypatch.setattr(DynamicCache, "crop", lambda self, n: crops.append(n) or crop_4x(self, n))
    run = ctrla.Run(model, tok, {"confidence": random_features(4, 32)}, None, ctrla.Settings(monitor=(-1, -2, -3)))
    with fed_tokens(model) as fed:
        for (text, start, prev), want in zip(steps, fresh):
            got = ctrla.monitor(run, text, start, "where is the tower?", prev)["scores"]
            assert got == pytest.approx(want, abs=1e-3)
    # BOS and one token per character, "\n\n" one: all of head (len(head) tokens); then " It is tall." (12)
    # after the whole cache, uncropped; then " It is old." shares " It is " with the cache: "tall." (5
    # tokens) cropped, "old." (4) fed
    assert fed == [len(head), 12, 4] and crops == [-5]


def test_the_feature_check_is_analysis_s():
    """The method file keeps the method: the feature check (paper 5.2), its scores (a model run on
    ctrla.prepare's model and features) and their report, is analysis.py's."""
    assert not hasattr(ctrla, "check_features") and not hasattr(ctrla, "layer_ranges") and not hasattr(ctrla, "auc")
    assert all(callable(f) for f in (analysis.check_features, analysis.layer_ranges, analysis.auc,
                                     analysis.features_report, ctrla.prepare))


def test_caq_query_masks_flagged_words():
    flagged = [(19, 30)]
    assert ctrla.caq_query(QUESTION, SEGMENT, flagged) == QUESTION + " Henry Feilden is a"
    assert ctrla.caq_query(QUESTION, SEGMENT, []) == QUESTION + " " + SEGMENT


def test_first_sentence_and_answer():
    assert ctrla.first_sentence("John F. Kennedy was born in 1917. He was") == \
        ("John F. Kennedy was born in 1917.", True)
    assert ctrla.first_sentence("Dr. Smith is here! Then") == ("Dr. Smith is here!", True)
    assert ctrla.first_sentence("\n. Paris is nice") == ("Paris is nice", False)
    assert ctrla.first_sentence("...") == ("", False)
    assert ctrla.first_sentence("3. The Moon is far. Yes") == ("3. The Moon is far.", True)
    # a sentence that ends its line keeps the line break the model wrote (the spaces after it go)
    assert ctrla.first_sentence("I'll go step by step:\n1. Find it.") == ("I'll go step by step:\n", True)
    assert ctrla.first_sentence("It is Paris.\n\n  Next") == ("It is Paris.\n\n", True)
    assert ctrla.first_sentence("It is Paris. \nNext") == ("It is Paris. \n", True)  # up to the last line break
    assert ctrla.first_sentence("It is Paris.  Next") == ("It is Paris.", True)      # no line break: joined by " "
    # and the next sentence follows it with no space: the text as the model wrote it
    assert ctrla.joined(["Steps:\n", "1. Find it.", "2. Say it.\n", "Done."]) == "Steps:\n1. Find it. 2. Say it.\nDone."
    assert ctrla.joined([]) == ""
    assert metrics.dragin_answer("They are both producers. So the answer is producer.") == "producer"
    # to the end of its line (the stated divergence from DRAGIN, which reads on), on the same line whole
    assert metrics.dragin_answer("So the answer is: WINNER.\nStep 4: check it.") == "WINNER"
    assert metrics.dragin_answer("So the answer is WINNER. Step 4: The answer") == "WINNER. Step 4: The answer"
    assert metrics.dragin_answer("No answer named here.\n") == "No answer named here."
    # "The answer is" alone is read (a stated divergence); before a lower-case one, DRAGIN's own is read
    assert metrics.dragin_answer("The answer is no.") == "no"
    assert metrics.dragin_answer("The answer is not obvious. Thus, the answer is Paris.") == "Paris"
    assert ctrla.clean_query(' Search query: "Who built it?"\nmore') == "Who built it?"


# ---------------------------------------------------------------- the loop, end to end

@pytest.fixture(scope="module")
def tiny_run():
    tok = make_tokenizer()
    model = make_model(len(tok), seed=3, layers=6)
    feats = {kind: ctrla.features(model, tok, kind, n_pairs=24, rows=STATEMENTS)
             for kind in ctrla.PERSONAS}
    assert feats["honesty"]["direction"].shape == (6, 32) and feats["honesty"]["statements_used"] == 1
    return model, tok, feats


@pytest.mark.parametrize("query", ["caq", "tvq"])
def test_loop_end_to_end(tiny_run, query):
    model, tok, feats = tiny_run
    s = ctrla.Settings(tau=1e9, steer=(-2, -3), monitor=(-2, -3, -4), query=query, answer_tokens=40)
    run = ctrla.Run(model, tok, feats, common.BM25(PASSAGES), s)
    before = hooks(model)
    rec = {"id": "q1", "question": "Where is the Eiffel Tower?", "answers": ["Paris"], "dataset": "popqa"}
    res = ctrla.solve(run, rec)
    assert set(res) == {"prediction", "retrievals", "model_calls", "trace"}
    first = res["trace"]["segments"][0]
    assert first["trigger"] == "confidence" and res["retrievals"] >= 1       # tau huge: all unconfident
    assert len(first["tokens"]) == len(first["scores"]) > 0 and first["unconfident_words"]
    rnd = first["rounds"][0]
    assert rnd["queries"][0].startswith("Where is the Eiffel Tower?") and "passages" in rnd
    assert res["model_calls"] >= 3 + (query == "tvq")   # segment, monitoring, (TVQ,) regeneration
    assert hooks(model) == before
    calm = ctrla.solve(ctrla.Run(model, tok, feats, common.BM25(PASSAGES), replace(s, tau=-1e9)), rec)
    assert calm["retrievals"] == 0 and calm["trace"]["segments"][0]["trigger"] is None
    # the always-retrieve baseline: every segment retrieves, however confident, and keeps its scores
    always = ctrla.solve(ctrla.Run(model, tok, feats, common.BM25(PASSAGES), replace(s, tau=-1e9, retrieve="always")), rec)
    segs = always["trace"]["segments"]
    assert [g["trigger"] for g in segs] == ["always"] * len(segs) and always["retrievals"] >= len(segs)
    assert not segs[0]["unconfident_words"] and len(segs[0]["scores"]) == len(segs[0]["tokens"])


def test_run_name_keeps_settings_apart():
    p = argparse.ArgumentParser()
    p.add_argument("--tau", type=float)
    p.add_argument("--honesty-data")
    p.add_argument("--confidence-data")
    name = lambda argv, **kw: ctrla.run_name(p.parse_args(argv), ctrla.Settings(**kw))
    assert name([]) == "ctrla" and name(["--tau", "-6.8"]) == "ctrla-tau-6.8"
    assert name([], retrieve="always") == "ctrla-always" and name([], lam=0.0) == "ctrla-lam0"
    assert name([], retrieve="never") == "ctrla-noret" and name([], query="caq") == "ctrla-caq"
    assert name([], honesty_prompt=True, lam=0.0, retrieve="never") == "ctrla-honp-noret"
    assert name([], retrieve="monitor-only") == "ctrla-monitor-only"
    assert name(["--honesty-data", "x/facts_true_false.csv", "--confidence-data", "confidence_train.csv"]) == \
        "ctrla-hon-facts_true_false-conf-confidence_train"


def test_never_retrieve_and_multihop_prompt(tiny_run):
    model, tok, feats = tiny_run
    s = ctrla.Settings(steer=(-2,), monitor=(-2,), retrieve="never", answer_tokens=30)
    rec = {"id": "q2", "question": "Who?", "answers": ["x"], "dataset": "triviaqa"}
    res = ctrla.solve(ctrla.Run(model, tok, feats, None, s), rec)
    assert res["retrievals"] == 0 and "scores" not in res["trace"]["segments"][0]
    prompt = ctrla.build_prompt(tok, "hotpotqa", "Q?", docs=PASSAGES[:1], gen=["A b."])
    assert "So the answer is" in prompt and "Contents:\n1. The Eiffel Tower is in" in prompt
    assert prompt.endswith("Question: Q?\n\nAssistant: A b.")


def test_monitor_only_answers_as_never_retrieve_and_records_the_triggers(tiny_run):
    model, tok, feats = tiny_run
    s = ctrla.Settings(tau=1e9, steer=(-2, -3), monitor=(-2, -3, -4), answer_tokens=40)  # tau huge: all flagged
    rec = {"id": "q1", "question": "Where is the Eiffel Tower?", "answers": ["Paris"], "dataset": "popqa"}
    never = ctrla.solve(ctrla.Run(model, tok, feats, None, replace(s, retrieve="never")), rec)
    seen = ctrla.solve(ctrla.Run(model, tok, feats, None, replace(s, retrieve="monitor-only")), rec)  # no retriever
    assert seen["prediction"] == never["prediction"] and seen["retrievals"] == 0
    assert [g["segment"] for g in seen["trace"]["segments"]] == [g["segment"] for g in never["trace"]["segments"]]
    first = seen["trace"]["segments"][0]
    assert first["trigger"] == "confidence" and first["unconfident_words"] and "rounds" not in first
    assert seen["model_calls"] == never["model_calls"] + len(seen["trace"]["segments"])   # one pass each


# ---------------------------------------------------------------- the embedded model

@pytest.mark.slow
def test_features_and_loop_on_smollm2():
    model, tok = common.load_model("smollm2-135m", "float32")   # the same on every CPU
    rows = common.read_statements(ctrla.HONESTY_FILE)[:6]
    feats = ctrla.features(model, tok, "honesty", n_pairs=32, rows=rows)
    assert feats["direction"].shape == (30, 576) and "center" not in feats
    assert torch.allclose(feats["direction"].norm(dim=-1), torch.ones(30), atol=1e-4)
    s = ctrla.Settings(tau=1e6, query="caq", answer_tokens=16)   # every token unconfident: retrieve
    run = ctrla.Run(model, tok, {"honesty": feats, "confidence": feats}, common.BM25(PASSAGES), s)
    res = ctrla.solve(run, {"id": "q", "question": "Where is the Eiffel Tower?", "answers": ["Paris"],
                            "dataset": "popqa"})
    first = res["trace"]["segments"][0]
    assert first["trigger"] == "confidence" and res["retrievals"] >= 1
    assert "Eiffel Tower" in [p["title"] for p in first["rounds"][0]["passages"]]


def test_last_token_states_match_one_by_one(tiny):
    model, tok = tiny
    prompts = ["User: Pretend you're honest.\n\nAssistant:" + x for x in ["W", "Water b", "Ice is"]] + \
              ["User: Pretend you're a liar.\n\nAssistant:Moon"]
    states = common.last_token_states(model, tok, prompts, batch=3)
    for j, p in enumerate(prompts):
        with torch.no_grad():
            ids = torch.tensor([common.encode(tok, p)])
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states
        assert torch.allclose(states[:, j], torch.stack([h[0, -1] for h in hs[1:]]), atol=1e-4)


def test_check_features_runs_and_spaces_its_statements(tiny, monkeypatch):
    """analysis.check_features (paper 5.2) runs on CtrlA's Run; its honesty statements follow the persona
    prompt as the contrast prompts do ("Assistant: " + statement)."""
    model, tok = tiny
    feats = {"honesty": random_features(4, 32), "confidence": random_features(4, 32, seed=1)}
    seen, real = [], common.last_token_states
    monkeypatch.setattr(common, "last_token_states", lambda m, t, prompts, *a, **kw: seen.extend(prompts) or real(m, t, prompts))
    run = ctrla.Run(model, tok, feats, None, ctrla.Settings(tau=0.0, lam=0.0, steer=(-1,), monitor=(-1, -2)))
    check = json.loads(json.dumps(analysis.check_features(run, limit=1)))   # what check-features writes
    report = analysis.features_report(check)
    assert set(report) == {"steer", "monitor", "top third", "middle third", "bottom third"}
    # a range's scores are the method's own, to the bit: token_scores over its layers
    h = feats["honesty"]
    states = real(model, tok, seen[:2])
    keys = report["monitor"]["keys"]
    want = ctrla.token_scores(states[[-1, -2]], h["direction"][[-1, -2]], h["sign"][[-1, -2]], h["mean"][[-1, -2]])
    assert keys == [-1, -2] and torch.equal(torch.tensor(check["honesty"])[[-1, -2]].mean(0), want)
    persona = common.chat_prompt(tok, ctrla.PERSONA.format("an honest"))
    assert len(seen) == 2 and all(p.startswith(persona + " ") and p[len(persona) + 1] != " " for p in seen)


@pytest.mark.parametrize("kind", ["sentencepiece", "bytelevel"])
def test_accepted_sentences_extend_the_prompt_by_their_own_tokens(kind, sp_tok, bpe_tok):
    """The next segment's prompt (build_prompt, append) is the previous prompt's tokens + the accepted
    sentence's tokens as the model writes them: "[/INST]" then "▁The" (Mistral), "assistant\\n" then
    "The" (ChatML, byte-level BPE); each later sentence after one space ("▁So", "ĠSo")."""
    tok = copy.deepcopy(sp_tok if kind == "sentencepiece" else bpe_tok)
    tok.chat_template = MISTRAL_TEMPLATE if kind == "sentencepiece" else CHATML_TEMPLATE
    second = "So the answer is Edward L. Cahn."
    a, b, c = (common.encode(tok, ctrla.build_prompt(tok, "short", "Who directed it?", gen=gen))
               for gen in ([], [FILM], [FILM, second]))
    assert b[:len(a)] == a and c[:len(b)] == b
    assert tok.convert_ids_to_tokens(b[len(a):]) == tok.tokenize(FILM)
    space = "" if kind == "sentencepiece" else " "     # SentencePiece marks a word start itself
    assert tok.convert_ids_to_tokens(c[len(b):]) == tok.tokenize(space + second)
    # a sentence that ended its line keeps the line break, and the next follows it with no space
    assert ctrla.build_prompt(tok, "short", "Who directed it?", gen=["Steps:\n", FILM]).endswith("Steps:\n" + FILM)


def test_docstring_states_the_divergences():
    """The page docs/ctrla.md names what this file does differently (its divergence tables), and where the
    official code, which this file follows, differs from the paper; the module docstring points at it."""
    page = (Path(__file__).parents[1] / "docs" / "ctrla.md").read_text()
    follows, differs = page.split("### Where the official code differs from the paper, and we follow the official code")[1] \
        .split("### Changes results")
    for phrase in ["Eq. 2", "centred on mu_l", "sign_l", "whole prompt + segment", "causal",
                   "not Alg. 2", "bare question", "retrieve_count", "search_rounds"]:
        assert phrase in " ".join(follows.split()), phrase
    for phrase in ["Prompts B.1 / B.2", "the 3rd saying"]:
        assert phrase in " ".join(differs.split()), phrase
    for phrase in ["BM25 everywhere", "open_retriever", "BGE", "Serper", "top 3 passages in total",
                   "data/ctrla_stop_words.txt", "official phrase list", "resumes from the token ids",
                   "none of the official eval_data/facts_true_false.csv",
                   "--honesty-data FILE --confidence-data FILE",
                   "cut from the token ids of persona + statement", "question kept as the first query",
                   "7th refusal ends the answer", "keeps the line break",
                   'after "the answer is" in any case, up to a line break',
                   "1 of 50 CtrlA, 2 of 50 never-retrieve HotpotQA questions",
                   "ends at an EOS after a segment with no sentence end", "stops only on an empty continuation",
                   "\"'relevant'\" is \"re\""]:
        assert phrase in " ".join(differs.split()), phrase
    assert "docs/ctrla.md" in ctrla.__doc__ and "Differs from the official code" in ctrla.__doc__


def test_monitor_maps_tokens_to_words_on_both_kinds(tiny_real):
    """Every token unconfident: the words flagged are the segment's new information, whatever the
    tokenizer ("▁Cahn" or "ĠCahn", byte tokens for "Île"); the scored tokens cover the segment."""
    model, tok = tiny_real
    run = ctrla.Run(model, tok, {"confidence": random_features(4, 32)}, None,
                    ctrla.Settings(tau=1e9, monitor=(-1, -2)))
    question = "Who directed the film Laughter In Hell?"
    prompt = ctrla.build_prompt(tok, "short", question)
    for segment, want in [(FILM, ["Edward", "L.", "Cahn."]), ("It was shot in Île-de-France.", ["shot", "Île-de-France."])]:
        text = ctrla.append(prompt, segment)
        m = ctrla.monitor(run, text, len(text) - len(segment), question, [])
        assert [segment[a:b] for a, b in m["flagged"]] == want
        # byte tokens of one character share its span: count each span once
        assert "".join(t for t, _ in itertools.groupby(m["tokens"])).strip() == segment


# ---------------------------------------------------------------- the official statement files

OFFICIAL_FACTS = '''statement,label
The Earth orbits the Sun once a year.,1
The largest flower in the world is the daisy.,0
"Water, when frozen, becomes ice.",1
Cells are the complex units of life.,0
Sound travels faster in water than in air.,1.0
'''
OFFICIAL_CONFIDENCE = '''statement,label
Property law pertains to ownership rights in personal property.,1
"On a menu, the side section might have dishes that aren't mains, I suppose?",1
'''


def test_official_statement_files_give_the_features(tmp_path, tiny, monkeypatch):
    """--honesty-data / --confidence-data read the official CSVs (statement,label; the notebooks keep
    label == 1): the features come from exactly those statements, the confidence ones carry a tau
    calibrated on our styled statements (the official file has no style column), and the cache key
    follows the files."""
    model, tok = tiny
    facts, conf = tmp_path / "facts_true_false.csv", tmp_path / "confidence_train.csv"
    facts.write_text(OFFICIAL_FACTS)
    conf.write_text(OFFICIAL_CONFIDENCE)
    assert [r["statement"] for r in common.read_statements(facts)] == [
        "The Earth orbits the Sun once a year.", "Water, when frozen, becomes ice.",
        "Sound travels faster in water than in air."]      # label 1 and 1.0; never the 0 rows
    true = ["The Earth orbits the Sun once a year.", "Water, when frozen, becomes ice."]
    # "The Earth orbits the Sun once a year." is 37 characters: 31 prefixes, then the second statement
    want, _, used = ctrla.contrast_pairs(tok, true, ctrla.PERSONAS["honesty"], n_pairs=40)
    assert used == 2 and len(want) == 80
    seen, real = [], common.last_token_states
    monkeypatch.setattr(common, "last_token_states",
                        lambda m, t, prompts, *a, **kw: seen.append(prompts) or real(m, t, prompts))
    feats = ctrla.features(model, tok, "honesty", n_pairs=40, file=facts)
    assert seen == [want] and feats["statements_used"] == 2 and "center" not in feats
    # tau's calibration (style_center: ours, not the paper's or the official code's; the midpoint scored as
    # the official code scores a token, token_scores): the states of each held-out statement stubbed, so the
    # center is known by hand. Per layer l, every answer token of a confident statement sits at mu_l + a_l * d_l,
    # of an unconfident one at mu_l + b_l * d_l (mu, d: the features just read, d of unit norm), and the
    # prompt token before the answer far off at mu_l + 100 * d_l (never read). The center is
    # sign_l * ((C_l + U_l) / 2 - mu_l) . d_l = sign_l * (a_l + b_l) / 2.
    ours = {r["statement"]: r["style"] for r in common.read_statements(ctrla.CONFIDENCE_FILE) + STATEMENTS}
    a, b = torch.tensor([12.0, 4.0, 5.0, 6.0]), torch.tensor([8.0, 0.0, 1.0, -6.0])
    asked, read = [], []

    def text_states(m, t, text):
        answer = next(s for s in ours if text.endswith(" " + s) or text.endswith("\n" + s))
        asked.append((text[:-len(answer)], ours[answer]))
        at = a if ours[answer] == "confident" else b
        mu, d = read[-1]["mean"], read[-1]["direction"]
        hs = torch.stack([mu + 100 * d, mu + at[:, None] * d, mu + at[:, None] * d], dim=1)   # [L, 3, d]
        s = len(text) - len(answer)
        return hs, [(0, s), (s, s + 4), (s + 4, len(text))]       # tokens 1 and 2 are the answer's

    real_read = ctrla.read_features
    monkeypatch.setattr(ctrla, "read_features", lambda *x: read.append(real_read(*x)) or read[-1])
    monkeypatch.setattr(common, "text_states", text_states)
    c = ctrla.features(model, tok, "confidence", n_pairs=8, file=conf)
    # the official file has no style column: the first 20 confident and 20 unconfident of ours
    assert sorted(style for _, style in asked) == ["confident"] * 20 + ["unconfident"] * 20
    assert torch.allclose(c["center"], c["sign"] * torch.tensor([10.0, 2.0, 3.0, 0.0]), atol=1e-4)
    # tau = None (every model but Mistral-7B): tau is the center's mean over the monitor layers; keys -2, -3
    # are layers 2 and 1: tau = (3 sign_2 + 2 sign_1) / 2 (the mean over all 4 layers would differ)
    tau = float(3 * c["sign"][2] + 2 * c["sign"][1]) / 2
    keys = (-2, -3)
    assert ctrla.threshold(ctrla.Settings(tau=None, monitor=keys), {"confidence": c}, keys) == pytest.approx(tau)
    # ... and monitor judges with it: its scores are those of tau = 0 less tau
    text = ctrla.append(ctrla.build_prompt(tok, "short", "Who?"), "It is Paris.")
    scores = [ctrla.monitor(ctrla.Run(model, tok, {"confidence": c}, None, ctrla.Settings(tau=t, monitor=keys)),
                            text, len(text) - 12, "Who?", [])["scores"] for t in (None, 0.0)]
    assert scores[0] == pytest.approx([x - tau for x in scores[1]], abs=2e-3)
    # held-out statements of one style only: no calibration (main then asks for --tau), never tau = 0
    one_style = [STATEMENTS[0], STATEMENTS[2]]
    assert ctrla.features(model, tok, "confidence", n_pairs=8, rows=one_style)["center"] is None
    # the cache: one file per pair of statement files
    monkeypatch.setattr(common, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(ctrla, "features", lambda m, t, kind, n, rows: {"rows": [r["statement"] for r in rows]})
    official = ctrla.load_features(model, tok, "tiny", 8, None, facts, conf)
    assert official["honesty"]["rows"] == [r["statement"] for r in common.read_statements(facts)]
    assert official["confidence"]["rows"] == [r["statement"] for r in common.read_statements(conf)]
    ctrla.load_features(model, tok, "tiny", 8)
    assert len(list((tmp_path / "ctrla").glob("tiny-8-*.pt"))) == 2
    # ... and one per precision: features read in bfloat16 are never served to float32, nor the reverse
    half = copy.deepcopy(model).to(torch.bfloat16)
    assert ctrla.load_features(half, tok, "tiny", 8)["honesty"]["dtype"] == "bfloat16"
    assert len(list((tmp_path / "ctrla").glob("tiny-8-*.pt"))) == 3
    ctrla.load_features(model, tok, "tiny", 8, tmp_path / "made.pt")           # written in float32 ...
    with pytest.raises(common.InputError, match="read in float32 and this run is bfloat16; .* pass --dtype float32 or another file"):
        ctrla.load_features(half, tok, "tiny", 8, tmp_path / "made.pt")        # ... refused in bfloat16
    old = {kind: {k: v for k, v in f.items() if k != "dtype"} for kind, f in torch.load(tmp_path / "made.pt").items()}
    torch.save(old, tmp_path / "old.pt")                                        # a file from before the record
    assert ctrla.load_features(half, tok, "tiny", 8, tmp_path / "old.pt") == old


def test_bad_statement_file_is_one_error_before_the_model(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    for text, says in [(None, "cannot read statements"), ("text,label\nA b c d e f g h.,1\n", "statement,label"),
                       ("statement,label\nA b c d e f g h.,0\n", "no statement with label 1")]:
        path = tmp_path / "facts.csv"
        if text is not None:
            path.write_text(text)
        with pytest.raises(common.InputError, match=f"facts.csv: .*{says}"):
            ctrla.main(["--honesty-data", str(path), "--output", str(tmp_path / "out.jsonl")])


# ---------------------------------------------------------------- refusal handling, on a scripted model

class Echo:
    """A retriever that returns one passage naming its query, and records every query."""
    def __init__(self):
        self.queries = []

    def search(self, query, k):
        self.queries.append(query)
        return [{"id": query, "title": query, "text": f"Passage for {query}."}]


def scripted(monkeypatch, segments, unsure=(), rewrite=lambda q: "rw: " + q, query="tvq"):
    """A Run whose model is a script: next_segment returns `segments` in turn (recording each prompt),
    monitor flags the last word of the segments in `unsure` and records the segments it sees, TVQ
    writes "tvq: <segment>" and the rewrite `rewrite(reference query)`. Returns (run, log)."""
    log = {"prompts": [], "monitored": [], "rewritten": []}
    todo = list(segments)

    def next_segment(run, prompt):
        log["prompts"].append(prompt)
        return (todo.pop(0) if todo else ""), False

    def monitor(run, text, start, question, previous):
        seg = text[start:]
        log["monitored"].append(seg)
        return {"tokens": [], "scores": [], "flagged": [(seg.rfind(" ") + 1, len(seg))] if seg in unsure else []}

    def write_query(run, prompt, question, field):
        if prompt is ctrla.TVQ:
            return "tvq: " + field
        log["rewritten"].append(field)
        return rewrite(field)
    for name, f in [("next_segment", next_segment), ("monitor", monitor), ("write_query", write_query)]:
        monkeypatch.setattr(ctrla, name, f)
    run = ctrla.Run(None, make_tokenizer(), {}, Echo(), ctrla.Settings(query=query, answer_tokens=1000))
    return run, log


def test_a_refused_regeneration_is_dropped_rewritten_from_its_trigger_and_the_next_segment_monitored(monkeypatch):
    """Official adaptive_retrieve: the refused regeneration is dropped; the trigger's [question, TVQ] is
    rewritten (never an earlier rewrite) and searched; the next segment reads those passages and is
    monitored like any other (here it refuses: a new trigger). `retrievals` counts the triggers."""
    q = "What is Henry Feilden's occupation?"
    segments = ["Henry Feilden is a politician.",            # monitored: unconfident -> trigger 1
                "His occupation is not specified.",           # regenerated: refusal 1 -> rewrite
                "The text does not mention it.",              # monitored: a refusal -> trigger 2
                "I do not know.",                             # regenerated: refusal 2 -> rewrite
                "He was a British Conservative politician."]  # monitored: confident -> accepted
    run, log = scripted(monkeypatch, segments, unsure={segments[0]})
    res = ctrla.solve(run, {"id": "q", "question": q, "answers": ["politician"], "dataset": "triviaqa"})
    assert res["prediction"] == "He was a British Conservative politician."
    assert log["monitored"] == [segments[0], segments[2], segments[4]]   # regenerations are not monitored
    tvq1, tvq2 = "tvq: " + segments[0], "tvq: " + segments[2]
    assert log["rewritten"] == [tvq1, tvq2]                              # each from its trigger's TVQ
    assert run.bm25.queries == [q, tvq1, q, "rw: " + tvq1, q, tvq2, q, "rw: " + tvq2]
    # the segments after a rewrite read its passages, never a prompt without passages
    assert "Passage for rw: " + tvq1 in log["prompts"][2] and "Passage for rw: " + tvq2 in log["prompts"][4]
    assert res["retrievals"] == 2 and res["trace"]["search_rounds"] == 4 and res["trace"]["refusals"] == 2
    first, second, third = res["trace"]["segments"]
    assert first["trigger"] == "confidence" and first["refusal"] == 1 and "accepted" not in first
    assert [r["queries"] for r in first["rounds"]] == [[q, tvq1], [q, "rw: " + tvq1]]
    assert first["rounds"][0]["segment"] == segments[1]
    assert second["trigger"] == "refusal" and second["refusal"] == 2 and third["trigger"] is None


def test_the_sixth_refusal_searches_the_bare_question_and_the_seventh_ends_the_answer(monkeypatch):
    """Every segment refuses: 7 triggers, 7 refused regenerations counted one by one; rewrites after
    refusals 1-5, the bare question after the 6th, and the 7th ends the answer [official rt - rc]."""
    q = "Who wrote it?"
    segments = [f"I do not know part {i}{'b' if regen else ''}." for i in range(1, 9) for regen in (0, 1)]
    run, log = scripted(monkeypatch, segments)
    res = ctrla.solve(run, {"id": "q", "question": q, "answers": ["x"], "dataset": "triviaqa"})
    assert res["prediction"] == "" and len(log["prompts"]) == 14     # 7 segments and 7 regenerations
    tvq = [f"tvq: I do not know part {i}." for i in range(1, 8)]
    want = []
    for i in range(7):
        want += [q, tvq[i]] + ([q, "rw: " + tvq[i]] if i < 5 else [q] if i == 5 else [])
    assert run.bm25.queries == want
    assert log["rewritten"] == tvq[:5]
    assert res["retrievals"] == 7 and res["trace"]["refusals"] == 7 and res["trace"]["search_rounds"] == 13
    assert [g["refusal"] for g in res["trace"]["segments"]] == [1, 2, 3, 4, 5, 6, 7]


def test_a_rewrite_that_repeats_the_query_still_counts_its_refusal(monkeypatch):
    """CAQ: the rewrite of the one query [question + masked segment] gives the same query back; it is
    searched again and the refusal counted (no early stop that leaves it uncounted)."""
    q = "Where is the tower?"
    segments = ["It stands in Lyon.", "The city is unknown.", "It stands in Paris.", ""]
    run, log = scripted(monkeypatch, segments, unsure={segments[0]}, rewrite=lambda x: x, query="caq")
    res = ctrla.solve(run, {"id": "q", "question": q, "answers": ["Paris"], "dataset": "triviaqa"})
    caq = q + " It stands in"          # "Lyon." flagged and masked (Eq. 3)
    assert run.bm25.queries == [caq, caq] and log["rewritten"] == [caq]
    assert res["prediction"] == "It stands in Paris." and res["trace"]["refusals"] == 1
    assert res["retrievals"] == 1 and res["trace"]["search_rounds"] == 2


# ---------------------------------------------------------------- multi-hop: DRAGIN's forced answer

def fake_greedy(calls, text):
    """common.greedy as a script: records (prompt, max_new_tokens, forward hooks on the model) and
    answers `text`."""
    def greedy(model, tok, prompt, max_new_tokens=64, stop=(), hidden_module=None):
        calls.append((prompt, max_new_tokens, hooks(model) if model is not None else None))
        return common.Generation(text=text, token_ids=[], logprobs=[], finish="length")
    return greedy


def test_a_multihop_chain_that_names_no_answer_gets_draggins_forced_one(monkeypatch):
    """DRAGIN's eval.py regenerate_answer, the evaluation the paper's multi-hop results follow: the chain
    cut at "Note:" (not at its first character), " So the answer is" after it, 20 greedy tokens of a
    prompt with the exemplars and the question but no passages; the answer read after it, cut again at
    "Question:"; one more model call."""
    q = "Were Scott Derrickson and Ed Wood of the same nationality?"
    segments = ["Scott Derrickson is American.", "Ed Wood is American.\n", "Note: both directed films."]
    run, log = scripted(monkeypatch, segments)
    calls = []
    monkeypatch.setattr(ctrla.common, "greedy", fake_greedy(calls, " yes. Question: Who else?"))
    res = ctrla.solve(run, {"id": "q", "question": q, "answers": ["yes"], "dataset": "hotpotqa"})
    assert res["trace"]["answer"] == "Scott Derrickson is American. Ed Wood is American.\nNote: both directed films."
    assert res["trace"]["forced"] == " yes. Question: Who else?"
    assert res["prediction"] == "yes" and res["model_calls"] == 1          # the scripted segments count none
    [(prompt, max_new, _)] = calls
    assert max_new == 20 and prompt.endswith("Question: " + q + "\n\nAssistant: Scott Derrickson is American. "
                                             "Ed Wood is American. So the answer is")
    assert "Contents:" not in prompt and prompt.count("So the answer is") == 1 + ctrla.N_SHOT
    # a chain that names its answer is read as it is, with no call
    calls.clear()
    run, _ = scripted(monkeypatch, ["Both are American.", "So the answer is yes.", "More."])
    res = ctrla.solve(run, {"id": "q", "question": q, "answers": ["yes"], "dataset": "hotpotqa"})
    assert res["prediction"] == "yes" and res["trace"]["forced"] is None and not calls
    # "the answer is:" and a line break names no answer yet: the loop goes on to the line that holds it
    # (it stopped there, and the prediction was "")
    run, _ = scripted(monkeypatch, ["Both are American.", "Therefore, the answer is:\n\n", "**Yes**\n", "More."])
    res = ctrla.solve(run, {"id": "q", "question": q, "answers": ["yes"], "dataset": "hotpotqa"})
    assert res["trace"]["answer"].endswith("the answer is:\n\n**Yes**\n") and res["prediction"] == "**Yes**"
    assert res["trace"]["forced"] is None and not calls and metrics.exact_match(res["prediction"], ["yes"])
    # other tasks keep their text and have no forced answer
    run, _ = scripted(monkeypatch, ["Henry is a politician."])
    res = ctrla.solve(run, {"id": "q", "question": "Who?", "answers": ["x"], "dataset": "triviaqa"})
    assert "forced" not in res["trace"] and res["prediction"] == "Henry is a politician." and not calls


def test_the_forced_answer_is_the_plain_models(tiny_run, monkeypatch):
    """DRAGIN's evaluation loads the plain model: the forced call runs with no steering hook."""
    model, tok, feats = tiny_run
    calls, greedy = [], common.greedy

    def spy(m, t, prompt, max_new_tokens=64, stop=(), hidden_module=None):
        calls.append((max_new_tokens, hooks(m)))
        return greedy(m, t, prompt, max_new_tokens=max_new_tokens, stop=stop, hidden_module=hidden_module)
    monkeypatch.setattr(ctrla.common, "greedy", spy)
    before = hooks(model)
    s = ctrla.Settings(steer=(-2,), monitor=(-2,), retrieve="never", answer_tokens=12)
    res = ctrla.solve(ctrla.Run(model, tok, feats, None, s), {"id": "q", "question": "Who?", "answers": ["x"],
                                                               "dataset": "hotpotqa"})
    assert res["trace"]["forced"] is not None         # a random model names no answer
    assert calls[-1][0] == ctrla.FORCED_TOKENS and calls[-1][1] == before
    assert all(h != before for _, h in calls[:-1])    # the segments were steered
    assert res["prediction"] == metrics.dragin_answer(metrics.forced_reply(res["trace"]["answer"], res["trace"]["forced"]))


def test_cut_chain_and_forced_reply():
    assert metrics.cut_chain("A is B. Question: C?") == "A is B. "
    assert metrics.cut_chain("Question: at the start stays") == "Question: at the start stays"
    assert metrics.forced_reply("A is B.\n", " C. Note: x") == "A is B. So the answer is C. "
    assert metrics.forced_reply("", " C.") == "So the answer is C."
    assert metrics.multihop_prediction("A is B. So the answer is D.", None) == "D"
    assert metrics.multihop_prediction("A is B.", " C.\nMore") == "C"
    # a chain that names its answer is cut at FORCE_CUT first, as DRAGIN returns it
    assert metrics.multihop_prediction("So the answer is D. Note: E.", None) == "D"
    assert metrics.multihop_prediction("So the answer is D.Question: E?", None) == "D"
    # "The answer is" in any case names the answer (DRAGIN's lower-case test would force one)
    assert metrics.multihop_prediction("The answer is no.", None) == "no"


def mh_row(qid, answer, task="hotpotqa", **trace):
    return {"id": qid, "question": "Q?", "answers": ["C"], "prediction": answer.strip(), "retrievals": 0,
            "model_calls": 3, "seconds": 10.0, "trace": {"task": task, "answer": answer, **trace}}


def test_rows_read_with_their_forced_answers():
    rows = [mh_row("1", "A is B."), mh_row("2", "So the answer is E."), mh_row("3", "A is B.", task="short"),
            mh_row("4", "A is B.", forced=" F."), mh_row("5", "A is B.")]
    side = [{"id": i, "forced": " C.", "seconds": 1.5, "cpu": "x"} for i in "1234"]
    out, n = metrics.with_forced(rows, side)
    assert n == 1 and out[0]["prediction"] == "C" and out[0]["model_calls"] == 4 and out[0]["seconds"] == 11.5
    assert out[0]["trace"]["forced"] == " C." and "forced" not in rows[0]["trace"]   # the input rows unchanged
    assert out[1:] == rows[1:]          # an answer of its own, another task, forced already, no side row
    assert [metrics.needs_forcing(r) for r in out] == [False, False, False, False, True]


def test_the_sign_compares_the_positive_prompt_with_the_negative_whatever_the_pair_order():
    """read_features unshuffles each pair (first_pos) before the sign rule: every pair stored negative first
    (first_pos all False); diffs first - second = -2 a_i v (a_i = 1..8), so the direction is +-v and the sign
    must make d . (pos_i - neg_i) = sign * (d . v) * 2 a_i > 0 in all 8 pairs."""
    v = unit(torch.tensor([1.0, -2.0, 0.5, 3.0]))
    base = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    a = torch.arange(1.0, 9.0)[:, None]
    pos, neg = base + a * v, base - a * v
    states = torch.stack([neg, pos], dim=1).reshape(1, 16, 4)      # pair i: (neg_i, pos_i)
    feats = ctrla.read_features(states, torch.zeros(8, dtype=torch.bool))
    d = feats["sign"][0] * feats["direction"][0]
    assert (((pos - neg) @ d) > 0).all()


def test_a_segment_that_repeats_one_of_the_last_two_ends_the_answer(monkeypatch):
    """[official] the loop stops at a segment equal to one of the last two accepted (gen[-2:]): A, B, A ends
    after B; the third A is not appended."""
    segments = ["Alpha is a town.", "Beta is a city.", "Alpha is a town.", "Gamma is far."]
    run, log = scripted(monkeypatch, segments)
    res = ctrla.solve(run, {"id": "q", "question": "Where?", "answers": ["x"], "dataset": "triviaqa"})
    assert res["prediction"] == "Alpha is a town. Beta is a city." and len(log["prompts"]) == 3


def test_an_eos_after_a_segment_with_no_sentence_end_ends_the_answer(monkeypatch):
    """The stated divergence: next_segment says the model ended its turn after this segment (EOS, no
    sentence end), and the loop stops there; the official loop would ask once more and stop only on an
    empty continuation (here the script's "More." would be asked for and accepted)."""
    run, log = scripted(monkeypatch, [])
    todo = [("It is Paris.", True), ("More.", False)]

    def next_segment(run, prompt):
        log["prompts"].append(prompt)
        return todo.pop(0) if todo else ("", False)
    monkeypatch.setattr(ctrla, "next_segment", next_segment)
    res = ctrla.solve(run, {"id": "q", "question": "Where?", "answers": ["x"], "dataset": "triviaqa"})
    assert res["prediction"] == "It is Paris." and len(log["prompts"]) == 1


@pytest.mark.parametrize("text, ours, dragin", [
    ("The answer is no.", "no", ""),
    ("So the answer is: WINNER.\nStep 4: check it.", "WINNER", " WINNER.\nStep 4: check it"),
    ("So the answer is producer.", "producer", "producer")])
def test_multihop_reading_beside_dragins(text, ours, dragin):
    """The stated divergence: "the answer is" in any case, the answer cut at its line break. The dragin
    column is DRAGIN's HotpotQA reader (oneal2000/DRAGIN, src/data.py:416-430) run outside the project
    on the same text. Were `ours` the gold answer, DRAGIN's reading would score EM 0 where they differ."""
    assert metrics.dragin_answer(text) == ours
    assert bool(metrics.exact_match(dragin, [ours])) == (ours == dragin)


def test_a_word_is_flagged_when_any_of_its_characters_is_in_an_unconfident_token():
    """flag_words: a whitespace word that overlaps an unconfident token by even one character (here its first,
    token (0, 1) of "Paris") is flagged; the confident token (1, 5) alone flags nothing."""
    spans = [(0, 1), (1, 5), (5, 8), (8, 12)]           # "P", "aris", " is", " big"
    assert ctrla.flag_words("Paris is big", 0, spans, [True, False, False, False], "Where?", []) == [(0, 5)]
    assert ctrla.flag_words("Paris is big", 0, spans, [False, True, False, False], "Where?", []) == [(0, 5)]
    assert ctrla.flag_words("Paris is big", 0, spans, [False] * 4, "Where?", []) == []


def test_popqa_drops_the_passages_after_each_segment(monkeypatch):
    """[official --continue_gen_without_contents, PopQA runs only] after a triggered, regenerated segment the
    next segment's prompt holds no passages on PopQA; on TriviaQA it keeps them."""
    for dataset, kept in [("popqa", False), ("triviaqa", True)]:
        segments = ["Henry Feilden is a politician.", "He was a Conservative politician.", "He died in 1895."]
        run, log = scripted(monkeypatch, segments, unsure={segments[0]})
        ctrla.solve(run, {"id": "q", "question": "What is Henry Feilden's occupation?", "answers": ["x"],
                          "dataset": dataset})
        assert len(log["prompts"]) == 4 and "Passage for" in log["prompts"][1]   # the regeneration reads them
        assert ("Passage for" in log["prompts"][2]) == kept


# ---------------------------------------------------------------- the command line

class Parsed(Exception):
    """Raised where main() has parsed its flags, before any input is read or model loaded."""


def parsed(monkeypatch, argv: list[str]):
    """(args, Settings, run name) main() builds from argv, stopped before it checks its inputs."""
    seen = {}
    real = ctrla.run_name
    monkeypatch.setattr(ctrla, "run_name", lambda args, s: seen.update(s=s) or real(args, s))

    def stop(args, *a, **k):
        raise Parsed(args)
    monkeypatch.setattr(common, "check_inputs", stop)
    with pytest.raises(Parsed) as got:
        ctrla.main(argv)
    return got.value.args[0], seen["s"], real(got.value.args[0], seen["s"])


@pytest.mark.parametrize("mode", ["never", "always", "monitor-only"])
def test_retrieve_mode_is_one_value_and_the_old_flags_are_gone(monkeypatch, mode):
    """--retrieve MODE builds its Settings and is recorded as one "--retrieve" entry, not three booleans;
    adaptive is the default; the old flags (--never-retrieve, ...) are errors now."""
    args, s, name = parsed(monkeypatch, ["--retrieve", mode])
    assert s.retrieve == mode and name == {"never": "ctrla-noret", "always": "ctrla-always"}.get(mode, "ctrla-" + mode)
    flags = common.run_settings(args, ctrla.__file__)
    assert flags["--retrieve"] == mode and not {"--never-retrieve", "--always-retrieve", "--monitor-only"} & set(flags)
    assert parsed(monkeypatch, [])[1].retrieve == "adaptive"
    old = {"never": "--never-retrieve", "always": "--always-retrieve"}.get(mode, "--monitor-only")
    with pytest.raises(SystemExit):
        ctrla.main([old])


def test_help_lists_the_methods_flags_before_the_engineering_ones(capsys):
    with pytest.raises(SystemExit):
        ctrla.main(["--help"])
    out = capsys.readouterr().out.split("\n\n", 1)[1]          # after the usage line
    groups = [line for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert groups[-3:] == ["CtrlA:", "questions and passages:", "engineering:"]
    assert out.index("\nCtrlA:\n") < out.index("--tau") < out.index("--retrieve {") < out.index("\nengineering:\n")
    assert out.index("\nengineering:\n") < out.index("--model MODEL") < out.index("--dtype")


def test_check_features_writes_its_scores_and_analysis_reports_them(tiny, monkeypatch, tmp_path, capsys):
    """analysis.py check-features runs the model with ctrla.py's flags (its scores into a file, then a pointer);
    analysis.py features FILE reads the file without one and prints paper 5.2's table."""
    feats = {"honesty": random_features(4, 32), "confidence": random_features(4, 32, seed=1)}
    monkeypatch.setattr(common, "load_model", lambda *a, **k: tiny)
    monkeypatch.setattr(ctrla, "load_features", lambda *a, **k: feats)
    out = tmp_path / "check.json"
    analysis.main(["check-features", "--tau", "0", "--lam", "0", "--steer-layers", "1:2", "--monitor-layers", "1:3",
                   "--limit", "1", "--output", str(out), "--device", "cpu"])
    assert f"its report per layer range: python analysis.py features {out}" in capsys.readouterr().err
    check = json.loads(out.read_text())
    assert (check["n_layers"], check["steer"], check["monitor"], check["tau"]) == (4, [-1], [-1, -2], 0.0)
    analysis.main(["features", str(out)])
    printed = capsys.readouterr().out
    assert "1 held-out true and 1 false statements; 1 answerable (A_Y) and 1 unanswerable (A_N) questions" in printed
    assert printed.count("\n  A_") == 2 and "\nmonitor        -1..-2   |" in printed
