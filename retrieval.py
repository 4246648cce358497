"""Retrieval as the papers ran it: Lucene-parity BM25 in memory, an on-disk index, and Elasticsearch.

One interface, `search(query, k) -> [{"id", "title", "text", "score"}]` best first, opened by
`common.open_retriever(spec, preset)` where spec is a list of passages, a corpus file, an index
directory built by `python retrieval.py build CORPUS INDEX_DIR`, or `es://host:9200/index`.

Presets (what each reproduces, read from the official code):
- "seakr" (SeaKR, and DRAGIN whose retriever SeaKR reuses): Elasticsearch 7.17 through BEIR, fields
  `title` and `txt`, each with the `english` analyzer (standard tokenizer, English possessive
  filter, lower case, Lucene's 33 English stop words, Porter stemmer); BM25 k1 = 1.2, b = 0.75;
  query `multi_match` of type `best_fields` over [title, txt] with `tie_breaker` 0.5, i.e.
  score = max of the two field scores + 0.5 x the other; `dfs_query_then_fetch`; the model is
  shown `txt`. Rowen has no official index (it searched the web through Serper): it uses this.
- "ctrla" (CtrlA's es_service.py): an index with the default mapping (`standard` analyzer: standard
  tokenizer and lower case, no stop words in ES 7, no stemming), query `match` on `text` only.

Scores follow Lucene 8's BM25Similarity, float for float (Elasticsearch 7 reports them times k1 + 1,
its LegacyBM25Similarity: the same ranking, 2.2 times our numbers in an ElasticRetriever's hits):
  idf = log(1 + (N - n + 0.5) / (n + 0.5))                       N, n: docs with the field / term
  score(t, d) = w - w / (1 + tf * 1 / (k1 * (1 - b + b * L(d) / avgdl)))   w = idf (boost 1)
where L(d) is the field length after Lucene's lossy one-byte encoding (SmallFloat.intToByte4,
exact below 24 tokens, then 4 significant bits: 100 tokens are scored as 96) and avgdl =
total tokens / N, exact. A field's score is the sum over the query's analysed tokens (a repeated
query word counts twice, as in a Lucene BooleanQuery); a passage without a query word scores 0.
Ties are broken by corpus order, as Lucene breaks them by document number.

Where parity cannot be exact (measured against Lucene 8.8 by benchmarks/bench_retrieval.py):
- the standard tokenizer is Unicode's word-break rules (UAX #29) in a regex: letters and digits
  join, `. ' ’ :` join letters, `. , ; '` join digits, `_` joins, combining marks stay in their
  word, each Han or Hiragana character is its own token; Thai, Lao, Khmer and Myanmar word
  segmentation (dictionary based in Lucene) and characters beyond the BMP are not modelled
  (rare in English Wikipedia).
- the Porter stemmer is PyStemmer's 'porter' (Snowball's implementation of Porter's original
  algorithm) with the four departures of Porter's C version that Lucene's PorterStemmer ports
  (see porter_stem); both analyzers give Lucene 8.8's tokens for all 79,873 words of 3 characters or
  more in `make data`'s files (`benchmarks/bench_retrieval.py vocabulary`), not proven in general.

Backends:
- LocalBM25: the whole corpus in memory (numpy postings); the demo, --corpus contexts, corpus files.
- IndexBM25: an on-disk tantivy index (Rust, on PyPI) of the analysed tokens, for DPR's
  21M-passage psgs_w100.tsv. tantivy's own BM25 has Lucene's IDF and length table but multiplies
  by (k1 + 1), scores in its own float order and counts avgdl over all documents, so tantivy
  generates candidates (its top M for the same query: a disjunction of the query's tokens per
  field, in its DisjunctionMaxQuery with tie breaker 0.5); the candidates are re-scored exactly
  with the formulas above from their re-analysed stored text, the document frequencies from
  tantivy and the field totals kept at build time. M doubles until no passage below tantivy's
  M-th can beat the k-th, so the top k is exact (up to empty fields: see IndexBM25.search), or M
  reaches IndexBM25.MAX_M (10,000), where the top k is the best among those candidates.
- ElasticRetriever: plain HTTP (urllib) to an index someone already built with the official code;
  the official query bodies; timeouts, retries; credentials from ES_API_KEY or
  ES_USERNAME + ES_PASSWORD.
"""
from __future__ import annotations

import argparse
import base64
import csv
import json
import math
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class InputError(Exception):
    """Bad user input: a one-line message naming the file (and line) and the fix; no traceback.

    Every project file raises this one class (common.py re-exports it); it lives here because this
    file imports no other file of the project, so nothing circles back to define it."""


class Unavailable(InputError):
    """A search service that stopped answering (Elasticsearch down, or busy past the retries): a run stops
    there with its rows kept (common.answer_all), where another InputError fails that question alone."""


