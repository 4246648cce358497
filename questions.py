"""The question sets: load_dataset() reads the shipped demo sets and the native formats of the papers'
datasets (HotpotQA, 2WikiMultihopQA, MuSiQue, IIRC, NQ-open, DPR QA, SQuAD, PopQA, TriviaQA, FreshQA,
Bio, TruthfulQA, StrategyQA), told apart by their content, into one record shape; fetch() (`make data`,
`python questions.py fetch [NAME...]`) downloads the public evaluation files into data/raw/ and checks
each against the sha256 kept here (RAW_FILES). Also the readers of a method's other data files: CtrlA's
statement files (read_statements) and its word lists (word_list).

Plumbing, like common.py (which re-exports load_dataset, DATASETS, DATA_DIR and those readers for the
methods); it imports only retrieval.py (InputError and the JSON-lines reader the corpus files share).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import http.client
import json
import os
import sys
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from functools import cache, partial
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tqdm import tqdm

from retrieval import InputError, jsonl_rows

DATA_DIR = Path(__file__).parent / "data"
DATASETS = {  # demo sets shipped in data/, each in its dataset's native format
    "hotpotqa": "hotpotqa_demo.json",
    "2wikimultihopqa": "2wikimultihopqa_demo.json",
    "nq": "nq_demo.jsonl",
    "triviaqa": "triviaqa_demo.jsonl",
    "popqa": "popqa_demo.jsonl",
    "strategyqa": "strategyqa_demo.json",
    "truthfulqa": "truthfulqa_demo.json",
}
FORMATS = ("HotpotQA official JSON or HF JSONL; 2WikiMultihopQA official JSON; FlashRAG JSONL "
           "(HotpotQA, 2Wiki, MuSiQue, other QA); IRCoT processed JSONL; IIRC JSON; SQuAD JSON; "
           "NQ-open JSONL; DPR QA JSON; CtrlA JSONL (PopQA, TriviaQA, FreshQA, bio); "
           "Rowen JSON (TruthfulQA, StrategyQA, sampled NQ / TriviaQA)")
# Where the content cannot tell (IRCoT files, FlashRAG files without metadata, plain question +
# answers lists), the file's name or its folder's name gives the dataset, e.g. IRCoT's
# processed_data/2wikimultihopqa/dev_subsampled.jsonl or Rowen's sampled_trivia.json.
_NAME_KINDS = (("2wiki", "2wikimultihopqa"), ("musique", "musique"), ("iirc", "iirc"),
               ("hotpot", "hotpotqa"), ("trivia", "triviaqa"), ("popqa", "popqa"),
               ("squad", "squad"))


def load_dataset(name_or_path, limit=None):
    """Load a question set: a name in DATASETS (a demo file in data/) or the path of a data file.

    Every record is {"id": str, "question": str, "answers": [str], "dataset": kind}, plus
    "contexts": [{"title", "text"}] where the file has paragraphs, plus a few fields a method or
    metric needs (e.g. "label" for StrategyQA, "incorrect_answers" for TruthfulQA). The format
    is detected from the file's content (see FORMATS). Ids are the file's own where it has them,
    else "<kind>-<index>"; repeated ids get "-2", "-3", ... so that every id is unique.
    """
    path = _dataset_path(name_or_path)
    rows = _read_json_rows(path)
    fmt, kind, parse = _detect_format(rows[0], path)
    records = []
    for i, row in enumerate(rows):
        if limit is not None and len(records) >= limit:
            break
        try:
            parsed = parse(row, kind)
        except (KeyError, TypeError, AttributeError, IndexError) as e:
            raise InputError(f"{path}: record {i + 1} does not follow the {fmt} format of the "
                             f"first record ({type(e).__name__}: {e}); fix or remove it") from None
        for r in parsed:   # an empty question would be answered from the prompt alone, silently
            if not isinstance(r["question"], str) or not r["question"].strip():
                raise InputError(f"{path}: record {i + 1} has an empty question; fix or remove it")
        records.extend(parsed)
    if not records and limit != 0:   # every record left out (FreshQA's DEV rows): nothing to run, said so
        raise InputError(f"{path}: none of its {len(rows)} records is a question to run"
                         + (" (FreshQA runs its TEST split only, as CtrlA's run.py)" if kind == "freshqa" else ""))
    records = records if limit is None else records[:limit]
    if kind != "bio" and (empty := sum(not r["answers"] for r in records)):   # bio: no gold text, FActScore's
        print(f"warning: {path}: {empty} of {len(records)} questions have no gold answer; every metric scores "
              "them wrong", file=sys.stderr)
    used = set()
    for i, r in enumerate(records):
        base, n = r["id"] or f"{kind}-{i}", 1
        r["id"] = base
        while r["id"] in used:
            n += 1
            r["id"] = f"{base}-{n}"
        used.add(r["id"])
    return records


def _dataset_path(name_or_path):
    if name_or_path in DATASETS:
        path = DATA_DIR / DATASETS[name_or_path]
        if not path.is_file():
            raise InputError(f"{path} not found; restore the project's data/ folder, or pass "
                             "--dataset with the path of a data file")
        return path
    path = Path(name_or_path)
    if not path.is_file():
        raise InputError(f"{name_or_path}: no such dataset or file; pass --dataset with one of "
                         f"{', '.join(DATASETS)} or the path of an existing data file")
    return path


def _read_json_rows(path):
    """The records of a JSON file (a list, or SQuAD's {"version", "data": [...]}) or JSONL file."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") from None
    if not text.strip():
        raise InputError(f"{path} is empty; pass a data file with at least one question")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if text.lstrip().startswith("["):
            raise InputError(f"{path}:{e.lineno}: malformed JSON ({e.msg}); fix the file or "
                             "download it again") from None
        # subtle: split on "\n" only; str.splitlines() also splits on U+2028, valid inside JSON
        return [row for _, row in jsonl_rows(text.split("\n"), path)]
    if isinstance(data, dict):  # a SQuAD file, or a JSONL file with a single line
        data = data["data"] if "version" in data and "data" in data else [data]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(f"{path}: unrecognised format (expected a list of JSON objects or JSONL); "
                         f"supported: {FORMATS}")
    if not data:
        raise InputError(f"{path} holds no records; pass a data file with at least one question")
    return data


def _detect_format(row, path):
    """(format name, dataset kind, parser) for a file whose first record is `row`."""
    keys = set(row)
    if {"_id", "context"} <= keys and "evidences" in keys:
        return "2WikiMultihopQA", "2wikimultihopqa", partial(_from_2wiki, aliases=_aliases(path))
    if {"_id", "context"} <= keys:
        return "HotpotQA", "hotpotqa", _from_hotpot
    if "golden_answers" in keys:
        meta = row.get("metadata") or {}
        context = meta.get("context") or {}
        kind = ("hotpotqa" if "sentences" in context else "2wikimultihopqa" if "content" in context
                else "musique" if "question_decomposition" in meta else _kind_from_name(path, "nq"))
        return "FlashRAG", kind, _from_flashrag
    if "answers_objects" in keys:
        return "IRCoT", _kind_from_name(path, "hotpotqa"), _from_ircot
    if {"title", "questions"} <= keys:
        return "IIRC", "iirc", _from_iirc
    if "paragraphs" in keys:
        return "SQuAD", "squad", _from_squad
    if "Best Answer" in keys:
        return "TruthfulQA", "truthfulqa", _from_truthfulqa
    if "answer_0" in keys:
        return "FreshQA", "freshqa", _from_freshqa
    if {"input", "topic"} <= keys:
        return "bio", "bio", _from_bio
    if "question" in keys and isinstance(row.get("context"), dict):
        return "HotpotQA HF", "hotpotqa", _from_hotpot
    if "question" in keys and (isinstance(row.get("answer"), bool)    # a hand-written file may say "false"
                               or str(row.get("answer")).strip().lower() in ("true", "false")):
        return "StrategyQA", "strategyqa", _from_strategyqa
    if "question" in keys and isinstance(row.get("answer"), list):
        return "NQ-open", "nq", lambda r, kind: [_record(kind, None, r["question"], r["answer"])]
    if {"question", "answers"} <= keys and keys & {"ctxs", "positive_ctxs"}:
        return "DPR QA", _kind_from_name(path, "nq"), _from_dpr
    if {"prop", "s_wiki_title"} & keys and {"question", "answers"} <= keys:
        return "PopQA", "popqa", _from_qa
    if {"question", "answers"} <= keys:  # CtrlA's TriviaQA has ids; Rowen's samples have none
        default = "triviaqa" if "question_id" in keys else "nq"
        return "question + answers", _kind_from_name(path, default), _from_qa
    raise InputError(f"{path}: unrecognised format (first record has keys {sorted(keys)[:10]}); "
                     f"supported: {FORMATS}")


def _kind_from_name(path, default):
    name = "/".join(path.parts[-2:]).lower()  # the folder counts: IRCoT names files dev_subsampled
    return next((kind for part, kind in _NAME_KINDS if part in name), default)


def _record(kind, qid, question, answers, contexts=None, **extra):
    """One question record; answers become stripped, non-empty, de-duplicated strings. Divergence: the
    question is stripped of surrounding whitespace, where each method's official code takes it as its file
    has it (2 of HotpotQA dev's first 50 questions end in a space: SeaKR's official prompt reads
    "? \nAnswer:" there, ours "?\nAnswer:")."""
    answers = [answers] if isinstance(answers, str) else answers  # a lone answer, not a list
    answers = answers["text"] if isinstance(answers, dict) and "text" in answers else answers   # HF SQuAD's
    if not isinstance(answers, (list, tuple)) or any(isinstance(a, (dict, list)) for a in answers):
        raise TypeError(f"its answers {str(answers)[:60]} are not a list of answer texts")
    answers = dict.fromkeys(s for s in (str(a).strip() for a in answers if a is not None) if s)
    record = {"id": None if qid is None else str(qid), "question": str(question).strip(),
              "answers": list(answers), "dataset": kind}
    if contexts is not None:
        record["contexts"] = contexts
    return {**record, **extra}


def _paragraphs(titles, sentence_lists, sep):
    return [{"title": t, "text": sep.join(s).strip()} for t, s in zip(titles, sentence_lists)]


def _pick(row, *keys):
    return {k: row[k] for k in keys if k in row}


def _from_hotpot(row, kind):
    """HotpotQA official {_id, context: [[title, [sentences]]]} or HF {id, context: {title,
    sentences}}; official sentences carry their leading space, so they join with ""."""
    ctx = row["context"]
    if isinstance(ctx, dict):
        titles, sentences = ctx["title"], ctx["sentences"]
    else:
        titles, sentences = [c[0] for c in ctx], [c[1] for c in ctx]
    return [_record(kind, row.get("_id", row.get("id")), row["question"], [row["answer"]],
                    _paragraphs(titles, sentences, ""), **_pick(row, "type", "level"))]


def _aliases(path):
    """Answer aliases from 2WikiMultihopQA's id_aliases.json beside the data file, if any:
    JSONL {Q_id, aliases, demonyms}, keyed by a record's answer_id. Demonyms are not used."""
    alias_path = path.parent / "id_aliases.json"
    if not alias_path.is_file():
        return {}
    with open(alias_path, encoding="utf-8-sig") as f:
        return {r["Q_id"]: r.get("aliases", []) for _, r in jsonl_rows(f, alias_path)}


def _from_2wiki(row, kind, aliases):
    """2WikiMultihopQA official dev JSON (or a context {title, sentences}, as HF's HotpotQA); its sentences
    have no leading space, so join with " "."""
    ctx = row["context"]
    titles, sentences = ((ctx["title"], ctx["sentences"]) if isinstance(ctx, dict)
                         else ([c[0] for c in ctx], [c[1] for c in ctx]))
    answers = [row["answer"]] + aliases.get(row.get("answer_id"), [])
    return [_record(kind, row["_id"], row["question"], answers, _paragraphs(titles, sentences, " "),
                    answer=row["answer"], **_pick(row, "type"))]


def _from_flashrag(row, kind):
    """FlashRAG JSONL {id, question, golden_answers, metadata}; golden_answers already hold the
    aliases. Paragraphs from metadata.context (HotpotQA: sentences; 2Wiki: content) or from the
    MuSiQue decomposition's support paragraphs (FlashRAG keeps only the supporting ones)."""
    meta = row.get("metadata") or {}
    ctx = meta.get("context") or {}
    contexts, extra = None, {}
    if "sentences" in ctx:
        contexts = _paragraphs(ctx["title"], ctx["sentences"], "")
        # subtle: FlashRAG's HotpotQA contexts are not all the distractor setting's: in hotpotqa_dev_200.jsonl
        # the supporting facts' titles are all there for 53 of 200 questions, none of them for 35
        facts = meta.get("supporting_facts")
        if isinstance(facts, dict) and (gold := facts.get("title")):
            extra["gold_in_contexts"] = set(gold) <= set(ctx["title"])
    elif "content" in ctx:
        contexts = _paragraphs(ctx["title"], ctx["content"], " ")
    elif "question_decomposition" in meta:
        support = [s["support_paragraph"] for s in meta["question_decomposition"]
                   if "support_paragraph" in s]
        unique = dict.fromkeys((p["title"], p["paragraph_text"]) for p in support)
        contexts = [{"title": t, "text": x} for t, x in unique]
        extra["supporting_only"] = True     # no distractor among them: --corpus contexts pools the gold alone
    return [_record(kind, row.get("id"), row["question"], row["golden_answers"], contexts,
                    **_pick(meta, "type", "level"), **extra)]


def _from_ircot(row, kind):
    """IRCoT processed_data JSONL. Answers are the spans and non-empty numbers; date answers
    (day / month / year) are not converted, since no file here uses them. The contexts begin with
    the "pinned_contexts": IIRC's main passage, which IRCoT's IIRC file keeps there alone (its
    process_iirc.py leaves it out of "contexts"; IRCoT adds it to every retrieval)."""
    objects = row["answers_objects"]
    answers = [s for a in objects for s in a.get("spans", [])]
    answers += [a["number"] for a in objects if a.get("number")]
    pairs = dict.fromkeys((c["title"], c["paragraph_text"].strip())
                          for c in (row.get("pinned_contexts") or []) + (row.get("contexts") or []))
    contexts = [{"title": t, "text": x} for t, x in pairs]
    return [_record(kind, row["question_id"], row["question_text"], answers, contexts)]


def _from_iirc(article, kind):
    """IIRC dev JSON: one row per article, holding its questions. Unanswerable ("none") questions
    are skipped; a context's passage "main" is the article itself."""
    records = []
    for q in article["questions"]:
        answer = q["answer"]
        if answer["type"] == "none":
            continue
        answers = ([s["text"] for s in answer["answer_spans"]] if answer["type"] == "span"
                   else [answer["answer_value"]])
        contexts = [{"title": article["title"] if c["passage"] == "main" else c["passage"],
                     "text": c["text"]} for c in q.get("context", [])]
        records.append(_record(kind, q.get("qid"), q["question"], answers, contexts))
    return records


def _from_squad(article, kind):
    """SQuAD v1.1 / v2.0 JSON: one row per article; unanswerable v2.0 questions are skipped."""
    return [_record(kind, qa["id"], qa["question"], [a["text"] for a in qa["answers"]],
                    [{"title": article["title"], "text": p["context"]}])
            for p in article["paragraphs"] for qa in p["qas"] if qa.get("answers")]


def _from_dpr(row, kind):
    """DPR's QA JSON: retriever output {question, answers, ctxs} or training {positive_ctxs}."""
    ctxs = row.get("ctxs", row.get("positive_ctxs", []))
    contexts = [{"title": c.get("title", ""), "text": c["text"]} for c in ctxs]
    return [_record(kind, row.get("id"), row["question"], row["answers"], contexts)]


def _from_qa(row, kind):
    """CtrlA's PopQA / TriviaQA JSONL and Rowen's sampled_nq / sampled_trivia JSON. The id is the file's
    `id` (PopQA's Wikidata-based 4382392, TriviaQA's "qw_2021"); CtrlA's run.py keys its results on
    `question_id` (PopQA's 0, 1, ...), so our rows join its results.json by question, not by id."""
    return [_record(kind, row.get("id"), row["question"], row["answers"],
                    **_pick(row, "prop", "s_wiki_title", "pop"))]


def _from_freshqa(row, kind):
    """CtrlA's FreshQA JSONL: the acceptable answers are the non-empty answer_0 .. answer_9; the TEST split
    only (500 of FreshQA_v04082024's 600 rows), as the official run.py keeps for the paper's results."""
    if row.get("split", "TEST") != "TEST":
        return []
    answers = [row.get(f"answer_{i}") for i in range(10)]
    return [_record(kind, row.get("id"), row["question"], answers,
                    **_pick(row, "false_premise", "split", "fact_type", "num_hops"))]


def _from_bio(row, kind):
    """CtrlA's bio_gen JSONL (FActScore prompts); the answer is the person, kept as "topic"."""
    return [_record(kind, row.get("question_id"), row["question"], row["answers"],
                    topic=row["topic"])]


def _from_truthfulqa(row, kind):
    """Rowen's TruthfulQA JSON; answers are the ";"-separated correct answers, best included (a few end in
    ";" with no space after it: "America;")."""
    split = lambda s: [a.strip() for a in s.split(";") if a.strip()]
    best = row["Best Answer"].strip()
    correct = split(row["Correct Answers"])
    correct = correct if best in correct else [best] + correct
    return [_record(kind, None, row["Question"], correct, best_answer=best, correct_answers=correct,
                    correct_answers_text=row["Correct Answers"], incorrect_answers=split(row["Incorrect Answers"]),
                    category=row.get("Category"))]


_LABELS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _from_strategyqa(row, kind):
    """StrategyQA (Rowen's sample {question, answer: bool, target}; the official file adds qid)."""
    label = row["answer"]     # a boolean; a file written by hand may say "false", which Python's truth reads as yes
    label = _LABELS.get(label.strip().lower(), label) if isinstance(label, str) else label
    if label not in (True, False):
        raise TypeError(f"its answer {label!r} is neither true nor false")
    label = bool(label)
    return [_record(kind, row.get("qid"), row["question"], ["yes" if label else "no"], label=label,
                    **_pick(row, "target"))]


# ---------------------------------------------------------------------------------------------
# Other data files a method reads: statement files (CSV), word lists, JSON; and FreshQA's date
# ---------------------------------------------------------------------------------------------

def label_is_one(value) -> bool:
    """The official CtrlA notebooks keep df[df["label"] == 1] (pandas): "1", "1.0" and "True" are 1."""
    value = str(value).strip()
    try:
        return float(value) == 1
    except ValueError:
        return value.lower() == "true"


def read_statements(path) -> list[dict]:
    """The label-1 rows of a CSV with columns statement,label[,topic,style] (CtrlA's probes use only those):
    ours in data/, or the official eval_data/facts_true_false.csv / confidence_train.csv (statement,label)."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            if "statement" not in (reader.fieldnames or []):
                raise KeyError("no 'statement' column")
            rows = [r for r in reader if label_is_one(r.get("label", "1"))]
        assert all(r["statement"] and r["statement"].strip() for r in rows), "an empty statement"
    except (OSError, KeyError, AssertionError, csv.Error) as e:
        raise InputError(f"{path}: cannot read statements ({e!r}); pass a CSV with columns statement,label "
                         "(or restore data/)") from None
    if not rows:
        raise InputError(f"{path}: no statement with label 1; the features read only label-1 rows")
    return rows


@cache
def word_list(path: Path) -> tuple[str, ...]:
    """A data file of entries one a line (a word or phrase), in order, its `#` lines (its source) and blank
    ones left out; read once."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e!r}); restore data/") from None
    return tuple(w for w in lines if w and not w.startswith("#"))


