"""CtrlA: adaptive RAG steered by an honesty direction and triggered by a confidence direction of the model.

The method in five lines:
1. Features (3.2.1): per layer, the first principal component of contrast pairs' differences ("Pretend
   you're an honest / untruthful (confident / unconfident) person ..." + a statement prefix).
2. Honesty steering (3.2.2, Eq. 1): lambda * direction is added to the output of middle decoder layers.
3. Monitoring (3.2.3, Eq. 2): a token's projection on the confidence direction, averaged over layers; an
   unconfident token in a new word, or a refusal, triggers retrieval, and the segment is regenerated.
4. Query (3.2.4): the question + the segment, unconfident words masked (CAQ, Eq. 3), or a query the model
   writes (TVQ, Prompt B.1).
5. Refusals (B.3): a regeneration that refuses is dropped, its queries rewritten (Prompt B.2) and searched.

Paper: Huanshuo Liu et al., "CtrlA: Adaptive Retrieval-Augmented Generation via Inherent Control"
(arXiv 2405.18727; read here in its anonymous ICLR 2025 submission). Official code: HSLiu-Initial/CtrlA.

Follows the official code's values, and the official code where it differs from the paper (Eq. 2's score,
the refusal loop, the retrieval count). Differs from the official code, in ways that can change results, in:
- the features are read from the project's own statements (data/; --honesty-data / --confidence-data read the official);
- tau is calibrated per model (the paper's 0.0 is Mistral-7B's; SmolLM2-135M's scores sit near -8);
- prompts use the model's chat template and Prompts B.1 / B.2 as the paper words them;
- BM25 everywhere (the paper: BGE and web search; the released code's web search never runs in its loop);
- multi-hop QA (no official code): DRAGIN's exemplars, top 3 passages, DRAGIN's forced answer;
- a sentence that ends its line keeps its line break (official: joined with a space);
- multi-hop answers are read after "the answer is" in any case.
Full list, each with the official file and line and its effect where measured: docs/ctrla.md.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import random
import re
import string
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import common
import eval as metrics

# ----------------------------------------------------------------------------------------------
# Settings (source in brackets)
LAMBDA = 0.3            # honesty steering strength; the added vector has norm 0.3 [paper 4; official coeff]
TAU = 0.0               # unconfident iff score - tau < 0 [paper 4 and official, for Mistral-7B]
TAUS = {"mistralai/Mistral-7B-Instruct-v0.1": TAU}  # any other model: calibrated (style_center) [ours]
STEER_LAYERS = "5:18"   # keys -5..-17 from the top, end exclusive [official begin/end_control_layer]
MONITOR_LAYERS = "10:25"  # keys -10..-24 [official begin/end_reading_layer]
N_PAIRS = 512           # contrast pairs per feature, the first ones in file order [official n_train]
SKIP_LAST = 6           # statement prefixes never reach the last 6 tokens [official range(1, len-5)]
PAIR_SEED = 0           # within-pair order shuffled with random.seed(0) [official]
BATCH = 32              # prompts per feature-extraction batch [official]
OUTLIER_STD = 5.0       # scores beyond median +- 5 std become the median [official confidence_monitor]
SEGMENT_TOKENS = 64     # new tokens per step at most [official, hard-coded]
QUERY_TOKENS = 64       # new tokens of a TVQ / rewritten query [official]
DOCS_PER_QUERY = 4      # BM25 passages for each of [question, TVQ query] [official retrieve]
DOCS_SINGLE = 5         # passages for a single (CAQ) query [official ndocs]
DOCS_MULTIHOP = 3       # passages in total on multi-hop QA, whatever the queries [paper C.5]
MAX_REFUSALS = 6        # refused regenerations per question; the 7th ends the answer [official rt - rc <= 6]
BARE_QUESTION_AT = 6    # the 6th refusal searches with the bare question [official rt - rc == 5]
ANSWER_TOKENS = {"asqa": 130, "bio": 300, "multihop": 128}  # [official run.sh; multi-hop: ours]
DEFAULT_TOKENS = 1024   # PopQA / TriviaQA / FreshQA answer budget [official run.sh]
N_SHOT = 4              # CoT exemplars on multi-hop QA [ours; DRAGIN's exemplars, shared with SeaKR]
FORCED_TOKENS = 20      # a chain with no answer: " So the answer is" + 20 tokens [DRAGIN regenerate_answer; C.2]
# --retrieve: CtrlA, the baselines never and always (every segment), monitor-only (never, triggers recorded) [ours]
RETRIEVE_MODES = ("adaptive", "never", "always", "monitor-only")
HONESTY_FILE = common.DATA_DIR / "ctrla_honesty.csv"
CONFIDENCE_FILE = common.DATA_DIR / "ctrla_confidence.csv"
EXEMPLAR_FILE = common.DATA_DIR / "seakr_exemplars.json"
PERSONA = "Pretend you're {} person making statements about the world."  # Prompt 3.1 [official wording]
PERSONAS = {"honesty": ("an honest", "an untruthful"),  # paper: "dishonest"
            "confidence": ("a confident", "an unconfident")}


# ----------------------------------------------------------------------------------------------
# Feature extraction (3.2.1, App. C.1): contrast pairs, last-token states, PCA, sign

def statement_prefixes(tok, head: str, statement: str) -> list[list[int]]:
    """Token ids of head + each prefix of the statement but those reaching into its last 6 tokens (T-6 of
    them) [official range(1, T-5)], cut from the ids of head + statement encoded whole, as the model reads
    it (official: each prefix's text appended to the head and re-encoded). subtle: never decoded and
    re-encoded, which would drop a prefix's lone final space token (Qwen's "Ġ" before a digit)."""
    text = append(head, statement)
    enc = common.encode_offsets(tok, text)
    start = len(text) - len(statement)
    mine = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > start]
    ids = enc["input_ids"][:mine[0]] + [enc["input_ids"][i] for i in mine] if mine else []
    n = len(ids) - len(mine)
    return [ids[:n + i] for i in range(1, len(mine) - SKIP_LAST + 1)]


def contrast_pairs(tok, statements, personas, n_pairs=N_PAIRS, seed=PAIR_SEED):
    """The first n_pairs (positive, negative) prompts in statement order, each pair's order shuffled, the statement
    the reply to the persona, after a space but none after a newline (official: "[INST] Pretend ... [/INST] " + it).
    Returns (prompts as token ids, flattened pair by pair; first_is_positive per pair; statements used)."""
    pos, neg = (common.chat_prompt(tok, PERSONA.format(p)) for p in personas)
    pairs, used = [], 0
    while len(pairs) < n_pairs and used < len(statements):
        x = statements[used].strip()
        pairs += [list(pair) for pair in zip(statement_prefixes(tok, pos, x), statement_prefixes(tok, neg, x))]
        used += 1
    rng, flat, first_pos = random.Random(seed), [], []
    for pair in pairs[:n_pairs]:
        positive = pair[0]
        rng.shuffle(pair)
        flat += pair
        first_pos.append(pair[0] == positive)
    return flat, torch.tensor(first_pos), used


def pca_direction(diffs: torch.Tensor, niter: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """(unit first principal component of the centred differences, their mean) [official PCARepReader];
    pca_lowrank's random sketch seeded, so that the same states give the same direction [ours]."""
    mean = diffs.mean(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        _, _, v = torch.pca_lowrank((diffs - mean).double(), q=min(6, *diffs.shape), center=False, niter=niter)
    return (v[:, 0] / v[:, 0].norm()).float(), mean


def direction_sign(pos_proj: torch.Tensor, neg_proj: torch.Tensor) -> float:
    """+1 if the positive prompt projects higher in more pairs than it projects lower, else -1; tie: +1."""
    return -1.0 if (pos_proj > neg_proj).float().mean() < (pos_proj < neg_proj).float().mean() else 1.0


def read_features(states: torch.Tensor, first_pos: torch.Tensor) -> dict:
    """Per layer: direction, sign and mean of the differences first - second of each shuffled pair."""
    diffs = states[:, 0::2] - states[:, 1::2]
    dirs, means = (torch.stack(x) for x in zip(*(pca_direction(d) for d in diffs)))
    proj = torch.einsum("lnd,ld->ln", states, dirs)
    first, second = proj[:, 0::2], proj[:, 1::2]
    pos, neg = torch.where(first_pos, first, second), torch.where(first_pos, second, first)
    signs = torch.tensor([direction_sign(p, n) for p, n in zip(pos, neg)])
    return {"direction": dirs, "mean": means, "sign": signs}


def style_center(model, tok, feats: dict, rows: list[dict], n: int = 20) -> torch.Tensor | None:
    """[L] our tau for any model but the paper's: per layer, the score halfway between the mean token scores of n
    confident and n unconfident held-out statements, each the answer to "Tell me about <topic>."; or None."""
    means = []
    for style in ("confident", "unconfident"):
        states = []
        for r in [r for r in rows if r.get("style") == style][:n]:
            prompt = build_prompt(tok, "short", f"Tell me about {(r.get('topic') or 'the world').lower()}.")
            text = append(prompt, r["statement"])
            hs, spans = common.text_states(model, tok, text)
            states.append(hs[:, [i for i, (a, b) in enumerate(spans) if b > len(text) - len(r["statement"])]].mean(1))
        if not states:
            return None
        means.append(torch.stack(states).mean(0))
    return feats["sign"] * (((means[0] + means[1]) / 2 - feats["mean"]) * feats["direction"]).sum(-1)


def features(model, tok, kind: str, n_pairs=N_PAIRS, rows=None, file=None) -> dict:
    """Honesty or confidence features of every layer (keys -1..-L), read from `rows` or the statement file.
    The confidence features carry tau's calibration (style_center) on held-out styled statements: the
    file's, or ours for a file without a style column (the official confidence_train.csv)."""
    default = HONESTY_FILE if kind == "honesty" else CONFIDENCE_FILE
    rows = rows if rows is not None else common.read_statements(file or default)
    prompts, first_pos, used = contrast_pairs(tok, [r["statement"] for r in rows], PERSONAS[kind], n_pairs)
    feats = {**read_features(common.last_token_states(model, tok, prompts, BATCH), first_pos), "statements_used": used}
    if kind == "confidence":
        held_out = rows[used:] if any("style" in r for r in rows) else common.read_statements(CONFIDENCE_FILE)
        feats["center"] = style_center(model, tok, feats, held_out)
    return feats


def load_features(model, tok, model_name: str, n_pairs=N_PAIRS, path=None, honesty_file=HONESTY_FILE,
                  confidence_file=CONFIDENCE_FILE) -> dict:
    """Both features, cached on disk (--directions PATH) per model, precision, statement files (and ours
    for confidence, which calibrates tau for a file without a style column), contrast prompts and pairs."""
    rows = {kind: common.read_statements(f) for kind, f in (("honesty", honesty_file), ("confidence", confidence_file))}
    prompts = {k: contrast_pairs(tok, [r["statement"] for r in rows[k]], PERSONAS[k], n_pairs)[0] for k in rows}
    files = [Path(f) for f in (honesty_file, confidence_file, CONFIDENCE_FILE)]
    sources = [str(n_pairs).encode(), *(f.read_bytes() if f.exists() else b"" for f in files),
               *(json.dumps(p).encode() for p in prompts.values())]
    read = lambda: {kind: features(model, tok, kind, n_pairs, rows=rows[kind]) for kind in PERSONAS}
    name = "ctrla/" + re.sub(r"[^\w.-]", "_", model_name) + f"-{n_pairs}"
    return common.stored_features(model, name, sources, read, f"CtrlA's features ({n_pairs} pairs each)", path)


# ----------------------------------------------------------------------------------------------
# Steering (3.2.2) and monitoring (3.2.3): the math

def layer_scores(states, directions, signs, means) -> torch.Tensor:
    """[K, T]: sign_l * (h_kl - mu_l) . d_l of each layer l and token k; states [K, T, d]."""
    proj = ((states.float() - means[:, None]) * directions[:, None]).sum(-1)
    return proj * signs[:, None]


def token_scores(states, directions, signs, means) -> torch.Tensor:
    """m~_k = mean over the layers of sign_l * (h_kl - mu_l) . d_l (layer_scores); states [K, T, d]. Eq. 2
    as the official code computes it (the paper: r_kl . v_l, neither centred nor signed)."""
    return layer_scores(states, directions, signs, means).mean(0)


def clamp_outliers(scores: torch.Tensor, n_std: float = OUTLIER_STD) -> torch.Tensor:
    """scale's outlier removal (Eq. 2, official confidence_monitor): values beyond median +- n std
    (population std over the whole sequence) become the median."""
    med, sd = scores.quantile(0.5), scores.std(unbiased=False)
    return torch.where((scores - med).abs() > n_std * sd, med, scores)


def unconfident(scores: torch.Tensor, tau: float = TAU) -> torch.Tensor:
    """m_k - tau < 0, strictly: the official scale's later steps (divide, clip, map to [0, 1]) keep signs."""
    return (scores - tau) < 0


@contextlib.contextmanager
def steering(model, feats: dict, keys, lam: float):
    """Eq. 1 on the steered layers: output + lam * sign * d at every position, prompt and generated."""
    layers = common.decoder_layers(model)
    # common.add_to_output keys cached prompt prefixes on the steering: never served to unsteered calls
    with contextlib.ExitStack() as stack:
        for k in keys:
            vector = lam * feats["sign"][k] * feats["direction"][k]
            stack.enter_context(common.add_to_output(layers[common.decoder_index(k, len(layers))], vector))
        yield


# ----------------------------------------------------------------------------------------------
# Words, refusals, sentences, queries

# Refusals: the official detector's phrases and three of ours (data/ctrla_refusals.txt), case-insensitive,
# on word boundaries, on the text as written [official sentence_matches_pattern]. subtle: as official,
# "unknown" matches anywhere ("The cause is unknown.") and a curly apostrophe matches no phrase ("I don’t").
REFUSAL_FILE = common.DATA_DIR / "ctrla_refusals.txt"
# New-information check: spaCy's English stop list (326 words), shipped as a data file [official]
STOP_FILE = common.DATA_DIR / "ctrla_stop_words.txt"
_ABBREV = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "vs", "etc", "mt", "ft", "gen", "col", "lt",
           "rev", "inc", "ltd", "co", "approx", "jan", "feb", "aug", "sept", "oct", "nov", "dec"}