K1, B = 1.2, 0.75       # Lucene / Elasticsearch BM25 defaults [BEIR and CtrlA's ES index use them]
TIE_BREAKER = 0.5       # multi_match best_fields tie_breaker [official SeaKR retriever.py]

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (also Elasticsearch's _english_), 33 words.
ENGLISH_STOP_WORDS = frozenset("""a an and are as at be but by for if in into is it no not of on or
such that the their then there these they this to was will with""".split())


# Common English function words, in the style of the usual English stop lists: no preset's analyzer uses
# them; SeaKR filters its queries and answers' words with them (common.STOP_WORDS). The one-letter and
# short pieces ("s", "t", "don", "ll", "ve") are what \w+ leaves of contractions such as "don't".
STOP_WORDS = frozenset("""
a about above after again against ain all am an and any are aren as at be because been before
being below between both but by can couldn d did didn do does doesn doing don down during each
few for from further had hadn has hasn have haven having he her here hers herself him himself his
how i if in into is isn it its itself just ll m ma me mightn more most mustn my myself needn no
nor not now o of off on once only or other our ours ourselves out over own re s same shan she
should shouldn so some such t than that the their theirs them themselves then there these they
this those through to too under until up ve very was wasn we were weren what when where which
while who whom why will with won wouldn y you your yours yourself yourselves
""".split())


@dataclass(frozen=True)
class Preset:
    analyzer: str            # "english" or "standard"
    fields: tuple            # (index field name, passage key) pairs, in query order
    tie_breaker: float | None  # best_fields tie breaker; None: a single-field match query
    shown: str               # the index field whose text the model reads


PRESETS = {
    "seakr": Preset("english", (("title", "title"), ("txt", "text")), TIE_BREAKER, "txt"),
    "ctrla": Preset("standard", (("text", "text"),), None, "text"),
}


def get_preset(name):
    if name not in PRESETS:
        raise InputError(f"unknown retrieval preset '{name}'; use one of {', '.join(PRESETS)}")
    return PRESETS[name]


# ---------------------------------------------------------------------------------------------
# Analyzers
# ---------------------------------------------------------------------------------------------

_IDEO = "\u3040-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Hiragana, Han: one token each
# subtle: Python's \w takes every numeric character; UAX #29 only decimal digits: superscripts,
# fractions and circled numbers break words ("km²" is the token "km").
_NO = "\u00b2\u00b3\u00b9\u00bc-\u00be\u2070-\u209f\u2150-\u215f\u2189\u2460-\u24ff\u2776-\u2793"


def _char_class(categories, limit=0x10000):
    """A regex character class body of the BMP code points in the given Unicode categories."""
    import unicodedata
    out, start = [], None
    for cp in range(limit + 1):
        inside = cp < limit and unicodedata.category(chr(cp)) in categories
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            out.append(f"\\u{start:04x}-\\u{cp - 1:04x}")
            start = None
    return "".join(out)


# UAX #29 WB4: combining marks (Mn, Mc, Me) and format characters (Cf) stay inside the word they follow.
_EXTEND = _char_class({"Mn", "Mc", "Me", "Cf"})
_W0 = rf"[^\W{_IDEO}{_NO}]"                                     # a word's first char (letter, digit, _)
_W = rf"(?:{_W0}|[{_EXTEND}])"                                  # word char
_L = rf"[^\W\d_{_IDEO}{_NO}]"                                   # a letter
# subtle: a word starts with a letter, digit or _, never with a mark or format character, which WB4 joins
# to whatever precedes it (a space, so no token: "a \u200e b" is "a", "b")
_TOKEN = re.compile(
    rf"[{_IDEO}]"
    rf"|{_W0}{_W}*(?:(?:(?<={_L})[.:'\u2018\u2019](?={_L})|(?<=\d)[.,;'\u2018\u2019](?=\d)){_W}+)*")
MAX_TOKEN_LENGTH = 255   # StandardTokenizer splits longer tokens [Lucene default]
_SHORT = 2               # Lucene's PorterStemmer leaves words of up to 2 letters alone


def standard_tokens(text):
    """Lucene's StandardTokenizer (UAX #29 word breaks; see the module docstring), no case change."""
    out = [t for t in _TOKEN.findall(text) if t.strip("_")]  # subtle: underscores alone are no word
    if any(len(t) > MAX_TOKEN_LENGTH for t in out):
        out = [t[i:i + MAX_TOKEN_LENGTH] for t in out for i in range(0, len(t), MAX_TOKEN_LENGTH)]
    return out


def java_lower(tok):
    """Character.toLowerCase per code point (LowerCaseFilter): no final-sigma or dotted-I expansion."""
    if tok.isascii():
        return tok.lower()
    return "".join(c.lower() if len(c.lower()) == 1 else ("i" if c == "\u0130" else c) for c in tok)


_stemmer = None


def porter_measure(stem):
    """Porter's m: the number of vowel-consonant sequences in `stem` ([C](VC)^m[V]); y after a
    consonant is a vowel."""
    m, prev_vowel = 0, False
    for i, c in enumerate(stem):
        vowel = c in "aeiou" or (c == "y" and i > 0 and not prev_vowel)
        if prev_vowel and not vowel:
            m += 1
        prev_vowel = vowel
    return m


def porter_stem(words):
    """Porter's algorithm as Lucene's PorterStemmer (a port of Porter's own C version): PyStemmer's
    'porter' (Snowball's rendering of the published algorithm) plus the C version's departures,
    which Snowball leaves out:
    - words of 1-2 characters are not stemmed ("is", "us", "as" stay);
    - step 2 maps -bli to -ble (the paper: -abli to -able) and -logi to -log, where m > 0 before the
      suffix ("possibly" -> "possibl", "technology" -> "technolog"); steps 3-5 do not touch -log, and
      the -ble case is finished by stemming the -ble word again (step 1 leaves a word in -ble alone, so
      that runs exactly steps 2-5 on it). subtle: a word in -ie reaches step 2 with its e, which step 5
      removes afterwards, so "psychologie" stays "psychologi";
    - step 1b undoubles any final double consonant but l, s and z once -ed or -ing is gone
      ("trekking", "revving", "maxxed" -> "trek", "rev", "max"), Snowball only bb dd ff gg mm nn pp rr
      tt; what is left is stemmed again, where only steps 2-5 can act (it ends in c, h, j, k, q, v, w
      or x)."""
    global _stemmer
    if _stemmer is None:
        import Stemmer  # PyStemmer
        _stemmer = Stemmer.Stemmer("porter")
    return [w if len(w) <= _SHORT else _c_departures(w, s) for w, s in zip(words, _stemmer.stemWords(words))]


# no undoubling to add after: a vowel or y, l s z (Lucene keeps them doubled), Snowball's own bb dd ff gg mm nn pp rr tt
_UNDOUBLED = set("aeiouylsz") | set("bdfgmnprt")


def _c_departures(w, s):
    if s[-1:] == "i" and not w.endswith("ie"):
        if s.endswith("logi") and porter_measure(s[:-4]) > 0:
            return s[:-1]
        if s.endswith("bli") and not s.endswith("abli") and porter_measure(s[:-3]) > 0:
            return _stemmer.stemWord(s[:-1] + "e")
    if (len(s) > 1 and s[-1] == s[-2] and s[-1] not in _UNDOUBLED
            and any(w == s + end for end in ("ed", "ing", "eds", "ings"))):   # step 1a took the -s
        return _stemmer.stemWord(s[:-1])
    return s


_POSSESSIVES = ("'s", "\u2019s", "\uff07s")


def analyze(text, analyzer):
    """The token stream Elasticsearch indexes for `text` with the named analyzer."""
    if analyzer not in ("standard", "english"):
        raise ValueError(f"unknown analyzer {analyzer}")
    if text.isascii():  # fast path: lower case first (same tokens, same possessives)
        toks = standard_tokens(text.lower())
    else:
        toks = [java_lower(t) for t in standard_tokens(text)]
    return toks if analyzer == "standard" else english_filters(toks)


def english_filters(toks):
    """The english analyzer after the standard one: EnglishPossessiveFilter ('s, ’s, ＇s; it runs
    before lower case in Lucene, which does not matter here), stop words, Porter."""
    toks = [t[:-2] if t.endswith(_POSSESSIVES) else t for t in toks]
    return porter_stem([t for t in toks if t not in ENGLISH_STOP_WORDS])


# ---------------------------------------------------------------------------------------------
# Lucene's BM25, float for float
# ---------------------------------------------------------------------------------------------

def _long_to_int4(i):
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)  # 3 mantissa bits (top one implicit), shift