def data_json(path: Path, what: str, pick=lambda data: data):
    """pick(the JSON of one of our data files): a file that cannot be read, or whose content pick cannot
    read (a key missing, an assert failing), is a one-line error naming `what` was looked for."""
    try:
        return pick(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, IndexError, TypeError, AssertionError) as e:
        raise InputError(f"{path}: no {what} ({e!r}); restore data/") from None


def today() -> str:
    """Today's date in Pacific time, which CtrlA's FreshQA prompt states [CtrlA official]; local time where
    no time-zone database exists."""
    try:
        return datetime.now(ZoneInfo("America/Los_Angeles")).strftime("%B %d, %Y")
    except (ZoneInfoNotFoundError, ValueError):
        return datetime.now().strftime("%B %d, %Y")


# ---------------------------------------------------------------------------------------------
# make data: the public evaluation files, fetched into data/raw/ and checked
# ---------------------------------------------------------------------------------------------

RAW_DIR = DATA_DIR / "raw"   # git-ignored; the README, results/ and benchmarks/ read data/raw/<name>
TIMEOUT = 60                 # seconds a download may wait for its next bytes


@dataclass(frozen=True)
class Source:
    """Where one file of data/raw/ comes from, and what it must hold."""
    url: str                     # its public source
    sha256: str                  # of the file as data/raw/ holds it
    records: int | None = None   # keep the first N records of the source's JSON list (else the whole file)