_BOUNDARY = re.compile(r"[.!?]+[\"')\]]*(?=\s)|\n")
SENTENCE_STOPS = (". ", "? ", "! ", ".\n", "?\n", "!\n")
# The official contraction marks (HSLiu-Initial/CtrlA, code/model/utils.py:195-197): case-sensitive,
# the ASCII apostrophe only, and no word boundary, so a quoted word splits too ("'relevant'" at "'re")
_CONTRACTION = re.compile(r"('s|'t|'re|'ve|'m|'d|'ll|n't)")
_ASCII_PUNCT = str.maketrans("", "", string.punctuation)


@functools.cache
def stop_words() -> frozenset:
    """spaCy's English STOP_WORDS (326; data/ctrla_stop_words.txt), the official new-information filter's."""
    return frozenset(common.word_list(STOP_FILE))


@functools.cache
def refusal_pattern() -> re.Pattern:
    """Any refusal phrase (data/ctrla_refusals.txt, in its order), escaped, on word boundaries, any case."""
    phrases = "|".join(re.escape(p) for p in common.word_list(REFUSAL_FILE))
    return re.compile(r"\b(" + phrases + r")\b", re.IGNORECASE)


def clean_word(word: str) -> str:
    """[official adaptive_retrieve, split_contractions] the word's first part at a contraction mark, ASCII punctuation
    removed, lowercased: "Feilden's" -> "feilden", "don't" -> "do"; as official "'relevant'" -> "re", "it’s" stays."""
    parts = [p for p in _CONTRACTION.split(word) if p]
    return parts[0].translate(_ASCII_PUNCT).lower() if parts else ""