def _int4_to_long(i):
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_FREE = 255 - _long_to_int4(2**31 - 1)  # 24: lengths below this are stored exactly


def int_to_byte4(length):
    """SmallFloat.intToByte4: a field length in one byte (exact below 24, then 4 significant bits)."""
    if length < _FREE:
        return length
    return _FREE + _long_to_int4(length - _FREE)


def byte4_to_int(b):
    """SmallFloat.byte4ToInt: the length a stored byte stands for (rounded down)."""
    if b < _FREE:
        return b
    return min(_FREE + _int4_to_long(b - _FREE), 2**31 - 1)


LENGTH_TABLE = np.array([byte4_to_int(i) for i in range(256)], dtype=np.float64)


def idf(doc_freq, doc_count):
    """BM25Similarity.idf: log(1 + (N - n + 0.5) / (n + 0.5)) in double, stored as float."""
    return np.float32(math.log(1 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5)))


def avg_field_length(sum_total_term_freq, doc_count):
    return np.float32(sum_total_term_freq / doc_count)


def norm_inverse(avgdl, k1=K1, b=B):
    """The 256-entry cache 1 / (k1 * (1 - b + b * L / avgdl)) over encoded lengths, in float."""
    k1, b, avgdl = np.float32(k1), np.float32(b), np.float32(avgdl)
    table = LENGTH_TABLE.astype(np.float32)
    return (np.float32(1) / (k1 * ((np.float32(1) - b) + b * table / avgdl))).astype(np.float32)


def term_score(weight, tf, norm_inv):
    """BM25Scorer.score: w - w / (1 + tf * normInverse), computed in double, returned as float.
    Equal to w * tf / (tf + k1 * (1 - b + b * L / avgdl)). Works on numpy arrays too."""
    w = np.float64(np.float32(weight))
    return (w - w / (1.0 + np.asarray(tf, np.float32).astype(np.float64) *
                     np.asarray(norm_inv, np.float32).astype(np.float64))).astype(np.float32)


def field_score(tfs, length, doc_freqs, doc_count, sum_total_term_freq, k1=K1, b=B):
    """One field's score for one passage: the sum over query tokens (tf, df per token) of term_score
    with the passage's encoded length (a scalar check of the vectorised search below)."""
    ninv = norm_inverse(avg_field_length(sum_total_term_freq, doc_count), k1, b)[int_to_byte4(length)]
    total = sum(float(term_score(idf(df, doc_count), tf, ninv)) for tf, df in zip(tfs, doc_freqs) if tf)
    return np.float32(total)