def _github(repo: str, commit: str, path: str) -> str:
    """A file of a GitHub repository at one commit: the same bytes for as long as the repository exists."""
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_NINEHILLS = "ninehills/deepsearch-rl", "78d710126dcba3d0efb840e742746988f142d1a9"   # FlashRAG-format dev samples
_CTRLA = "HSLiu-Initial/CtrlA", "6e1f5f3e2e4b4673f3b07f7de6771f9871b22bcb"           # CtrlA's eval_data/
_ROWEN = "dhx20150812/Rowen", "7fd0454ed71c30a01fd4fdf1d82c85ae24c06c9f"             # Rowen's dataset/

# Each sha256 is of the whole file, computed from a copy read with `git show COMMIT:PATH` from the repository
# and commit its URL names (the bytes that URL serves). Except the first: HotpotQA's own release is the whole
# dev set (about 46 MB, 7,405 questions), of which the runs read the first 50 (or 30). Its first 103 records
# (as many as the file the results were run on holds) are kept, written as compact JSON (json.dumps with
# separators "," and ":"), and the sha256 is of that file as written: it checks those records, whatever copy
# they come from. It was computed from
# acmyu/CS592LLM-Project's data/hotpot_dev_distractor_v1_100.json at 5f67a0f, which holds the official
# file's first 103 records in order; that copy's own bytes differ from ours (one space, "/" escaped as
# "\/"), so its whole-file sha256, f764184c..., is the "question file" the older runs' settings name.
# 2WikiMultihopQA's own release is a zip of the whole dev set in another format (_id, evidences); the runs
# read FlashRAG's first 200 dev records, so that file comes from the copy they were run on.
RAW_FILES = {
    "hotpotqa/hotpot_dev_distractor_v1_100.json": Source(
        "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json",
        "6c544c93310a0ca976282f60a995421cb978368b9b4f974553cacbfda7cab67f", records=103),
    # FlashRAG's copy; its contexts lack the supporting paragraphs of most questions (load_retriever warns)
    "hotpotqa/hotpotqa_dev_200.jsonl": Source(
        _github(*_NINEHILLS, "data/hotpotqa/hotpotqa_dev_200.jsonl"),
        "e18551427b6ea24dd2d69e6c7c06dfaa3e5be762fff461f52dd748bee23b300c"),
    "hotpotqa/hotpotqa_dev_500.jsonl": Source(
        _github("ayvan180/infodecay", "caf4cf6b530fb029a884e1ff38477db3f4a8b5d7", "data/hotpotqa_dev_500.jsonl"),
        "71791dd6ba8c2b3fe35280c92961ab178a92f7e9a6c52fba610a89f9c339184b"),
    "hotpotqa/dev_subsampled.jsonl": Source(
        _github("xindili-cmu/anlp-project-multihop", "df0d5757f42f098ab6026f40323e91c369307506",
                "processed_data/hotpotqa/dev_subsampled.jsonl"),
        "837a919903fedf521211c4271f168ad5458488198e9c4d967bf5f3a579525ce8"),
    "2wikimultihopqa/2wikimultihopqa_dev_200.jsonl": Source(
        _github(*_NINEHILLS, "data/2wikimultihopqa/2wikimultihopqa_dev_200.jsonl"),
        "d9b55ffab6d62675f1840454fa87f0bcaf86af6802d08ad8d00b6bccea78ed7b"),
    "musique/musique_dev_200.jsonl": Source(
        _github(*_NINEHILLS, "data/musique/musique_dev_200.jsonl"),
        "6138c9511676e60ddacd28a6996e7b98d4ca3554880acf260ac7dfb7c9436c2a"),
    "nq/NQ-open.dev.jsonl": Source(   # the official NQ-open dev split, in its own repository
        _github("google-research-datasets/natural-questions", "fb26a3073b1fe636c97302890a27b491d6530130",
                "nq_open/NQ-open.dev.jsonl"),
        "f15567f38099f3615f5b8a685c0aef449c11ad90d3da3735e8d1b98115b40616"),
    "dpr_wiki/sample_data.jsonl": Source(   # 1,000 DPR passages (bench_retrieval.py); gone from FlashRAG's HEAD
        _github("RUC-NLPIR/FlashRAG", "adb2a8bc285042abf7c0c56ff004283f62318c5a",
                "examples/quick_start/indexes/sample_data.jsonl"),
        "4ff49380c38844c413c5d022e9c269b21a00726130f561b518600f2beb7cc6ed"),
    "ctrla/popqa_longtail.jsonl": Source(
        _github(*_CTRLA, "eval_data/popqa_longtail.jsonl"),
        "4ee4fa46bc6c382a86679e9156ddc1d9fa06f8e07421ed71598ea640262a9c00"),
    "ctrla/triviaqa_test.jsonl": Source(
        _github(*_CTRLA, "eval_data/triviaqa_test.jsonl"),
        "7424599f0f7da21ad9f0ed5fdfc05305f4c778723ae6899d2c99dcc3292f5617"),
    "ctrla/FreshQA_v04082024.jsonl": Source(
        _github(*_CTRLA, "eval_data/FreshQA_v04082024.jsonl"),
        "9514ef05fcb712a48a57596a05639fc70fee397caf9dca6ea030bda66f74a3d1"),
    "ctrla/bio_gen.jsonl": Source(
        _github(*_CTRLA, "eval_data/bio_gen.jsonl"),
        "2d9308bd45e47a20cd09e26750c5e439452a048419d4a4bea9dd9bb631ca0f49"),
    "ctrla/confidence_train.csv": Source(
        _github(*_CTRLA, "eval_data/confidence_train.csv"),
        "65dd94eff6b75f9176baab81b4089f993cac0490f1c89ec5d5de74b0267cdd64"),
    "ctrla/facts_true_false.csv": Source(
        _github(*_CTRLA, "eval_data/facts_true_false.csv"),
        "924709159b40a30d5b51488e9ccd7fd886456a89f0e0f5849eacefba6ff55312"),
    "rowen/TruthfulQA.json": Source(
        _github(*_ROWEN, "dataset/TruthfulQA.json"),
        "e6696ea6e0636580e01c04da7da237eda4d97757d0db744d7adf52794b156ebe"),
    "rowen/sampled_strategyqa.json": Source(
        _github(*_ROWEN, "dataset/sampled_strategyqa.json"),
        "1411248c3872a36dae1f5c063a260e3a214e3065231575e3abcdeb3be682946c"),
    "rowen/sampled_nq.json": Source(
        _github(*_ROWEN, "dataset/sampled_nq.json"),
        "a19ea2d32538b215ae49a356c7c6cfb0e2a363fa360221130d9cdf9ddfd5ca06"),
    "rowen/sampled_trivia.json": Source(
        _github(*_ROWEN, "dataset/sampled_trivia.json"),
        "33f45b29af3b8f5fab7903d9ac4fc0c6b03550753d5774f030c54efb62d812b1"),
}