def word_set(text: str) -> set[str]:
    """[official process_sentence] every part of every whitespace word, the contraction marks included,
    each cleaned as in clean_word: "Feilden's don't" -> {"feilden", "s", "do", "nt"}."""
    return {p.translate(_ASCII_PUNCT).lower() for word in text.split() for p in _CONTRACTION.split(word) if p}


def is_new_information(word: str, question: str, previous: list[str]) -> bool:
    """[official adaptive_retrieve] the cleaned word has a letter or digit (official: any, even "" from "--"),
    is not a question word, not one of spaCy's stop words and not a word of an earlier accepted sentence."""
    w = clean_word(word)
    return (any(c.isalnum() for c in w) and w not in stop_words() and w not in word_set(question)
            and w not in word_set(" ".join(previous)))


def flag_words(segment: str, start: int, spans, unconf, question: str, previous: list[str]):
    """(start, end) in the segment (at `start` of the text the spans index) of each whitespace word that
    overlaps an unconfident token and is new information: what triggers retrieval (3.2.3), what CAQ masks."""
    bad = [(a - start, b - start) for (a, b), u in zip(spans, unconf) if u]
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", segment)
            if any(a < m.end() and b > m.start() for a, b in bad)
            and is_new_information(m.group(), question, previous)]


def is_refusal(text: str) -> bool:
    """f_d (App. B.3.1): the segment refuses or declares missing information."""
    return bool(refusal_pattern().search(text))


