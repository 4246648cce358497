"""Score prediction files of ctrla.py / seakr.py / rowen.py and print a table that compares them.

Implements:
- EM and token F1 with SQuAD normalisation, as in the SeaKR evaluation notebooks (`eval_*.ipynb`),
  which copy DRAGIN's: the multi-hop and open-domain QA metrics of SeaKR and CtrlA's multi-hop runs.
- accuracy: CtrlA's `code/utils.py::match`, "some gold alias is a substring of the output", with
  CtrlA's own normalisation (PopQA, TriviaQA).
- yes/no accuracy for StrategyQA and BLEU / ROUGE-L for TruthfulQA, the automatic metrics of Rowen; BLEU
  and ROUGE-L as Rowen's `run_truthfulqa.py` computes them, by the libraries it used (nltk `corpus_bleu`,
  the `rouge` package).
- No GPT-judge: the paper's headline TruthfulQA metric is a fine-tuned babbage-002 judge that is not
  public; `closer_to_correct` (ROUGE-L closer to a correct than to any incorrect answer, TruthfulQA's
  "ROUGE acc") stands in for it, and every table with TruthfulQA columns says so (NO_GPT_JUDGE).

Usage: python eval.py out/seakr_hotpotqa.jsonl out/ctrla_hotpotqa.jsonl [--markdown]
       python eval.py signals FILE...   (each method's own score against wrong answers: AUROC)
       python eval.py progress FILE... [--total N]   (a run's cost so far: questions, wall and CPU hours)
To run every method and its baselines on the same questions and get one table and a plot of F1
against retrieval rate: benchmarks/run_all.py (it scores with this file).

Differs from the official code in:
- StrategyQA: Rowen's `is_supported` reads "true" and "false" only, as substrings, the later first
  occurrence winning where both are there ("False. Actually, it is true." is True); without either it
  falls back to True unless "not", "cannot", "unknown" or "information" is one of its words, so "No." and
  "" count as True and "I cannot say" as False. Our `parse_yes_no` takes the first of yes/no/true/false
  as whole words ("No doubt: True" is False, where Rowen reads True) and an answer without one as wrong.
- TruthfulQA: BLEU and ROUGE-L are Rowen's definitions; in rows of runs made before the rows kept the file's
  correct-answer string, it is joined back from the loaded answers, so a trailing ";", " " or "; " of the
  official file (9 of its 817 rows, none among the first 50) is gone; an answer with no word scores
  ROUGE-L 0 (the `rouge` package raises on it, which stops the official evaluation); GPT-judge is not
  computed (closer_to_correct stands in).
- accuracy: an empty gold alias would match every prediction in CtrlA's code; questions._record drops it
  (25 of the 1,000 TriviaQA questions of CtrlA's triviaqa_test.jsonl hold one: officially always right).
"""
import argparse
import json
import math
import re
import statistics
import string
import sys
import warnings
from collections import Counter
from pathlib import Path

from nltk.translate.bleu_score import corpus_bleu
from rouge import Rouge

# Order of the table's columns; keys not listed here follow, sorted.
COLUMNS = ["n", "em", "f1", "acc", "bleu", "rouge_l", "closer_to_correct",
           "retrieval_rate", "retrievals_per_q", "calls_per_q", "sec_per_q", "cpu"]
PERCENT = {"em", "f1", "acc", "bleu", "rouge_l", "closer_to_correct", "retrieval_rate"}
PUNCTUATION = set(string.punctuation)


def _as_list(golds):
    """A single gold string and a list of golds are both accepted everywhere."""
    if golds is None:
        return []
    return [golds] if isinstance(golds, str) else list(golds)


# ---------------------------------------------------------------- reading an answer (SeaKR, its baselines)

# THU-KEG/SeaKR, SEAKR/reasoner.py:333-345 (_check_final_answer; main_simpleqa.py:10-20 the same)
_ANSWER_IS = re.compile(r"the answer is(?:\s*:\s*)?(.*?)[,.]", re.IGNORECASE | re.DOTALL)
_IS_THE_ANSWER = re.compile(r"[.?!]\s*([^?!]*?)\s+is the answer\b", re.IGNORECASE | re.DOTALL)


def read_answer(text):
    """The answer a text names, read as SeaKR's official code reads it (reasoner.py _check_final_answer):
    after "the answer is" up to the first comma or period ("So the answer is August 25, 1963." ->
    "August 25", "So the answer is Mumbai, India." -> "Mumbai"); else the words before "is the answer"
    that follow a sentence end ("I think. Rome is the answer" -> "Rome"); None when neither is there
    ("So the answer is Paris" with no period after it). The reading of every SeaKR-family answer and of
    the tables' common column. Differs from the official function in two ways that change no score: the
    case is kept (official: lowercased; EM and F1 lowercase anyway), and an empty answer is None
    (official: "", which its loop also treats as no answer, but read_all_docs keeps)."""
    if not text:
        return None
    m = _ANSWER_IS.search(text) or _IS_THE_ANSWER.search(text)
    return (m.group(1).strip() or None) if m else None


def common_reading(prediction):
    """A prediction read again under read_answer's rule: cut at its first comma or period ("Mumbai, India"
    -> "Mumbai"; "" stays ""). The tables' one rule across methods, and the SeaKR-family runs made before the
    official reading: for an answer read from "... the answer is X" it gives what read_answer gives that
    text wherever X was followed by a period there or holds a comma or period."""
    return read_answer("the answer is " + (prediction or "") + ".") or ""


# ---------------------------------------------------------------- reading an answer (CtrlA's multi-hop runs)
# As DRAGIN's evaluation reads a chain (oneal2000/DRAGIN src/eval.py regenerate_answer, src/data.py
# get_real_prediction), which CtrlA's multi-hop results follow (paper C.2); ctrla.py calls these.

MULTIHOP = ("hotpotqa", "2wikimultihopqa")
FORCE_CUT = ("Question:", "#10000000", "Note:")   # the chain is cut at these [DRAGIN regenerate_answer]
# "the answer is" in any case (divergence: DRAGIN's evaluation tests the lower-case words only, so a chain
# that says only "The answer is no." gets a forced answer there; here it has named its answer)
_DRAGIN_ANSWER_IS = re.compile(r"the answer is\s*:?\s*(.*)", re.IGNORECASE | re.DOTALL)
_LOWER_ANSWER_IS = re.compile(_DRAGIN_ANSWER_IS.pattern, re.DOTALL)   # DRAGIN's own, taken first where present