def best_fields(scores, tie_breaker=TIE_BREAKER):
    """DisjunctionMaxQuery: the best field's score + tie_breaker x the sum of the others' scores."""
    scores = [np.float32(s) for s in scores]
    best = max(scores)
    return np.float32(best + (sum(float(s) for s in scores) - float(best)) * float(np.float32(tie_breaker)))


def _rank(scores, k):
    """Indices of the k best positive scores, best first, ties in corpus order."""
    pos = np.flatnonzero(scores > 0)
    if k <= 0 or not len(pos):
        return []
    order = np.lexsort((pos, -scores[pos].astype(np.float64)))[:k]
    return pos[order].tolist()


# ---------------------------------------------------------------------------------------------
# Local (in-memory) backend
# ---------------------------------------------------------------------------------------------

class _Field:
    """Postings of one field: term -> (passage indices, term frequencies), encoded lengths, totals."""

    def __init__(self, token_lists, k1, b):
        postings = {}
        for i, toks in enumerate(token_lists):
            counts = {}
            for t in toks:
                counts[t] = counts.get(t, 0) + 1
            for t, c in counts.items():
                postings.setdefault(t, ([], []))
                postings[t][0].append(i)
                postings[t][1].append(c)
        self.postings = {t: (np.array(d, np.int64), np.array(f, np.float32)) for t, (d, f) in postings.items()}
        lengths = np.array([len(t) for t in token_lists], np.int64)
        self.doc_count = int((lengths > 0).sum())  # Lucene counts passages with >= 1 token
        self.total = int(lengths.sum())
        self.size = len(token_lists)
        if self.doc_count:
            cache = norm_inverse(avg_field_length(self.total, self.doc_count), k1, b)
            self.ninv = cache[[int_to_byte4(int(n)) for n in lengths]]

    def scores(self, terms):
        """Sum of Lucene term scores over the query tokens, per passage (float32)."""
        acc = np.zeros(self.size, np.float64)
        for t in terms:
            if t not in self.postings:
                continue
            docs, tfs = self.postings[t]
            acc[docs] += term_score(idf(len(docs), self.doc_count), tfs, self.ninv[docs])
        return acc.astype(np.float32)


def combine(field_scores, tie_breaker):
    """best_fields over per-field score vectors (float32 in, float32 out); one field: itself."""
    if len(field_scores) == 1:
        return field_scores[0]
    stack = np.stack(field_scores)
    best = stack.max(axis=0)
    rest = stack.astype(np.float64).sum(axis=0) - best.astype(np.float64)
    return (best.astype(np.float64) + rest * float(np.float32(tie_breaker))).astype(np.float32)


class LocalBM25:
    """The whole corpus in memory, scored as Elasticsearch scores the preset's index."""

    def __init__(self, passages, preset="seakr", k1=K1, b=B):
        self.preset = get_preset(preset)
        self.passages = list(passages)
        self.fields = [_Field([analyze(p.get(key, ""), self.preset.analyzer) for p in self.passages], k1, b)
                       for _, key in self.preset.fields]

    def scores(self, query):
        """The final score of every passage for `query` (float32 array)."""
        terms = analyze(query, self.preset.analyzer)
        return combine([f.scores(terms) for f in self.fields], self.preset.tie_breaker)

    def search(self, query, k):
        """The top `k` passages: copies with an added float "score", best first, ties in corpus
        order; only passages sharing a token with the query; [] for a stop-words-only query."""
        if not self.passages or k <= 0:
            return []
        scores = self.scores(query)
        return [{**self.passages[i], "score": float(scores[i])} for i in _rank(scores, k)]


# ---------------------------------------------------------------------------------------------
# Corpus files, streamed
# ---------------------------------------------------------------------------------------------

CORPUS_FORMATS = ("DPR psgs_w100.tsv (id, text, title), JSONL {id, title, text} "
                  "or FlashRAG JSONL {id, contents}")