def select_raw(names=None) -> list[str]:
    """The RAW_FILES named: each NAME is a file under data/raw/ or a folder of them ("rowen"); none: all."""
    if not names:
        return list(RAW_FILES)
    chosen = []
    for name in names:
        name = name.removeprefix("data/raw/").strip("/")
        hits = [f for f in RAW_FILES if f == name or f.startswith(name + "/")]
        if not hits:
            folders = ", ".join(dict.fromkeys(f.split("/")[0] for f in RAW_FILES))
            raise InputError(f"{name}: not a file of data/raw/; name a folder ({folders}) or a file in one "
                             "(python questions.py fetch --list)")
        chosen += [f for f in hits if f not in chosen]
    return chosen


def fetch(names=None, dest=RAW_DIR, source_dir=None, base_url=None) -> list[Path]:
    """Bring each named file of RAW_FILES (default: all) into `dest`, checked against its sha256.

    A file already there with its sha256 is kept. Otherwise it is read from `source_dir` (a folder with
    data/raw/'s layout: DATA_FROM), from `base_url` + "/" + its name (a mirror with that layout: the tests'
    loopback server), or else from its public URL; checked; then written to a temporary file renamed into
    place, so an interrupted fetch leaves nothing half-written. A source that cannot be read, or whose
    bytes are not the ones checked here, stops with an InputError naming the file and the source."""
    if source_dir is not None and not Path(source_dir).is_dir():
        raise InputError(f"DATA_FROM={source_dir}: no such folder; name a folder with data/raw/'s layout "
                         "(hotpotqa/, nq/, rowen/, ...)")
    written = []
    for name in select_raw(names):
        source, target = RAW_FILES[name], Path(dest) / name
        if target.is_file():
            if _sha256(target.read_bytes()) == source.sha256:
                print(f"{name}: already there, sha256 checked")
                written.append(target)
                continue
            print(f"{name}: the file there is not the one checked here; fetching it again")
        if source_dir is not None:
            where = str(Path(source_dir) / name)
            data = _read_local(where, name, source.url)
        else:
            where = f"{base_url.rstrip('/')}/{name}" if base_url else source.url
            data = _download(where, name)
        if source.records is not None:
            data = _first_records(data, source.records, name, where)
        digest = _sha256(data)
        if digest != source.sha256:
            raise InputError(f"{name}: {where} gives sha256 {digest[:12]}..., expected {source.sha256[:12]}... "
                             f"(not written: the source changed or the transfer was damaged; "
                             f"its source: {source.url})")
        _write_whole(target, data)
        print(f"{name}: {len(data):,} bytes from {where}, sha256 checked")
        written.append(target)
    return written


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download(url: str, name: str) -> bytes:
    """The bytes at `url`, with a progress bar on a terminal; one-line InputError if they cannot all be read."""
    fix = "check the connection and run make data again, or copy the files with DATA_FROM=DIR make data"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            size = int(response.headers.get("Content-Length") or 0) or None
            data = bytearray()
            with tqdm(total=size, desc=name, unit="B", unit_scale=True, unit_divisor=1024,
                      disable=None, leave=False) as bar:
                while chunk := response.read(1 << 16):
                    data += chunk
                    bar.update(len(chunk))
    except (OSError, http.client.HTTPException, ValueError) as e:   # URLError and timeouts are OSErrors
        raise InputError(f"{name}: cannot download {url} ({e}); {fix}") from None
    if size is not None and len(data) != size:
        raise InputError(f"{name}: {url} stopped after {len(data):,} of {size:,} bytes; {fix}")
    return bytes(data)


