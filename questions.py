"""The question sets: load_dataset() reads the shipped demo sets and the native formats of the papers'
datasets (HotpotQA, 2WikiMultihopQA, MuSiQue, IIRC, NQ-open, DPR QA, SQuAD, PopQA, TriviaQA, FreshQA,
Bio, TruthfulQA, StrategyQA), told apart by their content, into one record shape.

Plumbing, like common.py (which re-exports load_dataset, DATASETS and DATA_DIR for the methods); it
imports only retrieval.py (InputError and the JSON-lines reader the corpus files share).
"""
from __future__ import annotations

import json
from functools import partial
from pathlib import Path

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
    text = path.read_text(encoding="utf-8-sig")
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
    if "question" in keys and isinstance(row.get("answer"), bool):
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
    """2WikiMultihopQA official dev JSON; its sentences have no leading space, so join with " "."""
    titles, sentences = [c[0] for c in row["context"]], [c[1] for c in row["context"]]
    answers = [row["answer"]] + aliases.get(row.get("answer_id"), [])
    return [_record(kind, row["_id"], row["question"], answers, _paragraphs(titles, sentences, " "),
                    answer=row["answer"], **_pick(row, "type"))]


def _from_flashrag(row, kind):
    """FlashRAG JSONL {id, question, golden_answers, metadata}; golden_answers already hold the
    aliases. Paragraphs from metadata.context (HotpotQA: sentences; 2Wiki: content) or from the
    MuSiQue decomposition's support paragraphs (FlashRAG keeps only the supporting ones)."""
    meta = row.get("metadata") or {}
    ctx = meta.get("context") or {}
    contexts = None
    if "sentences" in ctx:
        contexts = _paragraphs(ctx["title"], ctx["sentences"], "")
    elif "content" in ctx:
        contexts = _paragraphs(ctx["title"], ctx["content"], " ")
    elif "question_decomposition" in meta:
        support = [s["support_paragraph"] for s in meta["question_decomposition"]
                   if "support_paragraph" in s]
        unique = dict.fromkeys((p["title"], p["paragraph_text"]) for p in support)
        contexts = [{"title": t, "text": x} for t, x in unique]
    return [_record(kind, row.get("id"), row["question"], row["golden_answers"], contexts,
                    **_pick(meta, "type", "level"))]


def _from_ircot(row, kind):
    """IRCoT processed_data JSONL. Answers are the spans and non-empty numbers; date answers
    (day / month / year) are not converted, since no file here uses them."""
    objects = row["answers_objects"]
    answers = [s for a in objects for s in a.get("spans", [])]
    answers += [a["number"] for a in objects if a.get("number")]
    contexts = [{"title": c["title"], "text": c["paragraph_text"].strip()}
                for c in row.get("contexts", [])]
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
    """Rowen's TruthfulQA JSON; answers are the "; "-separated correct answers, best included."""
    split = lambda s: [a.strip() for a in s.split("; ") if a.strip()]
    best = row["Best Answer"].strip()
    correct = split(row["Correct Answers"])
    correct = correct if best in correct else [best] + correct
    return [_record(kind, None, row["Question"], correct, best_answer=best,
                    correct_answers=correct, incorrect_answers=split(row["Incorrect Answers"]),
                    category=row.get("Category"))]


def _from_strategyqa(row, kind):
    """StrategyQA (Rowen's sample {question, answer: bool, target}; the official file adds qid)."""
    label = row["answer"]
    return [_record(kind, row.get("qid"), row["question"], ["yes" if label else "no"], label=label,
                    **_pick(row, "target"))]