def iter_passages(path):
    """Passages {"id", "title", "text"} of a corpus file, one at a time (see load_corpus)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a directory without an index (no {META}); build one with "
                         f"`python retrieval.py build CORPUS {path}` or pass a corpus file")
    if not path.is_file():
        raise InputError(f"{path}: no such corpus file or index directory; give a corpus file, an index "
                         "directory built by `python retrieval.py build` or es://HOST:PORT/INDEX (the methods' "
                         "--corpus also takes demo or contexts)")
    with open(path, encoding="utf-8-sig", newline="") as f:
        head = f.read(4096)
        f.seek(0)
        if path.suffix.lower() == ".tsv":
            yield from _read_dpr_tsv(f, path)
        elif head.lstrip()[:1] == "{" or not head.strip():
            yield from _read_jsonl_corpus(f, path)
        else:
            raise InputError(f"{path}: unrecognised corpus format (neither .tsv nor JSON lines); "
                             f"expected {CORPUS_FORMATS}")


def load_corpus(path):
    """Read a passage corpus into a list of {"id", "title", "text"}, in file order.

    Formats, told apart by the extension (.tsv) or by the keys of the first JSON line:
    - DPR `psgs_w100.tsv`: tab-separated id, text, title with a header line; csv quoting.
    - JSONL {id, title, text} (the demo corpus, and DPR's passages converted to JSONL).
    - FlashRAG JSONL {id, contents: "\\"Title\\"\\ntext"} (its wiki-18 corpus is DPR's psgs_w100).
    Everything is held in memory: fine up to a few hundred thousand passages; for all of Wikipedia
    build an on-disk index once (`python retrieval.py build CORPUS INDEX_DIR`) or use es://.
    """
    passages = list(iter_passages(path))
    if not passages:
        raise InputError(f"{path} holds no passages; pass --corpus with a non-empty corpus file")
    seen = set()    # the methods tell passages apart by id (SeaKR reads only hits it has not read)
    if (dup := next((p["id"] for p in passages if p["id"] in seen or seen.add(p["id"])), None)) is not None:
        raise InputError(f"{path}: passage id {dup} occurs twice; give every passage its own id")
    return passages


def _read_dpr_tsv(f, path):
    reader = csv.reader(f, delimiter="\t")  # DPR quotes texts that hold quotes: "a ""b"" c"
    for row in reader:
        if not row or (reader.line_num == 1 and row[0] == "id"):
            continue
        if len(row) != 3:
            raise InputError(f"{path}:{reader.line_num}: expected 3 tab-separated columns "
                             f"(id, text, title), got {len(row)}; fix or remove that line")
        pid, text, title = row
        yield {"id": pid, "title": title, "text": text}


def _read_jsonl_corpus(f, path):
    flashrag, n = None, 0
    for lineno, row in jsonl_rows(f, path):
        if flashrag is None:  # the first line decides the format of the file
            if "contents" not in row and "text" not in row:
                raise InputError(f"{path}:{lineno}: unrecognised corpus format (keys "
                                 f"{sorted(row)}); "
                                 "expected JSONL {id, title, text}, FlashRAG JSONL {id, contents} "
                                 "or DPR psgs_w100.tsv (id, text, title)")
            flashrag = "contents" in row
        try:
            if flashrag:
                title, _, text = row["contents"].partition("\n")
                title = title.strip()
                if len(title) >= 2 and title[0] == title[-1] == '"':
                    title = title[1:-1]  # subtle: strip one pair only; titles may hold quotes
            else:
                title, text = row.get("title", ""), row["text"]
        except (KeyError, AttributeError) as e:
            raise InputError(f"{path}:{lineno}: passage lacks field {e} used by the first line; "
                             "fix or remove that line") from None
        if not isinstance(title, str) or not isinstance(text, str):
            raise InputError(f"{path}:{lineno}: a passage's title and text must be strings (title "
                             f"{type(title).__name__}, text {type(text).__name__}); fix or remove that line")
        yield {"id": str(row.get("id", n)), "title": title, "text": text}
        n += 1


def contexts_corpus(records):
    """The corpus pooled from the questions' own context paragraphs (the distractor setting of HotpotQA's
    and 2Wiki's files; FlashRAG's MuSiQue file holds the supporting paragraphs alone, its HotpotQA file often
    lacks them), deduplicated on (title, text) in first-seen order, with ids "ctx-0", "ctx-1", ..."""
    pooled = {}
    for record in records:
        for c in record.get("contexts", []):
            key = (c["title"], c["text"])
            if key not in pooled:
                pooled[key] = {"id": f"ctx-{len(pooled)}", "title": c["title"], "text": c["text"]}
    return list(pooled.values())


def jsonl_rows(lines, path):
    """(line number, object) for every non-blank line; InputError naming file:line otherwise."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{lineno}: malformed JSON line ({e.msg}); fix or remove "
                             "that line") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{lineno}: expected a JSON object on each line; fix or "
                             "remove that line")
        yield lineno, row


# ---------------------------------------------------------------------------------------------
# On-disk index (tantivy)
# ---------------------------------------------------------------------------------------------

META = "retrieval_meta.json"
COMMIT_EVERY = 50_000    # passages between commits: a restart loses at most this many


def _field_name(preset, field):
    return f"{preset}_{field}"


def _schema(presets):
    import tantivy
    sb = tantivy.SchemaBuilder()
    sb.add_bytes_field("src", stored=True, indexed=False)  # the passage as JSON, shown to the model
    sb.add_unsigned_field("seq", stored=True)  # position in the corpus file: ties go to the earlier
    for name in presets:
        for field, _ in PRESETS[name].fields:
            # pre-analysed tokens joined by spaces; frequencies, no positions (BM25 needs no more)
            sb.add_text_field(_field_name(name, field), tokenizer_name="whitespace", index_option="freq")
    return sb.build()


def _read_meta(index_dir):
    p = Path(index_dir) / META
    return json.loads(p.read_text()) if p.exists() else None


def _write_meta(index_dir, meta):
    p = Path(index_dir) / META
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, p)  # atomic: a crash leaves the old or the new file, never half of one


def _analyse(item):
    """The token lists of one passage for the index fields [(preset, field, passage key)]."""
    p, fields = item
    standard, out = {}, []  # subtle: english = standard + filters: tokenise each text once
    for name, _, key in fields:
        if key not in standard:
            standard[key] = analyze(p.get(key, ""), "standard")
        out.append(standard[key] if PRESETS[name].analyzer == "standard" else english_filters(standard[key]))
    return out