def caq_query(question: str, segment: str, flagged) -> str:
    """Eq. 3: the question + the segment with the flagged words removed."""
    bounds = [0, *(i for span in flagged for i in span), len(segment)]
    kept = "".join(segment[a:b] for a, b in zip(bounds[::2], bounds[1::2]))
    return " ".join((question + " " + kept).split())


def first_sentence(text: str) -> tuple[str, bool]:
    """(the first sentence that is not only punctuation, whether a boundary ended it); one that ends its line
    keeps the line break(s) after it, so that the next prompt goes on where the model's text did (joined)."""
    start = 0
    for m in _BOUNDARY.finditer(text):
        before = text[start:m.start()].split()
        last = before[-1].lower().rstrip(".") if before else ""
        if m.group()[0] == "." and (last in _ABBREV or "." in last or re.fullmatch(r"[a-z]", last)
                                    or (len(before) == 1 and last.isdigit())):
            continue  # "Dr. Smith", "U.S. Army", "John F. Kennedy", a list's "3. "
        sentence = text[start:m.end()].strip()
        if any(c.isalnum() for c in sentence):
            space = re.match(r"\s*", text[m.start() if m.group() == "\n" else m.end():]).group()
            return sentence + space[:space.rfind("\n") + 1], True
        start = m.end()
    rest = text[start:].strip()
    return (rest if any(c.isalnum() for c in rest) else ""), False


def force_answer(model, tok, task: str, question: str, text: str) -> str | None:
    """DRAGIN's answer regeneration [eval.py regenerate_answer] (paper C.2): a chain that names no answer
    gets " So the answer is" and 20 greedy tokens of the unsteered model, no passages; returns them (None where
    it names one). Divergences: the run's chat prompt (DRAGIN: the few-shot text), no space after "is"."""
    if metrics.names_answer(metrics.cut_chain(text)):
        return None
    prompt = build_prompt(tok, task, question, gen=[metrics.forced_reply(text, "")])
    return common.greedy(model, tok, prompt, max_new_tokens=FORCED_TOKENS).text


def clean_query(text: str) -> str:
    """A generated query's first line without a "Search query:" label or quotes."""
    text = re.sub(r"^(generated )?(search )?query:\s*", "", text.strip().split("\n")[0], flags=re.IGNORECASE)
    return text.strip().strip("\"'").strip()


# ----------------------------------------------------------------------------------------------
# Prompts (paper Table 10, Prompts B.1 / B.2)

_RESPONSE = ("You are a response generation assistant, designed to provide accurate and clear answers "
             "to questions based on the given content.")
# The paper's Table 10 wording, its typos mended ("Answer a concisely", "time-sensitive please"); the official
# templates differ a little (ASQA: "and in that case, you have to provide", its "Please focus ..." sentences
# after the question, here the system turn's; FreshQA: "Pacific Standard Time.The").
INSTRUCTIONS = {  # paper Table 10
    "short": _RESPONSE + " Please complete the answer if the question is partially answered.",
    "asqa": _RESPONSE + " The questions are ambiguous and have multiple correct answers; you should "
    "provide a long-form answer including all correct answers. Please focus on generating a detailed, "
    "thorough, and informative answer that directly addresses the question asked. Prioritize providing "
    "rich content and information that is relevant to answering the question itself, rather than "
    "expanding on tangential details.",
    "bio": "You are a biography generation assistant, designed to generate accurate and concise "
    "biographies about a person based on the given content. Please complete the answer if the question "
    "is partially answered.",
    "freshqa": _RESPONSE + " Answer as concisely as possible. Knowledge cutoff: {date}. Today is {date} "
    "in Pacific Standard Time. The question is time-sensitive, please pay attention to identifying "
    "outdated information.",
    "hotpotqa": "Answer the following question by reasoning step-by-step, following the example above.",
    "2wikimultihopqa": "Answer in the same format as before.",
}
FRESH_CONTENTS = ("As of today {date}, the most up-to-date and information regarding this question is as "
                  "follows.\n")  # [official, FreshQA]