def _read_local(path: str, name: str, url: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{name}: cannot read {path} ({e.strerror}); DATA_FROM must hold data/raw/'s layout "
                         f"(this file's source: {url})") from None


def _first_records(data: bytes, n: int, name: str, where: str) -> bytes:
    """The first n records of a JSON list, as compact JSON: the form RAW_FILES' sha256 is of."""
    try:
        records = json.loads(data)
    except ValueError:   # malformed JSON, or not UTF-8
        records = None
    if not isinstance(records, list) or len(records) < n:
        raise InputError(f"{name}: {where} is not a JSON list of at least {n} records (not written)")
    return json.dumps(records[:n], separators=(",", ":")).encode()


def _write_whole(target: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `target`, then rename it: `target` is whole or absent."""
    part = target.with_name(f".{target.name}.part")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(part, "wb") as f:
            f.write(data)
        os.replace(part, target)
    except OSError as e:
        raise InputError(f"cannot write {target} ({e.strerror}); pass --dest with a writable folder") from None
    finally:
        part.unlink(missing_ok=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="The public evaluation files (make data).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download the evaluation files into data/raw/, each checked by sha256")
    f.add_argument("names", nargs="*", metavar="NAME",
                   help="a file under data/raw/ or a folder (hotpotqa, nq, rowen, ...); default: all")
    f.add_argument("--from", dest="source_dir", default=os.environ.get("DATA_FROM") or None, metavar="DIR",
                   help="copy them from DIR (data/raw/'s layout), with the same checks; default $DATA_FROM")
    f.add_argument("--base-url", default=os.environ.get("DATA_URL") or None,
                   help="download NAME from BASE_URL/NAME (a mirror of data/raw/'s layout); default $DATA_URL")
    f.add_argument("--dest", type=Path, default=RAW_DIR, help="where to write them (default: data/raw/)")
    f.add_argument("--list", action="store_true", help="print each file and its source; fetch nothing")
    args = ap.parse_args(argv)
    if args.list:
        for name in select_raw(args.names):
            print(f"{name}\t{RAW_FILES[name].url}")
        return
    if args.source_dir and args.base_url:
        raise InputError("--from (DATA_FROM) and --base-url (DATA_URL) both given; pass one of them")
    files = fetch(args.names, args.dest, args.source_dir, args.base_url)
    print(f"{len(files)} file{'' if len(files) == 1 else 's'} in {args.dest}, each one's sha256 checked")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: no file is left half-written; run it again to go on", file=sys.stderr)
        sys.exit(130)