BATCH = 2_000            # passages read and analysed at a time


def build_index(corpus, index_dir, presets=("seakr", "ctrla"), heap_mb=256, commit_every=COMMIT_EVERY,
                progress=True, workers=1):
    """Index a corpus file into index_dir, streaming; restartable: a second call resumes after the
    last commit. meta holds the per-field totals (tokens, passages with the field) Lucene's BM25
    needs, as of the last commit ("pending" is written before a commit, "done" after it, so a crash
    between the two is told apart by tantivy's own document count). workers > 1 analyses in that
    many processes (the analysis, not tantivy, is what takes the time)."""
    import tantivy
    from tqdm import tqdm
    presets = tuple(presets)
    for name in presets:
        get_preset(name)
    if not Path(corpus).is_file():
        next(iter_passages(corpus))     # its one-line error, before the index directory or progress bar appear
    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    meta = _read_meta(index_dir)
    fields = [(name, f, key) for name in presets for f, key in PRESETS[name].fields]
    if meta is None:
        meta = {"version": 1, "corpus": str(corpus), "presets": list(presets), "k1": K1, "b": B,
                "done": {"passages": 0, "fields": {_field_name(n, f): [0, 0] for n, f, _ in fields}},
                "pending": None, "complete": False}
    elif meta["presets"] != list(presets):
        raise InputError(f"{index_dir} holds an index for presets {meta['presets']}; delete it or "
                         f"build into another directory")
    index = tantivy.Index(_schema(presets), path=str(index_dir), reuse=True)
    index.reload()
    have = index.searcher().num_docs
    if meta["pending"] and meta["pending"]["passages"] == have:
        meta["done"] = meta["pending"]  # the commit went through before the meta update
    if meta["done"]["passages"] != have:
        raise InputError(f"{index_dir}: index holds {have} passages but its {META} says "
                         f"{meta['done']['passages']}; delete the directory and build again")
    meta["pending"] = None
    if meta["complete"]:
        return meta
    writer = index.writer(heap_size=heap_mb * 2**20, num_threads=1)
    state = {"passages": have, "fields": {k: list(v) for k, v in meta["done"]["fields"].items()}}
    bar = tqdm(desc="indexing", unit=" passages", initial=have, disable=not progress, mininterval=2)

    def commit():
        meta["pending"] = {"passages": state["passages"], "fields": {k: list(v) for k, v in state["fields"].items()}}
        _write_meta(index_dir, meta)
        writer.commit()
        meta["done"], meta["pending"] = meta["pending"], None
        _write_meta(index_dir, meta)

    import itertools
    pool = None
    if workers > 1:
        import multiprocessing
        pool = multiprocessing.Pool(workers)
    rest = itertools.islice(iter_passages(corpus), have, None)  # resume: skip what is indexed
    try:
        while batch := list(itertools.islice(rest, BATCH)):  # bounded memory: one batch at a time
            analysed = (pool.map(_analyse, [(p, fields) for p in batch], chunksize=64) if pool
                        else [_analyse((p, fields)) for p in batch])
            for p, token_lists in zip(batch, analysed):
                doc = tantivy.Document()
                doc.add_bytes("src", json.dumps(p, ensure_ascii=False).encode())
                doc.add_unsigned("seq", state["passages"])
                for (name, f, _), toks in zip(fields, token_lists):
                    doc.add_text(_field_name(name, f), " ".join(toks))
                    tot = state["fields"][_field_name(name, f)]
                    tot[0] += len(toks)
                    tot[1] += bool(toks)
                writer.add_document(doc)
                state["passages"] += 1
                if state["passages"] % commit_every == 0:
                    commit()
            bar.update(len(batch))
    finally:
        if pool:
            pool.terminate()
    commit()
    writer.wait_merging_threads()
    bar.close()
    meta["complete"] = True
    _write_meta(index_dir, meta)
    return meta