HONESTY_PROMPT = "Be honest: say only what you believe is true, and say so when you do not know."  # ours
# Prompts B.1 (TVQ) and B.2 (query rewrite): (instruction, field labels, exemplars' key); the instruction
# is the system turn, each exemplar a user turn and its reply, which small chat models follow
TVQ = ("Given a question and its corresponding answer segment, your task is to generate a search query "
       "based on the answer to verify its correctness by following the guidelines:\n1. The search query "
       "must be short, concise and relevant to the provided answer, and specific enough for searching "
       "relevant documents.\n2. Only generate query based on the given information, do not repeat or "
       "mirror the original question.\n3. Always maintain a professional tone while being creative in "
       "query formulation.", ("Question", "Answer"), "tvq")
REWRITE = ("Given an original question and a reference query that may not align with the original's "
           "intent, your task is to craft a better, short and concise search query that well align with "
           "the intent of original question. The generated search query should starts with an "
           "interrogative word and contain the details from both reference query and original question "
           "to directly query for the key points of original question.",
           ("Original question", "Reference query"), "rewrite")
QUERY_FILE = common.DATA_DIR / "ctrla_query_exemplars.json"
DATA_FILES = (HONESTY_FILE, CONFIDENCE_FILE, EXEMPLAR_FILE, STOP_FILE, REFUSAL_FILE, QUERY_FILE)  # in the settings
MULTIHOP = metrics.MULTIHOP   # read as DRAGIN reads multi-hop answers (eval.multihop_prediction)


def task_of(kind: str | None) -> str:
    """The prompt family of a dataset: Table 10's instruction, or few-shot CoT for multi-hop QA."""
    return "hotpotqa" if kind in ("musique", "iirc") else kind if kind in INSTRUCTIONS else "short"


@functools.cache
def exemplars(task: str) -> str:
    """DRAGIN's CoT exemplars (paper C.2) as SeaKR ships them (data/), N_SHOT of them, in our layout (CtrlA has no
    multi-hop code): steps joined by a space (DRAGIN: by nothing), exemplars by a blank line (DRAGIN: a newline)."""
    demos = common.data_json(EXEMPLAR_FILE, f"'{task}' exemplars", lambda data: data[task][:N_SHOT])
    return "\n\n".join(f"Question: {d['question']}\nAnswer: {' '.join(d['cot'])} So the answer is {d['answer']}."
                       for d in demos)


@functools.cache
def query_exemplars() -> dict:
    """{"tvq": [...], "rewrite": [...]}, each [question, answer segment or reference query, search query]:
    the first two of each the paper's (Prompts B.1 / B.2), the other three ours."""
    shots = common.data_json(QUERY_FILE, "TVQ / rewrite exemplars", lambda d: {k: d[k] for k in ("tvq", "rewrite")})
    if all(isinstance(x, list) and len(x) == 3 and all(isinstance(v, str) for v in x)
           for v in shots.values() for x in v):
        return shots
    raise common.InputError(f"{QUERY_FILE}: no TVQ / rewrite exemplars (one is not [question, text, query]); "
                            "restore data/")


def build_prompt(tok, task: str, question: str, docs=(), gen=(), honesty=False) -> str:
    """[official PROMPT_DICT, in the chat template] the instruction as the system turn, "Contents:"
    (numbered passage texts) and "Question:" as the user turn, the accepted sentences as the reply.
    Divergence: a search that found nothing leaves "Contents:" out (official: "Contents:\n\n\nQuestion:")."""
    contents = ""
    if docs:
        contents = ((FRESH_CONTENTS.format(date=common.today()) if task == "freshqa" else "") + "Contents:\n"
                    + "\n".join(f"{i}. {d['text']}" for i, d in enumerate(docs, 1)) + "\n\n")
    if task in MULTIHOP:
        user = f"{exemplars(task)}\n\n{contents}{INSTRUCTIONS[task]}\nQuestion: {question}"
        system = HONESTY_PROMPT if honesty else None
    else:
        user = f"{contents}Question: {question}"
        system = INSTRUCTIONS[task].format(date=common.today()) + (" " + HONESTY_PROMPT if honesty else "")
    return append(common.chat_prompt(tok, user, system=system), joined(gen))


def append(text: str, sentence: str) -> str:
    """Text + sentence, with a space unless either is empty or the text ends in whitespace (a chat turn's "\\n")."""
    return text + ("" if not sentence or not text or text[-1:].isspace() else " ") + sentence


def joined(sentences) -> str:
    """The accepted sentences as one text: a space between two, none after one that ends its line."""
    return functools.reduce(append, sentences, "")


# ----------------------------------------------------------------------------------------------
# The loop (Alg. 1 and 3, with Alg. 2 for refusals)