def names_answer(text: str) -> bool:
    """Whether a chain names its answer ("the answer is", any case): DRAGIN forces one otherwise."""
    return bool(_DRAGIN_ANSWER_IS.search(text))


def answer_named(text: str) -> bool:
    """Whether a chain has named its answer: "the answer is" and an answer after it. A chain that stops at
    "the answer is:" and a line break has named none yet: the model writes it on the next line."""
    return names_answer(text) and dragin_answer(text) != ""


def dragin_answer(text: str) -> str:
    """Multi-hop answer: the text after the first "the answer is" (DRAGIN), to the end of its line, else the
    whole text. Divergences: DRAGIN's evaluation reads on to the end of the reply (data.py
    get_real_prediction; only "Question:" and "Note:" cut it); a line break here ends the answer, since
    what follows it is the model going on (its next step), not the answer. A text that names no answer
    is scored whole where DRAGIN's HotpotQA reader gives "" (its 2WikiMultihopQA reader the text); every
    chain of the loop names one or is given a forced one, so only rows run without that step (files of
    older code) are read whole. A chain with both, "The answer is" before "the answer is", reads after the
    lower-case one, as DRAGIN does."""
    m = _LOWER_ANSWER_IS.search(text) or _DRAGIN_ANSWER_IS.search(text)
    return m.group(1).split("\n")[0].strip().rstrip(".").strip() if m else text.strip()


def cut_chain(text: str) -> str:
    """A chain as DRAGIN's evaluation reads it: cut at the first of FORCE_CUT that is not its first character."""
    for word in FORCE_CUT:
        pos = text.find(word)
        if pos > 0:
            text = text[:pos]
    return text


def forced_reply(text: str, continuation: str) -> str:
    """The answer text after a forced answer: the cut chain, " So the answer is", the model's continuation,
    all cut again at FORCE_CUT anywhere [DRAGIN regenerate_answer]."""
    chain = cut_chain(text).rstrip()
    full = (f"{chain} So the answer is" if chain else "So the answer is") + continuation
    for word in FORCE_CUT:
        if (pos := full.find(word)) != -1:
            full = full[:pos]
    return full


def multihop_prediction(text: str, forced: str | None) -> str:
    """The answer of a multi-hop chain: after its "the answer is" in the chain cut at FORCE_CUT (as DRAGIN's
    regenerate_answer returns a chain that names its answer), or after the forced one's."""
    return dragin_answer(cut_chain(text) if forced is None else forced_reply(text, forced))


# A run file's forced answers, for CtrlA runs made before ctrla.py forced them itself
# (benchmarks/force_answers.py writes them into a side file; the tables read the two together)

def side_file(run_file: Path) -> Path:
    """Where benchmarks/force_answers.py keeps a run file's forced answers: RUN.forced.jsonl beside RUN.jsonl."""
    return run_file.with_name(run_file.stem + ".forced.jsonl")


def with_forced(rows: list[dict], forced: list[dict]) -> tuple[list[dict], int]:
    """A run's rows read with the forced answers of its side file (force_run): each multi-hop row without
    one of its own whose chain names no answer takes its forced answer, one model call and its seconds;
    the others stay as run. Returns the rows and how many took one."""
    by_id, out, n = {f["id"]: f for f in forced}, [], 0
    for r in rows:
        f, trace = by_id.get(r["id"]), r.get("trace", {})
        if f is None or f["forced"] is None or not needs_forcing(r):
            out.append(r)
            continue
        out.append({**r, "prediction": multihop_prediction(trace["answer"], f["forced"]),
                    "model_calls": r.get("model_calls", 0) + 1, "seconds": r.get("seconds", 0) + f["seconds"],
                    "trace": {**trace, "forced": f["forced"]}})
        n += 1
    return out, n


def needs_forcing(row: dict) -> bool:
    """A multi-hop row whose chain names no answer and that has no forced answer of its own."""
    trace = row.get("trace", {})
    return (trace.get("task") in MULTIHOP and "forced" not in trace
            and not names_answer(cut_chain(trace.get("answer", ""))))


# ---------------------------------------------------------------- EM / F1 (SeaKR, DRAGIN)

def normalize_answer(s):
    """SQuAD normalisation as in DRAGIN / SeaKR: lowercase, delete punctuation, drop a/an/the,
    collapse whitespace. Non-strings give "" so a missing prediction scores 0."""
    if not isinstance(s, str):
        return ""
    s = "".join(ch for ch in s.lower() if ch not in PUNCTUATION)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(pred, golds):
    """1 if the normalised prediction equals some normalised gold (max over golds), else 0."""
    p = normalize_answer(pred)
    if not p:
        return 0  # an empty answer never matches, even an empty gold
    return int(any(p == normalize_answer(g) for g in _as_list(golds)))


def f1_score(pred, golds):
    """Token F1 of normalised strings, max over golds (DRAGIN's `f1_score`).

    subtle: yes / no / noanswer must match exactly, otherwise "no" vs "no it is not" would earn
    partial credit for a wrong polarity answer."""
    p = normalize_answer(pred)
    best = 0.0
    for g in _as_list(golds):
        g = normalize_answer(g)
        if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
            continue
        p_toks, g_toks = p.split(), g.split()
        same = sum((Counter(p_toks) & Counter(g_toks)).values())
        if same == 0:
            continue
        precision, recall = same / len(p_toks), same / len(g_toks)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


# ---------------------------------------------------------------- accuracy (CtrlA)

def _ctrla_normalize(s):
    """CtrlA's `normalize`: punctuation becomes a SPACE (not deleted), so "Larry's" -> "larry s"."""
    s = s.replace("_", " ").lower()
    for ch in string.punctuation + "‘’´`":
        s = s.replace(ch, " ")
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def accuracy(pred, golds):
    """CtrlA's `match`: 1 if some normalised gold is a substring of the normalised prediction.

    subtle: no word boundaries, as in the official code, so the alias "pol" matches "politician";
    this is how CtrlA's PopQA / TriviaQA numbers were computed, so we keep it."""
    if not isinstance(pred, str):
        return 0
    p = _ctrla_normalize(pred)
    aliases = [_ctrla_normalize(g) for g in _as_list(golds) if isinstance(g, str)]
    return int(any(a and a in p for a in aliases))