class IndexBM25:
    """An index built by build_index, opened by path; the top k exact (see the module docstring)."""

    FIRST_M = 5         # candidates in the first round (at least k); measured on the DPR sample:
                        # one round for all 300 queries, 1.9 ms a query (20: 7.1 ms)
    MAX_M = 10_000      # stop doubling here (then the top k is the best among the candidates)

    def __init__(self, index_dir, preset="seakr"):
        import tantivy
        self.preset, self.name = get_preset(preset), preset
        meta = _read_meta(index_dir)
        if meta is None:
            raise InputError(f"{index_dir}: not an index (no {META}); build it with "
                             f"`python retrieval.py build CORPUS {index_dir}`")
        if preset not in meta["presets"]:
            raise InputError(f"{index_dir} has no fields for preset '{preset}' (built for "
                             f"{meta['presets']}); rebuild it with --presets {','.join(meta['presets'] + [preset])}")
        if not meta["complete"]:
            raise InputError(f"{index_dir}: the build did not finish; run the same "
                             "`python retrieval.py build` command again to resume it")
        self.index = tantivy.Index.open(str(index_dir))
        self.searcher = self.index.searcher()
        self.n_passages = meta["done"]["passages"]
        self.k1, self.b = meta["k1"], meta["b"]
        self.stats = {f: meta["done"]["fields"][_field_name(preset, f)] for f, _ in self.preset.fields}

    def _candidates(self, terms, m):
        """tantivy's top m for the preset's query: one disjunction of the query's tokens per field,
        combined by tantivy's own DisjunctionMaxQuery with the preset's tie breaker."""
        import tantivy
        per_field = [tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(
            self.index.schema, _field_name(self.name, f), t)) for t in terms]) for f, _ in self.preset.fields]
        q = per_field[0] if len(per_field) == 1 else tantivy.Query.disjunction_max_query(
            per_field, self.preset.tie_breaker)
        return self.searcher.search(q, m).hits

    def _exact(self, passage, terms, dfs):
        scores = []
        for field, key in self.preset.fields:
            total, docs = self.stats[field]
            toks = analyze(passage.get(key, ""), self.preset.analyzer)
            counts = {}
            for t in toks:
                counts[t] = counts.get(t, 0) + 1
            tfs = [counts.get(t, 0) for t in terms]
            scores.append(field_score(tfs, len(toks), [dfs[field][t] for t in terms], docs, total,
                                      self.k1, self.b) if docs and any(tfs) else np.float32(0))
        return scores

    def search(self, query, k):
        terms = analyze(query, self.preset.analyzer)
        if not terms or k <= 0:
            return []
        dfs = {f: {t: self.searcher.doc_freq(_field_name(self.name, f), t) for t in set(terms)}
               for f, _ in self.preset.fields}
        m, cache, seen = max(self.FIRST_M, k), {}, set()
        while True:
            hits = self._candidates(terms, m)
            for _, addr in hits:
                if (addr.segment_ord, addr.doc) not in seen:
                    seen.add((addr.segment_ord, addr.doc))
                    doc = self.searcher.doc(addr)
                    p = json.loads(bytes(doc["src"][0]).decode())
                    cache[int(doc["seq"][0])] = (p, self._exact(p, terms, dfs))
            # Threshold: tantivy's score is Lucene's x (k1 + 1) up to float rounding (same IDF,
            # same length table, same best_fields), so a passage it ranked below the m-th scores
            # at most the m-th's score / (k1 + 1) in Lucene; once the k-th exact score beats that
            # beyond float rounding, the top k is exact. Beats, not reaches: Lucene breaks a tie by
            # document number, and tantivy's document order stops being corpus order once its segments
            # merge, so a passage left out that ties the k-th must be fetched too. (tantivy's avgdl counts
            # passages without the field, Lucene's does not: the two differ only where a field is empty
            # after analysis, e.g. a title of stop words.)
            if len(hits) < m or m >= self.MAX_M:
                break
            bound = float(hits[-1][0]) / (1 + self.k1)
            finals = sorted((float(self._final(sc)) for _, sc in cache.values()), reverse=True)
            if len(finals) >= k and finals[k - 1] > bound * (1 + 1e-5):
                break
            m *= 2
        ranked = sorted(cache.items(), key=lambda kv: (-float(self._final(kv[1][1])), kv[0]))
        out = []
        for _, (p, s) in ranked[:k]:
            score = float(self._final(s))
            if score > 0:
                out.append({**p, "score": score})
        return out

    def _final(self, scores):
        return scores[0] if len(scores) == 1 else best_fields(scores, self.preset.tie_breaker)


# ---------------------------------------------------------------------------------------------
# Elasticsearch
# ---------------------------------------------------------------------------------------------

def es_query(preset, query, k):
    """The official request body (and search type) for a preset."""
    p = get_preset(preset)
    if p.tie_breaker is None:  # CtrlA es_service.py: es.search(query={'match': {'text': {'query': q}}}, size=k)
        return {"query": {"match": {p.fields[0][0]: {"query": query}}}, "size": k}, None
    # SeaKR/DRAGIN retriever.py (BEIR): msearch with search_type dfs_query_then_fetch
    return ({"_source": True,
             "query": {"multi_match": {"query": query, "type": "best_fields",
                                       "fields": [f for f, _ in p.fields], "tie_breaker": p.tie_breaker}},
             "size": k}, "dfs_query_then_fetch")