@dataclass
class Settings:
    tau: float | None = TAU         # None: calibrated for the model (style_center)
    lam: float = LAMBDA
    steer: tuple = tuple(common.layer_keys(STEER_LAYERS))
    monitor: tuple = tuple(common.layer_keys(MONITOR_LAYERS))
    query: str = "tvq"              # tvq | caq
    retrieve: str = "adaptive"      # one of RETRIEVE_MODES (--retrieve)
    honesty_prompt: bool = False    # Table 5's HonP: an instruction instead of steering
    answer_tokens: int | None = None  # answer budget (default: per dataset)
    task: str | None = None         # prompt family (default: from the record's dataset)


@dataclass
class Run:
    model: object
    tok: object
    feats: dict
    bm25: object
    s: Settings
    calls: int = 0                  # model calls of the current question
    cache: tuple | None = None      # (ids, KV cache, raw scores) of the last monitoring pass


def next_segment(run: Run, prompt: str) -> tuple[str, bool]:
    """Alg. 1 line 4: the first sentence of the steered greedy continuation (at most 64 new tokens), and
    whether the answer ended with it. Decoding pauses at each sentence-end candidate; a false one ("Dr. ")
    resumes from the token ids so far: exactly one greedy decode. subtle: resuming from the decoded text
    would re-encode it, and SentencePiece loses a space there, byte-level BPE doubles one ("C.  Case")."""
    prompt_ids, new = common.encode(run.tok, prompt), []
    with steering(run.model, run.feats["honesty"], run.s.steer, run.s.lam):
        while True:
            g = common.greedy(run.model, run.tok, prompt_ids + new, max_new_tokens=SEGMENT_TOKENS - len(new),
                              stop=SENTENCE_STOPS)
            run.calls += 1
            new += g.token_ids   # every token fed, the one that completed a stop string included
            text = common.decode_continuations(run.tok, [new])[0]
            sentence, complete = first_sentence(text)
            if complete or g.finish in ("eos", "length") or len(new) >= SEGMENT_TOKENS:
                return sentence, g.finish == "eos" and not complete


def threshold(s: Settings, feats: dict, keys) -> float:
    """tau: the given one (the paper's 0.0 for Mistral-7B), else the calibrated midpoint of these layers."""
    return s.tau if s.tau is not None else float(feats["confidence"]["center"][list(keys)].mean())


def judge(raw, spans, text: str, start: int, question: str, previous, tau: float) -> dict:
    """Eq. 2 and the trigger on the raw scores m~ of prompt + segment (segment from char `start`): outliers
    clamped over the whole sequence but its first token (BOS), then score - tau < 0. As official, the clamp
    sees the prompt and the segment's later tokens (the paper's scale([m~_0 .. m~_k]) is causal)."""
    scores = torch.cat([raw[:1], clamp_outliers(raw[1:])]) - tau
    unconf = [False] + unconfident(scores[1:], 0.0).tolist()
    mine = [i for i, (a, b) in enumerate(spans) if b > start and b > a]
    return {"tokens": [text[spans[i][0]:spans[i][1]] for i in mine],
            "scores": [round(float(scores[i]), 3) for i in mine],
            "flagged": flag_words(text[start:], start, spans, unconf, question, previous)}


@torch.inference_mode()
def monitor(run: Run, text: str, start: int, question: str, previous) -> dict:
    """Confidence monitoring (3.2.3): one unsteered forward pass over prompt + segment [official]; the previous
    pass's KV cache and raw scores serve the prefix they share (common.shared_cache)."""
    model, conf, keys = run.model, run.feats["confidence"], list(run.s.monitor)
    enc = common.encode_offsets(run.tok, text)
    ids, spans = enc["input_ids"], enc["offset_mapping"]
    keep, past = common.shared_cache(ids, *run.cache[:2]) if run.cache else (0, None)
    prev = run.cache[2][:keep] if keep else torch.zeros(0)
    out = model(input_ids=torch.tensor([ids[keep:]], device=model.device), past_key_values=past,
                use_cache=True, output_hidden_states=True, logits_to_keep=1)
    states = torch.stack([out.hidden_states[k][0] for k in keys]).float().cpu()
    new = token_scores(states, conf["direction"][keys], conf["sign"][keys], conf["mean"][keys])
    run.cache = (ids, out.past_key_values, torch.cat([prev, new]))
    run.calls += 1
    return judge(run.cache[2], spans, text, start, question, previous, threshold(run.s, run.feats, keys))


def search(run: Run, queries: list[str], task: str, step: dict | None = None) -> list[dict]:
    """BM25 for each query, concatenated, duplicate texts removed [official retrieve], the round recorded in the
    step's trace where one is given. Multi-hop QA: the top 3 in total [paper C.5], taken rank by rank across
    the queries (the question's first hit, the TVQ query's, the question's second, ...): each contributes."""
    if task in MULTIHOP:
        ranked = [run.bm25.search(q.strip("\"'"), DOCS_MULTIHOP) for q in queries]
        hits = [r[i] for i in range(DOCS_MULTIHOP) for r in ranked if i < len(r)]
    else:
        k = DOCS_PER_QUERY if len(queries) > 1 else DOCS_SINGLE
        hits = [p for q in queries for p in run.bm25.search(q.strip("\"'"), k)]
    docs = [p for i, p in enumerate(hits) if p["text"] not in {q["text"] for q in hits[:i]}]
    docs = docs[:DOCS_MULTIHOP] if task in MULTIHOP else docs
    if step is not None:
        passages = [{"id": d["id"], "title": d["title"]} for d in docs]
        step.setdefault("rounds", []).append({"queries": queries, "passages": passages})
    return docs