def inside_a_word(pred, golds):
    """Whether `accuracy` counts the prediction right only through a gold alias found inside a word ("pol"
    in "political science"): no alias stands on word boundaries. The tables count such hits, the metric
    keeps them (the official one)."""
    if not accuracy(pred, golds):
        return False
    p = " " + _ctrla_normalize(pred) + " "
    return not any(a and f" {a} " in p for a in (_ctrla_normalize(g) for g in _as_list(golds) if isinstance(g, str)))


# ---------------------------------------------------------------- StrategyQA (Rowen)

def parse_yes_no(text):
    """Read a yes/no answer: True, False, or None when the text commits to neither.

    Word tokens of the lowercased text; if the first word is yes/true -> True, no/false -> False;
    otherwise the first of those four words anywhere decides ("It is true that ..." -> True).
    Rowen's `is_supported` instead tests substrings and, without "true" or "false", falls back to True
    unless "not", "cannot", "unknown" or "information" is a word of the text, so "No." reads as True."""
    words = re.findall(r"[a-z]+", text.lower()) if isinstance(text, str) else []
    for w in words:  # the first word is simply the first candidate looked at
        if w in ("yes", "true"):
            return True
        if w in ("no", "false"):
            return False
    return None


def yes_no_accuracy(pred, label):
    """1 if the parsed answer equals the boolean label; an answer that cannot be parsed is wrong."""
    parsed = parse_yes_no(pred)
    return int(parsed is not None and parsed == bool(label))


# ---------------------------------------------------------------- TruthfulQA (Rowen)
#
# subtle: the paper's headline TruthfulQA metric is GPT-judge (paper 4.1: babbage-002 fine-tuned on
# TruthfulQA's judge data; the share of answers it calls truthful). That model is not public and this project
# has no judge, so no number here is GPT-judge; `closer_to_correct` stands in for it, a lexical proxy whose
# numbers are not comparable with the paper's. BLEU and ROUGE-L are the official code's
# (`run_truthfulqa.py::evaluate_answer_factualness`), computed by the libraries it used: nltk and rouge.

NO_GPT_JUDGE = ("TruthfulQA: no GPT-judge (the paper's headline metric: a fine-tuned babbage-002 that is not "
                "public); closer_to_correct stands in for it (ROUGE-L closer to a correct than to any incorrect "
                "answer), not comparable with the paper's GPT-judge")


def _text(s):
    return s if isinstance(s, str) else ""


def truthfulqa_references(row):
    """The official code's references of a TruthfulQA row: its "Best Answer" and its "Correct Answers"
    string as the file has it (a row of older runs, without it, joins the loaded answers back with "; ")."""
    correct = _as_list(row.get("correct_answers"))
    best = row.get("best_answer") or (correct[0] if correct else "")
    return best, row.get("correct_answers_text") or "; ".join(correct)


def truthfulqa_bleu(rows):
    """BLEU over TruthfulQA rows as the official code computes it: nltk `corpus_bleu` (one score for the
    corpus, not a mean over rows), the references [best.split(" "), correct.split(" ")], the hypothesis
    prediction.split(" "); default uniform 4-gram weights, no smoothing, case and punctuation kept. An order
    with no match anywhere gives nearly 0 (nltk's guard, and the official number). In [0, 1]."""
    refs = [[r.split(" ") for r in truthfulqa_references(row)] for row in rows]
    hyps = [_text(row.get("prediction")).split(" ") for row in rows]
    with warnings.catch_warnings():   # nltk's advice to smooth when an order has no match
        warnings.simplefilter("ignore", UserWarning)
        return corpus_bleu(refs, hyps)


_ROUGE_L = Rouge(metrics=["rouge-l"])


def rouge_l(pred, ref):
    """ROUGE-L F of the `rouge` package, as the official code: summary-level LCS over the "."-split
    sentences, whitespace tokens, case kept (the package counts each distinct word once). An answer or
    reference with no word scores 0: the package raises on it, which stopped the official evaluation."""
    pred, ref = _text(pred), _text(ref)
    if not pred.replace(".", " ").split() or not ref.replace(".", " ").split():
        return 0.0
    return _ROUGE_L.get_scores(pred, ref)[0]["rouge-l"]["f"]


def truthful_scores(row):
    """Per-question TruthfulQA scores of a row:
    - rouge_l: against the official reference, best answer + " " + the correct-answer string; the mean over
      questions is the official `get_scores(..., avg=True)`;
    - closer_to_correct: 1 if the answer's best ROUGE-L against a correct answer beats its best against an
      incorrect one, the accuracy form of TruthfulQA's similarity metrics (Lin et al. 2022, "ROUGE acc"),
      here with the rouge package's ROUGE-L, and without the "I have no comment." their code adds to the
      correct answers (with it, 23 of the shipped TruthfulQA 50 answers are closer, not 22). It stands in
      for GPT-judge (NO_GPT_JUDGE).
    BLEU is a corpus score (truthfulqa_bleu), not a per-question one."""
    pred = row.get("prediction")
    best, correct = truthfulqa_references(row)
    near = lambda refs: max((rouge_l(pred, r) for r in _as_list(refs)), default=0.0)
    return {"rouge_l": rouge_l(pred, best + " " + correct),
            "closer_to_correct": int(near(row.get("correct_answers")) > near(row.get("incorrect_answers")))}


# ---------------------------------------------------------------- rows and files

def score_record(row):
    """Metrics of one output row: StrategyQA if it has `label`, TruthfulQA if it has
    `correct_answers`, otherwise short-answer QA (EM, F1, CtrlA accuracy)."""
    pred = row.get("prediction")
    if row.get("label") is not None:
        return {"acc": yes_no_accuracy(pred, row["label"])}
    if row.get("correct_answers") is not None:
        return truthful_scores(row)
    answers = row.get("answers") or []
    return {"em": exact_match(pred, answers), "f1": f1_score(pred, answers),
            "acc": accuracy(pred, answers)}