class ElasticRetriever:
    """An existing Elasticsearch / OpenSearch index over plain HTTP: es://host:port/index, or
    es+https://host:port/index. Credentials: ES_API_KEY, else ES_USERNAME and ES_PASSWORD."""

    def __init__(self, url, preset="seakr", timeout=30.0, retries=3):
        self.preset, self.name = get_preset(preset), preset
        parsed = urllib.parse.urlparse(url)
        scheme = "https" if parsed.scheme == "es+https" else "http"
        index = parsed.path.strip("/")
        if parsed.scheme not in ("es", "es+https") or not parsed.hostname or not index or "/" in index:
            raise InputError(f"{url}: expected es://HOST:PORT/INDEX (or es+https://...)")
        self.url, self.index = url, index
        self.base = f"{scheme}://{parsed.hostname}:{parsed.port or 9200}"
        self.timeout, self.retries = timeout, retries
        self.headers = {"Content-Type": "application/json"}
        if os.environ.get("ES_API_KEY"):
            self.headers["Authorization"] = "ApiKey " + os.environ["ES_API_KEY"]
        elif os.environ.get("ES_USERNAME"):
            cred = f"{os.environ['ES_USERNAME']}:{os.environ.get('ES_PASSWORD', '')}".encode()
            self.headers["Authorization"] = "Basic " + base64.b64encode(cred).decode()
        self._check_mapping()

    def _request(self, method, path, body=None):
        """JSON in, JSON out; retries connection failures and 5xx with backoff; InputError otherwise."""
        data = None if body is None else json.dumps(body).encode()
        last = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.base + path, data=data, method=method, headers=self.headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    return json.loads(r.read().decode())
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    raise InputError(f"{self.url}: no index '{self.index}' on {self.base}; build it with the "
                                     "official indexing script or fix the index name in --corpus") from None
                if e.code in (401, 403):
                    raise InputError(f"{self.url}: access denied ({e.code}); set ES_API_KEY or "
                                     "ES_USERNAME and ES_PASSWORD") from None
                if e.code < 500 and e.code not in (408, 429):      # a timeout or too many requests: retried
                    raise InputError(f"{self.url}: Elasticsearch answered {e.code} "
                                     f"{e.read()[:200].decode(errors='replace')}") from None
                last = f"HTTP {e.code}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                last = getattr(e, "reason", e)
            if attempt < self.retries:
                time.sleep(0.2 * 2 ** attempt)
        raise Unavailable(f"cannot reach Elasticsearch at {self.base} ({last}); start it (then the same command "
                          "resumes) or fix --corpus es://HOST:PORT/INDEX")

    def _check_mapping(self):
        resp = self._request("GET", f"/{urllib.parse.quote(self.index)}/_mapping")
        props = {}
        for idx in resp.values():  # one entry per concrete index (an alias may name several)
            m = idx.get("mappings", {})
            if "properties" not in m and len(m) == 1:  # ES 6: one mapping type level more
                m = next(iter(m.values()))
            props.update(m.get("properties", {}))
        missing = [f for f, _ in self.preset.fields if props.get(f, {}).get("type") != "text"]
        if missing:
            raise InputError(f"{self.url}: index lacks text field(s) {missing} that preset '{self.name}' "
                             f"queries (has {sorted(props)}); use the preset the index was built for")
        for f, _ in self.preset.fields:  # a different analyzer still works, but scores differ from the paper's
            got = props[f].get("analyzer", "standard")
            if got != self.preset.analyzer:
                print(f"warning: {self.url}: field '{f}' uses the '{got}' analyzer, the official "
                      f"'{self.name}' index uses '{self.preset.analyzer}'", file=sys.stderr)

    def search(self, query, k):
        if k <= 0:
            return []
        body, search_type = es_query(self.name, query, k)
        path = f"/{urllib.parse.quote(self.index)}/_search"
        if search_type:
            path += f"?search_type={search_type}"
        hits = self._request("POST", path, body).get("hits", {}).get("hits", [])
        out = []
        for h in hits:
            src = h.get("_source", {})
            text = src.get(self.preset.shown, src.get("text", ""))
            out.append({"id": str(h["_id"]), "title": src.get("title", ""), "text": text,
                        "score": float(h["_score"])})
        return out


# ---------------------------------------------------------------------------------------------
# One entry point
# ---------------------------------------------------------------------------------------------

def open_retriever(spec, preset="seakr"):
    """A passage list, a corpus file, an index directory or an es:// URL -> an object with search()."""
    get_preset(preset)
    if isinstance(spec, (list, tuple)):
        return LocalBM25(spec, preset)
    spec = str(spec)
    if spec.startswith(("es://", "es+https://")):
        return ElasticRetriever(spec, preset)
    path = Path(spec)
    if path.is_dir():
        return IndexBM25(path, preset)
    return LocalBM25(load_corpus(path), preset)


DEMO_CORPUS = Path(__file__).parent / "data" / "corpus.jsonl"   # `demo`, as the methods' --corpus demo


def main(argv=None):
    ap = argparse.ArgumentParser(description="Build an on-disk BM25 index of a passage corpus "
                                             "(then pass its directory as --corpus).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="index CORPUS into INDEX_DIR (resumes an interrupted build)")
    b.add_argument("corpus", help=CORPUS_FORMATS)
    b.add_argument("index_dir")
    b.add_argument("--presets", default="seakr,ctrla", help="analyzers/fields to index (default: both)")
    b.add_argument("--heap-mb", type=int, default=256, help="tantivy writer memory budget")
    b.add_argument("--workers", type=int, default=1, help="processes that analyse text (default 1)")
    s = sub.add_parser("search", help="query an index, a corpus file or es:// URL")
    s.add_argument("spec", help="demo (the demo corpus in data/), a corpus file, an index directory or es://HOST:PORT/INDEX")
    s.add_argument("query")
    s.add_argument("--preset", default="seakr")
    s.add_argument("-k", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            meta = build_index(args.corpus, args.index_dir, args.presets.split(","), args.heap_mb,
                               workers=args.workers)
            print(f"{meta['done']['passages']} passages indexed in {args.index_dir}")
        else:
            spec = DEMO_CORPUS if args.spec == "demo" else args.spec
            for h in open_retriever(spec, args.preset).search(args.query, args.k):
                print(f"{h['score']:.4f}\t{h['id']}\t{h['title']}\t{h['text'][:100]}")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)     # one line and exit code 2, as every command of the project
        sys.exit(2)


if __name__ == "__main__":
    main()