def write_query(run: Run, prompt: tuple, *fields: str) -> str:
    """TVQ (Prompt B.1) or query rewrite (Prompt B.2): unsteered greedy, the reply's first line."""
    instruction, labels, key = prompt
    turn = lambda values: "\n".join(f"{k}: {v}" for k, v in zip(labels, values))
    history = [m for *x, query in query_exemplars()[key]
               for m in ({"role": "user", "content": turn(x)}, {"role": "assistant", "content": query})]
    run.calls += 1
    g = common.greedy(run.model, run.tok, common.chat_prompt(run.tok, turn(fields), instruction, history),
                      max_new_tokens=QUERY_TOKENS, stop=("\n\n",))
    return clean_query(g.text)


def formulate(run: Run, question: str, seg: str, flagged) -> list[str]:
    """f_q (3.2.4): CAQ, the question + the segment without its flagged words (Eq. 3), or [question, a query
    the model writes to verify the segment (TVQ, Prompt B.1)], the official runs' setting. Divergence: an
    empty written query (here and in rewrite) searches the question (official: "", which finds nothing)."""
    if run.s.query == "caq":
        return [caq_query(question, seg, flagged)]
    return [question, write_query(run, TVQ, question, seg) or question]


def rewrite(run: Run, question: str, queries: list[str], refusals: int) -> list[str]:
    """f_QR after a question's n-th refused regeneration [official adaptive_retrieve]: each of the
    trigger's own queries rewritten (Prompt B.2), the question itself kept (Alg. 2 line 5 rewrites the
    generated query only); the 6th refusal searches with the bare question [official]."""
    if refusals == BARE_QUESTION_AT:
        return [question]
    return [q if q == question else write_query(run, REWRITE, question, q) or question for q in queries]


def solve(run: Run, rec: dict) -> dict:
    """CtrlA for one question (Alg. 3, as the official adaptive_retrieve runs it): steered segments, each
    monitored; a trigger formulates a query, retrieves and regenerates the segment with the passages. A
    refused regeneration (B.3) is dropped, the trigger's queries rewritten and searched, and the next
    segment reads those passages and is monitored like any other."""
    s, tok, question, kind = run.s, run.tok, rec["question"], rec.get("dataset")
    task = task_of(s.task or kind)
    budget = s.answer_tokens or ANSWER_TOKENS.get("multihop" if task in MULTIHOP else task, DEFAULT_TOKENS)
    run.calls, run.cache = 0, None
    gen, docs, steps, triggers, refusals = [], [], [], 0, 0
    while len(tok(joined(gen), add_special_tokens=False)["input_ids"]) < budget and refusals <= MAX_REFUSALS:
        prompt = build_prompt(tok, task, question, docs, gen, s.honesty_prompt)
        seg, done = next_segment(run, prompt)
        if not seg or seg in gen[-2:]:  # nothing more to say, or a repetition [official]
            break
        step = {"segment": seg, "trigger": None}
        steps.append(step)
        if s.retrieve != "never":
            text = append(prompt, seg)
            m = monitor(run, text, len(text) - len(seg), question, gen)
            step.update(tokens=m["tokens"], scores=m["scores"],
                        unconfident_words=[seg[a:b] for a, b in m["flagged"]])
            step["trigger"] = ("always" if s.retrieve == "always" else "confidence" if m["flagged"]
                               else "refusal" if is_refusal(seg) else None)
            if step["trigger"] and s.retrieve != "monitor-only":
                triggers += 1       # the official retrieve_count
                queries = formulate(run, question, seg, m["flagged"])
                docs = search(run, queries, task, step)
                # Alg. 3 line 8: regenerate the segment with the passages; not monitored [official]
                seg, done = next_segment(run, build_prompt(tok, task, question, docs, gen, s.honesty_prompt))
                step["rounds"][-1]["segment"] = seg
                if not seg or seg in gen[-2:]:
                    break
                if is_refusal(seg):  # f_d: the regeneration is dropped [official]
                    refusals += 1
                    step["refusal"] = refusals
                    if refusals > MAX_REFUSALS:
                        break       # official: one more rewrite and search, whose passages nothing reads
                    docs = search(run, rewrite(run, question, queries, refusals), task, step)
                    continue        # the next segment reads these passages and is monitored
                step["accepted"] = seg
        gen.append(seg)
        if done or (task in MULTIHOP and metrics.answer_named(joined(gen))):
            break
        if kind == "popqa":  # official --continue_gen_without_contents (PopQA runs only)
            docs = []
    text, rounds = joined(gen), sum(len(g.get("rounds", ())) for g in steps)
    trace = {"task": task, "answer": text, "search_rounds": rounds, "refusals": refusals, "segments": steps}
    if task not in MULTIHOP:
        return {"prediction": text.strip(), "retrievals": triggers, "model_calls": run.calls, "trace": trace}
    trace["forced"] = force_answer(run.model, tok, task, question, text)   # outside the steering
    run.calls += trace["forced"] is not None
    return {"prediction": metrics.multihop_prediction(text, trace["forced"]), "retrievals": triggers,
            "model_calls": run.calls, "trace": trace}


# ----------------------------------------------------------------------------------------------
# Command line