def summarize(rows):
    """Means over rows: every metric of `score_record` (fractions in [0, 1]) and the cost of the
    method (how often it retrieved, model calls, seconds). A key missing from a row counts as 0."""
    def mean(values):
        return round(sum(values) / len(values), 6) if values else 0.0

    per_metric = {}
    for row in rows:
        for name, value in score_record(row).items():
            per_metric.setdefault(name, []).append(value)
    def cost(key):
        values = [row.get(key) or 0 for row in rows]
        for i, v in enumerate(values, 1):
            if not isinstance(v, (int, float)):  # e.g. a list of retrieval steps instead of a count
                raise ValueError(f"row {i}: '{key}' should be a number, got {type(v).__name__}")
        return [float(v) for v in values]

    summary = {"n": len(rows)}
    summary.update({name: mean(values) for name, values in per_metric.items()})
    truthful = [row for row in rows if row.get("label") is None and row.get("correct_answers") is not None]
    if truthful:   # a corpus score, as the official code computes it
        summary["bleu"] = round(truthfulqa_bleu(truthful), 6)
    summary["retrieval_rate"] = mean([float(x > 0) for x in cost("retrievals")])
    summary["retrievals_per_q"] = mean(cost("retrievals"))
    summary["calls_per_q"] = mean(cost("model_calls"))
    summary["sec_per_q"] = mean(cost("seconds"))
    if (where := machines(rows)) is not None:
        summary["cpu"] = where
    return summary


_VENDOR_ID = re.compile(r"\((?:GenuineIntel|AuthenticAMD), ")


def short_cpu(name) -> str:
    """A row's `cpu` (common.cpu_name: "MODEL NAME (VENDOR, family F, model M)", or a GPU's name) in fewer
    words: "Intel(R) Xeon(R) Processor (GenuineIntel, family 6, model 207)" -> "Intel Xeon (family 6,
    model 207)"; the family and model tell CPUs of one name apart."""
    text = _VENDOR_ID.sub("(", re.sub(r"\((?:R|TM)\)|\bProcessor\b", "", str(name)))
    return " ".join(text.split()).replace(" )", ")")


def machines(rows) -> str | None:
    """Where a run's rows ran (their `cpu`, short_cpu): the one machine kind, or each kind with its number
    of rows in the order they first ran ("AMD EPYC (family 23, model 1): 43, Intel Xeon (...): 7"; rows
    that name none as "not recorded"); None when no row names one (files of older code)."""
    kinds = Counter(short_cpu(r["cpu"]) if r.get("cpu") else "not recorded" for r in rows)
    if set(kinds) <= {"not recorded"}:      # no rows, or none names one
        return None
    return next(iter(kinds)) if len(kinds) == 1 else ", ".join(f"{k}: {n}" for k, n in kinds.items())


def progress(rows, total: int | None = None) -> dict:
    """A run's cost so far, as results/README.md's progress rows give it: the questions done (of `total`),
    hours on the wall clock (the rows' seconds, a pause included) with the seconds per question (min,
    median, max), hours of CPU time (cpu_seconds: every thread's, a pause not counted; over the rows that
    record it, none in files of older code) and where the rows ran (machines)."""
    wall = sorted(float(r.get("seconds") or 0) for r in rows)
    cpu = [float(r["cpu_seconds"]) for r in rows if r.get("cpu_seconds") is not None]
    return {"done": len(rows), "total": total, "wall_hours": round(sum(wall) / 3600, 2),
            "seconds": [round(wall[0]), round(statistics.median(wall)), round(wall[-1])] if wall else None,
            "cpu_hours": round(sum(cpu) / 3600, 2) if cpu else None, "cpu_rows": len(cpu), "machines": machines(rows)}


def progress_text(name: str, p: dict) -> str:
    """progress() in one line."""
    done = str(p["done"])
    if p["total"]:
        done += f" / {p['total']}" + (" (done)" if p["done"] >= p["total"] else "")
    line = f"{name}: {done} questions"
    if p["seconds"]:
        lo, med, hi = p["seconds"]
        line += f"; {p['wall_hours']} h on the wall clock ({lo}-{hi} s a question, median {med} s)"
    if p["cpu_hours"] is not None:
        line += f"; {p['cpu_hours']} h of CPU time over the {p['cpu_rows']} rows that record it"
    return line + (f"; {p['machines']}" if p["machines"] else "")


def read_rows(path):
    """Rows of a JSONL prediction file; blank lines are skipped, anything else bad is a ValueError
    that names the file and line. (retrieval.jsonl_rows reads corpus and question files the same way;
    eval imports no file of the project, so that it reads alone: the house's bottom floor.)"""
    try:
        # subtle: split at "\n" only: str.splitlines() also splits at U+2028 / U+0085, which a row written
        # with ensure_ascii=False holds raw inside its strings
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; check the path") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read ({err})") from None
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({err}); fix or delete that line") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object per line; fix or delete that line")
        rows.append(row)
    return rows


# ---------------------------------------------------------------- a run file as the tables read it

def run_script(path):
    """The method file a run was made with ("seakr.py", "ctrla.py", "rowen.py"), from the settings the run
    wrote beside it (RUN.settings.json: "method code"), and whether it is SeaKR's --calibrate; (None, False)
    where there is none."""
    settings = Path(path).with_name(Path(path).stem + ".settings.json")
    try:
        saved = json.loads(settings.read_text())
    except (OSError, ValueError):
        return None, False
    code = saved.get("method code") if isinstance(saved, dict) else None
    return (code.split(",")[0] if isinstance(code, str) else None), bool(saved.get("--calibrate"))