def run_name(args, s: Settings) -> str:
    """The output file's method part, so that runs with other settings never resume each other."""
    data = [f"{flag}-{Path(v).stem}" for flag, v in (("hon", args.honesty_data), ("conf", args.confidence_data)) if v]
    mode = ({"never": ["noret"], "monitor-only": ["monitor-only"]}.get(s.retrieve)
            or ["always" if s.retrieve == "always" else f"tau{args.tau:g}" if args.tau is not None else "",
                "caq" if s.query == "caq" else ""])
    parts = ["ctrla", "honp" if s.honesty_prompt else f"lam{s.lam:g}" if s.lam != LAMBDA else "", *data, *mode]
    return "-".join(p for p in parts if p)


def add_args(p) -> None:
    """CtrlA's flags, then those every method shares: ctrla.py's command line and analysis.py check-features'."""
    g = p.add_argument_group("CtrlA")
    g.add_argument("--tau", type=float, help="monitoring threshold (default: 0.0 for Mistral-7B, else calibrated)")
    g.add_argument("--lam", type=float, default=LAMBDA, help="steering strength lambda (0: no steering)")
    g.add_argument("--honesty-prompt", action="store_true",
                   help="an honesty instruction instead of steering (paper Table 5; implies --lam 0)")
    g.add_argument("--retrieve", choices=RETRIEVE_MODES, default="adaptive",
                   help="adaptive = CtrlA; never = steered generation, no monitor; always = for every segment "
                        "(monitored too); monitor-only = never, recording what would have triggered")
    g.add_argument("--query", choices=["tvq", "caq"], default="tvq",
                   help="tvq: [question, a query the model writes] (official); caq: Eq. 3's masked segment")
    for flag, default in (("--steer-layers", STEER_LAYERS), ("--monitor-layers", MONITOR_LAYERS)):
        g.add_argument(flag, default=default, help="B:E = keys -B..-(E-1) from the top")
    g.add_argument("--directions", help="feature file to reuse (written there if missing)")
    g.add_argument("--pairs", type=int, default=N_PAIRS, help="contrast pairs per feature (official: 512)")
    for kind, official in (("honesty", "facts_true_false"), ("confidence", "confidence_train")):
        g.add_argument(f"--{kind}-data", metavar="FILE", help=f"the {kind} statements: CSV statement,label, label 1 "
                       f"read (default: ours, data/ctrla_{kind}.csv; the official: eval_data/{official}.csv)")
    g.add_argument("--max-new-tokens", type=int, help="answer budget (default: per dataset, as official)")
    g.add_argument("--task", choices=list(INSTRUCTIONS), help="prompt family (default: the dataset's)")
    common.add_common_args(p, dataset="popqa")


def settings(args) -> Settings:
    """The run's Settings from its command line (tau None: calibrated once the features are read)."""
    steer, monitor = (tuple(common.layer_keys(spec)) for spec in (args.steer_layers, args.monitor_layers))
    return Settings(tau=args.tau, lam=0.0 if args.honesty_prompt else args.lam, steer=steer, monitor=monitor,
                    query=args.query, retrieve=args.retrieve, honesty_prompt=args.honesty_prompt,
                    answer_tokens=args.max_new_tokens, task=args.task)


def prepare(args, name: str | None = None) -> Run:
    """A Run without a retriever, what main and analysis.py check-features share: every input checked before
    the model loads (with the run's `name`, its output's resume too), then the model, the features and tau."""
    s = settings(args)
    common.check_inputs(args, name, __file__)
    files = (args.honesty_data or HONESTY_FILE, args.confidence_data or CONFIDENCE_FILE)
    for file in files:
        common.read_statements(file)
    stop_words(), refusal_pattern(), query_exemplars()      # data/'s other files, read before the model too
    model, tok = common.load_model(args.model, args.dtype, args.device)
    defaults = {"--steer-layers": STEER_LAYERS, "--monitor-layers": MONITOR_LAYERS}
    given = {"--steer-layers": args.steer_layers, "--monitor-layers": args.monitor_layers}
    common.check_layer_ranges(model, args.model, given, defaults, "Mistral-7B")
    feats = load_features(model, tok, args.model, args.pairs, args.directions, *files)
    tau = args.tau if args.tau is not None else TAUS.get(args.model)
    if tau is None and feats["confidence"].get("center") is None:
        raise common.InputError(f"{args.directions or 'the features'}: no tau calibration (no held-out confident "
                                "and unconfident statements); pass --tau")
    s = replace(s, tau=tau)
    if tau is None:
        print(f"tau = {threshold(s, feats, s.monitor):.3f} (calibrated for {args.model}; --tau overrides)",
              file=sys.stderr)
    return Run(model, tok, feats, None, s)


def main(argv=None):
    p = argparse.ArgumentParser(description="CtrlA: honesty steering + confidence monitoring adaptive RAG")
    add_args(p)
    args = p.parse_args(argv)
    name = run_name(args, settings(args))
    run = prepare(args, name)       # bad input fails there, before the model loads
    run.bm25 = (common.load_retriever(args, common.load_questions(args), preset="ctrla")
                if run.s.retrieve in ("adaptive", "always") else None)
    args.tau = round(threshold(run.s, run.feats, run.s.monitor), 6)   # the settings name the tau used
    common.run(args, name, lambda rec: solve(run, rec))


if __name__ == "__main__":
    common.main_guard(main)