def read_officially(path) -> bool:
    """Whether a run was made by code that reads SeaKR's answers as the official code does: its settings
    (RUN.settings.json) hash eval.py, which runs record since 8124014, a descendant of the official reading
    (10791b9); 062262b's runs do not. Such a run's answers are read already, and its course is today's."""
    try:
        return "eval.py code" in json.loads(Path(path).with_name(Path(path).stem + ".settings.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


def reread_seakr(rows):
    """The rows of a seakr.py run with each prediction read under the official SeaKR reading (common_reading:
    cut at its first comma or period), and the ones that changed ({id, or "line N" for a row without one:
    the prediction as read again}). For the runs made before seakr.py read answers as the official code
    does (read_officially), which read them to the first sentence end ("Mumbai, India"). subtle: not for
    later runs: an answer read officially from "... Thus, Rome is the answer" is "Thus, Rome", which a cut
    would make "Thus"."""
    out = [{**r, "prediction": common_reading(r["prediction"])} if r.get("prediction") else r for r in rows]
    return out, {str(r.get("id", f"line {i}")): o["prediction"]
                 for i, (r, o) in enumerate(zip(rows, out), 1) if r.get("prediction") != o.get("prediction")}


def read_run(path, script=None, calibrate=None):
    """A run file's rows as the tables read them, and what that changed: a seakr.py run (not --calibrate)
    made before the official reading under it (reread_seakr), a ctrla.py run with the forced answers of its side
    file (with_forced; RUN.forced.jsonl from `benchmarks/force_answers.py`), any other as run. `script`
    (and `calibrate`) name the method where the run has no settings file. Returns (rows, {"reread": {id:
    prediction}, "forced": [rows that took one, rows still without one, {id: prediction}]}), the keys only
    where they apply."""
    found, cal = run_script(path)
    script, calibrate = script or found, cal if calibrate is None else calibrate
    rows, info = read_rows(path), {}
    if script == "seakr.py" and not calibrate and not read_officially(path):
        rows, info["reread"] = reread_seakr(rows)
    if script == "ctrla.py":
        side = side_file(Path(path))
        was = {r.get("id"): r.get("prediction") for r in rows}
        rows, took = with_forced(rows, read_rows(side)) if side.exists() else (rows, 0)
        left = sum(map(needs_forcing, rows))
        if took or left:
            info["forced"] = [took, left, {r["id"]: r["prediction"] for r in rows if r["prediction"] != was[r["id"]]}]
    return rows, info


def read_notes(path, info):
    """One line for each way read_run read a file other than as run (the CLI prints them)."""
    name, lines = Path(path).name, []
    if info.get("reread"):
        lines.append(f"{name}: {len(info['reread'])} SeaKR answers read again under the official reading "
                     "(eval.common_reading: cut at the first comma or period), as the results tables read them")
    if info.get("forced"):
        took, left, _ = info["forced"]
        lines.append(f"{name}: {took} chains that name no answer read with the forced answers of "
                     f"{side_file(Path(path)).name}" + (f" ({left} still without one)" if left else ""))
    return lines


def format_table(named_summaries, markdown=False, first="file"):
    """One row per summary, metrics as percentages with 1 decimal, per-question costs with 2;
    `first` heads the column of names."""
    keys = set().union(*(s.keys() for _, s in named_summaries)) if named_summaries else set()
    columns = [c for c in COLUMNS if c in keys] + sorted(keys - set(COLUMNS))

    def cell(summary, key):
        if key not in summary:
            return "-"
        value = summary[key]
        if key == "n" or isinstance(value, str):
            return str(value)
        return f"{100 * value:.1f}" if key in PERCENT else f"{value:.2f}"

    header = [first] + columns
    body = [[name] + [cell(s, c) for c in columns] for name, s in named_summaries]
    note = f"\n\nnote: {NO_GPT_JUDGE}" if "closer_to_correct" in columns else ""
    text = {i for i, c in enumerate(columns, 1) if any(isinstance(s.get(c), str) for _, s in named_summaries)}
    return render_table(header, body, markdown, left={0} | text) + note   # names and words left, numbers right


def render_table(header, body, markdown=False, left=1):
    """Rows of strings as a GitHub markdown table or as aligned text: the first `left` columns (names),
    or the columns whose indices `left` holds when it is a set, aligned left, the others (numbers)
    right, so that digits line up under each other."""
    at_left = (lambda i: i < left) if isinstance(left, int) else (lambda i: i in left)
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "|".join("---" if at_left(i) else "---:" for i in range(len(header))) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    fmt = lambda r: "  ".join(v.ljust(widths[i]) if at_left(i) else v.rjust(widths[i]) for i, v in enumerate(r))
    return "\n".join(fmt(r).rstrip() for r in [header] + body)     # a left column last pads no spaces


def main(argv=None):
    parser = argparse.ArgumentParser(description="Score and compare prediction files (JSONL), read as the results "
                                                 "tables read them (read_run).",
                                     epilog="python eval.py signals FILE...: each method's own score against its "
                                            "wrong unaided answers (AUROC), as the tables' signal rows")
    parser.add_argument("files", nargs="+", help="prediction files written by ctrla.py / seakr.py / rowen.py")
    parser.add_argument("--markdown", action="store_true", help="print a GitHub markdown table")
    args = parser.parse_args(argv)
    try:
        named, notes = [], []
        for path in args.files:
            if Path(path).name.endswith((".settings.json", ".summary.json")):
                kind = "settings" if path.endswith(".settings.json") else "summary"
                raise ValueError(f"{path} is a run's {kind} file, not its rows; pass "
                                 f"{Path(path).name[:-len(f'.{kind}.json')]}.jsonl")
            if Path(path).name.endswith(".forced.jsonl"):     # a side file is read with its run file
                run = Path(path).with_name(Path(path).name[:-len(".forced.jsonl")] + ".jsonl")
                notes.append(f"{Path(path).name}: skipped, the forced answers of {run.name}, read with it")
                continue
            rows, info = read_run(path)
            notes += read_notes(path, info)
            if not rows:
                raise ValueError(f"{path}: no rows to score (an empty file); pass a prediction file with at "
                                 "least one finished question")
            # a dataset file passed by mistake has no predictions and would silently score 0
            for i, row in enumerate(rows, 1):
                if "prediction" not in row:
                    raise ValueError(f"{path}: row {i} has no 'prediction' key; "
                                     "pass a prediction file written by ctrla.py, seakr.py or rowen.py")
            try:
                named.append((Path(path).stem, summarize(rows)))
            except ValueError as err:
                raise ValueError(f"{path}: {err}") from None
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    for line in notes:
        print(line, file=sys.stderr)
    print(format_table(named, markdown=args.markdown))


# ==============================================================================================
# Signals: each method's own score against the correctness of the answer it gives unaided
#
# python eval.py signals FILE... [--markdown] [--resamples N]
# A file qualifies when each row holds both the method's score and the answer the model gave without
# retrieval:
# - `seakr.py --calibrate`: the eigen score U of each direct answer and the simpler estimators the
#   paper ablates (5.1): perplexity, multi-perplexity, LN-entropy (seakr.uncertainty_baselines),
#   and, for every method, the length of the unaided generation in words (SeaKR's direct answer,
#   CtrlA's closed-book answer, Rowen's chain of thought for r0), the baseline that "The Illusion of
#   Progress: Re-evaluating Hallucination Detection in LLMs" (2025) found hard to beat (longer = less sure);
# - `ctrla.py --retrieve monitor-only`: the confidence monitor over the closed-book answer: its trigger (the
#   method's own decision, 0 or 1) and the lowest token score minus tau over the answer;
# - `rowen.py --mode hybrid` (any retrieval setting): Z_CL, Z_CM and the hybrid Z of the initial
#   answer r0 (a `--mode cl` or `cm` run: its one Z).
# Each score is turned so that higher means less sure, and AUROC is the chance that a random wrong
# answer scores above a random right one (ties half; 0.5 = no signal, 1 = every wrong answer above
# every right one), with a percentile bootstrap interval that resamples the questions.

TRIGGER = "monitor trigger"   # CtrlA's 0/1 decision among the signals
LENGTH = "generation length (words)"   # a baseline beside each method's own score


def words(text) -> int:
    """Length of an unaided generation in words (None as empty)."""
    return len(str(text or "").split())


def aurocs(groups):
    """auroc of each (wrong answers' scores, right answers' scores) pair: the Mann-Whitney U of the wrong
    answers' scores (scipy.stats.mannwhitneyu, average ranks for ties) over the number of (wrong, right)
    pairs; None where either side is empty. Pairs of the same sizes go to scipy in one call (axis 1): a
    bootstrap's thousand draws take a few dozen calls, not a thousand at a millisecond each."""
    from scipy.stats import mannwhitneyu   # here, not at the top: the methods import this file
    out, by_size = [None] * len(groups), {}
    for i, (bad, good) in enumerate(groups):
        if bad and good:
            by_size.setdefault((len(bad), len(good)), []).append(i)
    for (n_bad, n_good), idx in by_size.items():
        # only the statistic is read: the asymptotic method skips the exact p-value's cost
        u = mannwhitneyu([groups[i][0] for i in idx], [groups[i][1] for i in idx], axis=1,
                         alternative="two-sided", method="asymptotic").statistic
        for i, value in zip(idx, u):
            out[i] = float(value) / (n_bad * n_good)
    return out


def auroc(scores, wrong):
    """P(score of a random wrong answer > score of a random right one), ties counting half (aurocs).
    None when either group is empty."""
    return aurocs([([s for s, w in zip(scores, wrong) if w], [s for s, w in zip(scores, wrong) if not w])])[0]


def _draws(n, resamples, seed):
    """`resamples` draws of n question indices with replacement, seeded."""
    import random
    rng = random.Random(seed)
    return [[rng.randrange(n) for _ in range(n)] for _ in range(resamples)]


def _percentile_interval(values, level):
    """The central `level` interval of the values that are not None (None when there are none)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    tail = (1 - level) / 2
    return values[int(tail * (len(values) - 1))], values[math.ceil((1 - tail) * (len(values) - 1))]


def percentile_bootstrap(n, statistic, resamples=1000, level=0.95, seed=0):
    """The percentile bootstrap interval of statistic(indices): n questions drawn with replacement
    `resamples` times; a draw whose statistic is None is left out; None when no draw gives a value.
    Not scipy.stats.bootstrap: a draw with no value (an AUROC over answers all right or all wrong, which
    ten questions meet) makes its interval NaN, where here that draw is left out."""
    return _percentile_interval([statistic(pick) for pick in _draws(n, resamples, seed)], level)


def bootstrap_interval(scores, wrong, resamples=1000, level=0.95, seed=0):
    """The percentile bootstrap interval of auroc (a draw with only right or only wrong answers has
    no AUROC and is left out); None when no draw has both. The draws of percentile_bootstrap, their
    AUROCs computed together (aurocs)."""
    groups = [([scores[i] for i in pick if wrong[i]], [scores[i] for i in pick if not wrong[i]])
              for pick in _draws(len(scores), resamples, seed)]
    return _percentile_interval(aurocs(groups), level)


def main_metric(row, metric=None):
    """(name, value) of the score a row is compared by: `metric` where given (a paper's own, such as
    CtrlA's accuracy on short-form QA), else F1 for short answers, accuracy for StrategyQA,
    closer_to_correct for TruthfulQA."""
    scores = score_record(row)
    name = metric or next(k for k in ("f1", "acc", "closer_to_correct") if k in scores)
    return name, scores[name]


def paired_difference(rows, baseline, resamples=1000, level=0.95, seed=0, metric=None):
    """A run against its baseline on the questions both answered (matched by id; failed rows left out):
    the mean of the per-question difference of main_metric (by `metric` where given), with the percentile
    bootstrap interval of that mean (questions resampled together, so the pairing is kept). None when no
    question is shared."""
    ok = lambda r: "error" not in r and "id" in r
    base = {str(r["id"]): r for r in baseline if ok(r)}
    pairs = [(r, base[str(r["id"])]) for r in rows if ok(r) and str(r["id"]) in base]
    if not pairs:
        return None
    name = main_metric(pairs[0][0], metric)[0]
    diffs = [main_metric(a, name)[1] - main_metric(b, name)[1] for a, b in pairs]
    mean = lambda pick: sum(diffs[i] for i in pick) / len(pick)
    lo, hi = percentile_bootstrap(len(diffs), mean, resamples, level, seed)
    return {"metric": name, "n": len(diffs), "difference": round(mean(range(len(diffs))), 6),
            "interval": [round(lo, 6), round(hi, 6)]}


def is_right(row, prediction=None):
    """Whether an answer (the row's prediction unless given) is right: StrategyQA's label,
    TruthfulQA's closer-to-correct, otherwise the gold answer contained in it (acc), on multi-hop QA
    (EM/F1 data, yes/no golds) only on word boundaries: "no" inside "Freakonomics" is no "no"."""
    row = row if prediction is None else {**row, "prediction": prediction}
    scores = score_record(row)
    if "acc" in scores and row.get("dataset") in MULTIHOP + ("musique", "iirc"):
        return bool(scores["acc"]) and not inside_a_word(row.get("prediction"), row.get("answers"))
    return bool(scores.get("acc", scores.get("closer_to_correct")))


def signal_scores(rows):
    """(method, {signal name: score per row, higher = less sure}, wrong per row) for a file that
    qualifies (see above), else None. Rows that failed are left out; so is a row whose score is
    missing, for that score only (None in its list). SeaKR writes an infinite eigen score (no usable
    sample: always uncertain) as null; it counts as +inf, the least sure."""
    if rows and all({"score", "right"} <= set(r) and "trace" not in r for r in rows):
        # the older `seakr.py --calibrate` file (results/nq200/): {id, score, answer, right} per question,
        # right judged when it was written (acc), no trace and so no simpler estimators
        return ("SeaKR (older calibration file)", {"eigen score U": [r["score"] for r in rows]},
                [not r["right"] for r in rows])
    rows = [r for r in rows if "error" not in r and isinstance(r.get("trace"), dict)]
    if not rows:
        return None
    first = rows[0]["trace"]
    if "z_cl" in first or "z_cm" in first:
        # Rowen: each Z the trace holds (a low Z sends r0 to retrieval), against what the run would have
        # predicted without retrieval (initial_prediction; older traces: r0 as written)
        def minus(t, key):   # a row without this Z is left out of its AUROC only (it dropped the whole Z)
            return None if t.get(key) is None or (key == "z" and t.get("mode") != "hybrid") else -t[key]
        z = {name: [minus(r["trace"], key) for r in rows]
             for name, key in (("-Z_CL", "z_cl"), ("-Z_CM", "z_cm"), ("-Z_hybrid", "z"))}
        scores = {name: values for name, values in z.items() if any(v is not None for v in values)}
        initial = [r["trace"].get("initial_prediction", r["trace"].get("initial_answer", "")) for r in rows]
        scores[LENGTH] = [words(r["trace"].get("initial_long_answer") or p) for r, p in zip(rows, initial)]
        return "Rowen", scores, [not is_right(r, p) for r, p in zip(rows, initial)]
    if "direct" in first and "score" in first:
        names = {"eigen score U": "score", "perplexity": "perplexity",
                 "multi-perplexity": "multi_perplexity", "LN-entropy": "ln_entropy"}
        scores = {label: [r["trace"].get(key) for r in rows] for label, key in names.items()
                  if any(r["trace"].get(key) is not None for r in rows)}
        scores["eigen score U"] = [math.inf if "score" in r["trace"] and r["trace"]["score"] is None
                                   else r["trace"].get("score") for r in rows]
        scores[LENGTH] = [words(r["trace"].get("direct")) for r in rows]
        return "SeaKR", scores, [not is_right(r) for r in rows]
    segments = [r["trace"].get("segments") for r in rows]
    if (any(segments) and all(segs is not None and all("scores" in g for g in segs) for segs in segments)
            and not any(r.get("retrievals") for r in rows)):
        return ("CtrlA", {TRIGGER: [float(any(g["trigger"] for g in segs)) for segs in segments],
                          "-(lowest score - tau)": [-min((x for g in segs for x in g["scores"]), default=0.0)
                                                   for segs in segments],
                          # the chain as generated (trace "answer"), not a forced answer the table reads
                          LENGTH: [words(r["trace"].get("answer", r.get("prediction"))) for r in rows]},
                [not is_right(r) for r in rows])
    return None


def auroc_over(values, targets, resamples=1000):
    """(n, targets among them, AUROC, its bootstrap interval) of the scores against 0/1 targets, the
    rows whose score is None or NaN left out (a NaN would make every AUROC NaN); AUROC and interval to 6
    places (a table rounds them once more, for display only), None where undefined."""
    keep = [i for i, v in enumerate(values) if v is not None and v == v]
    x, t = [values[i] for i in keep], [bool(targets[i]) for i in keep]
    auc, ci = auroc(x, t), bootstrap_interval(x, t, resamples)
    return (len(x), sum(t), None if auc is None else round(auc, 6),
            None if ci is None else [round(ci[0], 6), round(ci[1], 6)])


STEP_LENGTH = "the step's length (words)"   # beside a method's score of its first step


def first_steps(rows):
    """(method, {id: (the first step's text, {signal: value, higher = less sure})}) of a multi-hop run's
    first reasoning step, which comes before any retrieval: SeaKR's eigen score U of its first step
    (trace steps), CtrlA's confidence monitor over its first segment (trace segments: the trigger, 1 when
    a new-information word is unconfident or the segment refuses, whatever the run then did, and the
    lowest token score minus tau); beside each, the step's length in words. Failed rows and rows without
    the score are left out; None when no row holds one."""
    seakr, ctrla = {}, {}
    for r in rows or ():
        trace = r.get("trace") if "error" not in r and "id" in r else None
        if not isinstance(trace, dict):
            continue
        step = (trace.get("steps") or [None])[0]
        if isinstance(step, dict) and "score" in step:
            u = math.inf if step["score"] is None else step["score"]    # null: infinite, as signal_scores
            seakr[str(r["id"])] = (step.get("text") or "", {"eigen score U": u,
                                                              STEP_LENGTH: words(step.get("text"))})
        seg = (trace.get("segments") or [None])[0]
        if isinstance(seg, dict) and seg.get("scores"):
            trigger = bool(seg.get("unconfident_words")) or seg.get("trigger") == "refusal"
            ctrla[str(r["id"])] = (seg.get("segment") or "", {TRIGGER: float(trigger),
                                                              "-(lowest score - tau)": -min(seg["scores"]),
                                                              STEP_LENGTH: words(seg.get("segment"))})
    return ("SeaKR", seakr) if seakr else ("CtrlA", ctrla) if ctrla else None


def unaided_text(row) -> str | None:
    """The whole generation of a run that never retrieves, as its trace holds it (SeaKR's CoT chain,
    CtrlA's answer text); None when it holds neither."""
    trace = row.get("trace") if isinstance(row.get("trace"), dict) else {}
    text = trace.get("chain", trace.get("answer"))
    return None if text is None else str(text)


def step_signals(method_rows, unaided_rows, always_rows=None, resamples=1000, unaided="CoT"):
    """A method's score of each question's first reasoning step (first_steps), on a multi-hop run,
    against the answer of the same method without retrieval being wrong (no gold answer inside it:
    is_right) and, given the rows of a run that retrieves at every step (SeaKR's "- S.A. Retrieval"
    ablation, CtrlA's always run), against that run's F1 beating the unaided one's, over all the
    questions and over those the unaided run gets wrong: does the score flag the questions the model
    gets wrong unaided, and the ones retrieval helps? The first step comes before any retrieval and is
    decoded as the unaided run decodes its first sentence (SeaKR's greedy step is CoT's first sentence;
    CtrlA's steered segment is its never-retrieve run's first), so every run of the method scores it
    alike; a question whose unaided generation (where its trace holds it) does not begin with that step
    is left out and counted (`differs`). `unaided` names the unaided run in the targets. Questions present
    in every file given, failed rows left out; None when none is, or the rows hold no first-step score."""
    ok = lambda rows: {str(r["id"]): r for r in rows or () if "error" not in r and "id" in r}
    found, base, always = first_steps(method_rows), ok(unaided_rows), ok(always_rows)
    if found is None:
        return None
    method, first = found
    shared = [i for i in first if i in base and (always_rows is None or i in always)]
    ids = [i for i in shared if (t := unaided_text(base[i])) is None or t.startswith(first[i][0])]
    if not ids:
        return None
    names = list(first[ids[0]][1])
    scores = {name: [first[i][1][name] for i in ids] for name in names}
    wrong = [not is_right(base[i]) for i in ids]
    targets = {f"{unaided}'s answer wrong": (wrong, [True] * len(ids))}
    if always_rows is not None:
        f1 = lambda row: score_record(row)["f1"]
        helps = [f1(always[i]) > f1(base[i]) for i in ids]
        targets[f"retrieving every step beats {unaided}'s F1"] = (helps, [True] * len(ids))
        # the same, on the unaided wrong answers only: does the score tell the ones retrieval mends?
        targets[f"the same, among {unaided}'s wrong answers"] = (helps, wrong)
    out = {"method": method, "n": len(ids), "differs": len(shared) - len(ids), "targets": {}}
    for target, (hits, among) in targets.items():
        out["targets"][target] = {"positives": sum(h for h, a in zip(hits, among) if a), "signals": {}}
        for name, values in scores.items():
            n, _, auc, interval = auroc_over([v if a else None for v, a in zip(values, among)], hits, resamples)
            out["targets"][target]["signals"][name] = {"n": n, "auroc": auc, "interval": interval}
    return out


def signals(rows, resamples=1000):
    """Per signal of a qualifying file: n, wrong, AUROC with its bootstrap interval, and for CtrlA's
    trigger (a 0/1 decision) the share of wrong and of right answers it flags. None otherwise."""
    found = signal_scores(rows)
    if found is None:
        return None
    method, by_name, wrong = found
    out = {"method": method, "signals": {}}
    for name, values in by_name.items():
        n, n_wrong, auc, interval = auroc_over(values, wrong, resamples)
        sig = {"n": n, "wrong": n_wrong, "auroc": auc, "interval": interval}
        if name == TRIGGER:   # a decision, not a score: how often it fires on wrong and on right answers
            x = [v for v in values if v is not None]
            w = [b for v, b in zip(values, wrong) if v is not None]
            sig["flags_wrong"] = round(sum(v for v, b in zip(x, w) if b) / max(sum(w), 1), 6)
            sig["flags_right"] = round(sum(v for v, b in zip(x, w) if not b) / max(len(w) - sum(w), 1), 6)
        out["signals"][name] = sig
    return out


def no_auroc_why(sig):
    """Why a signal has no AUROC: it needs at least one wrong and one right answer."""
    if not sig["n"]:
        return "- (no scored rows)"
    return "- (every answer wrong)" if sig["wrong"] == sig["n"] else "- (no answer wrong)" if not sig["wrong"] else "-"


def signals_table(named, markdown=False):
    """One line per (file, signal): the numbers `signals` gives."""
    header = ["file", "method", "signal", "n", "wrong", "AUROC", "95% interval", "flags wrong / right"]
    body = []
    for name, found in named:
        for sig, v in found["signals"].items():
            body.append([name, found["method"], sig, str(v["n"]), str(v["wrong"]),
                         no_auroc_why(v) if v["auroc"] is None else f"{v['auroc']:.3f}",
                         "-" if v["interval"] is None else f"{v['interval'][0]:.2f} to {v['interval'][1]:.2f}",
                         f"{100 * v['flags_wrong']:.0f}% / {100 * v['flags_right']:.0f}%" if "flags_wrong" in v else "-"])
    return render_table(header, body, markdown, left=3)


def signals_main(argv):
    parser = argparse.ArgumentParser(prog="eval.py signals", description="Each method's own score against "
                                     "wrong answers: AUROC with a bootstrap interval.")
    parser.add_argument("files", nargs="+", help="seakr.py --calibrate, ctrla.py --retrieve monitor-only or "
                        "rowen.py --mode hybrid output files")
    parser.add_argument("--markdown", action="store_true", help="print a GitHub markdown table")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap draws (default 1000)")
    args = parser.parse_args(argv)
    named = []
    for path in args.files:
        try:
            found = signals(read_rows(path), args.resamples)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        if found is None:
            print(f"error: {path}: no signal in it; signals reads seakr.py --calibrate, ctrla.py "
                  "--retrieve monitor-only and rowen.py --mode hybrid outputs", file=sys.stderr)
            sys.exit(2)
        named.append((Path(path).stem, found))
    print(signals_table(named, markdown=args.markdown))


def progress_main(argv):
    parser = argparse.ArgumentParser(prog="eval.py progress", description="A run's cost so far: questions done, "
                                     "wall-clock and CPU hours, where its rows ran (results/README.md's progress "
                                     "rows).")
    parser.add_argument("files", nargs="+", help="run files (JSONL) written by ctrla.py / seakr.py / rowen.py")
    parser.add_argument("--total", type=int, help="the questions the run will answer (its --limit)")
    args = parser.parse_args(argv)
    for path in args.files:
        try:
            rows = read_rows(path)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        print(progress_text(Path(path).stem, progress(rows, args.total)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["signals"]:
        signals_main(sys.argv[2:])
    elif sys.argv[1:2] == ["progress"]:
        progress_main(sys.argv[2:])
    else:
        main()
