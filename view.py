"""A run's traces as one offline HTML page: when each method retrieved, and why, question by question.

    python view.py RUN.jsonl [RUN2.jsonl ...] -o run.html [--open] [--screenshot run.png [--question ID]]

Reads the JSON lines that seakr.py, ctrla.py and rowen.py write (common.run: prediction, gold answers,
the method's trace) and, beside each file, <run>.settings.json, <run>.summary.json and, in a results
folder, benchmarks/run_all.py's figures.json (the answers its table reads again) and a CtrlA run's
<run>.forced.jsonl (the forced answers of its multi-hop chains: benchmarks/force_answers.py). Writes one HTML
file with its CSS and SVG inline and no script, font or image from anywhere else, so it opens offline
from a file:// URL. At the top each run's settings and summary; then the questions, right or wrong,
with a filter (wrong only, retrieved only, where the runs differ); each question expands to:
- SeaKR: the steps as a timeline, each step's eigen score U against delta (bar and numbers), the query
  when it retrieved, the candidate passages with the U of the step regenerated with each and the one
  kept, and the final choice between the two reasoning strategies with their U;
- CtrlA: the generated text, each word shaded by its confidence score minus tau, the flagged words
  marked, each retrieval's queries (the question and TVQ, or CAQ), refusals and rewrites, the passages,
  and on multi-hop questions the forced answer where the chain named none;
- Rowen: the perturbed questions with the answers in English, in the target language and from the
  verifier, each judge verdict, Z_CL, Z_CM and Z against the threshold, the evidence and the repair;
- the prediction against the gold answers, scored by eval.py (EM / F1 / accuracy or the task's metric).
Several runs of the same questions (SeaKR and its CoT baseline, say) are shown side by side.

But: it shows what a trace holds and computes no decision of a method (it imports no method file): a
field a trace lacks (older files, a failed question) is named as missing. SeaKR's delta is read from
the run's settings (--threshold: the delta the run used, its model's default included); an older file
or a --calibrate run does not record it: pass --delta.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import html
import importlib.util
import json
import math
import re
import shutil
import sys
import tempfile
import webbrowser
from pathlib import Path

import eval as metrics

# What each kind of trace should hold (the solve functions of the method files); what a row lacks is
# said under it.
EXPECTED = {
    "SeaKR": ("steps", "passages", "step_answer", "step_score", "read_answer", "read_score", "chosen"),
    "SeaKR, simple QA": ("direct", "retrieved"),
    "SeaKR --calibrate": ("direct", "score"),
    "CoT": ("chain", "answer"),
    "IRCoT": ("steps", "passages", "answer"),
    "CtrlA": ("task", "answer", "segments"),
    "Rowen": ("mode", "threshold", "initial_answer", "perturbed_questions", "answers", "z", "decision",
              "retrieved", "final_answer"),
}
SEAKR_KINDS = ("SeaKR", "SeaKR, simple QA", "SeaKR --calibrate")
ROW_FIELDS = ("question", "answers", "prediction", "trace")
KNOWN_FIELDS = ("id", "dataset", "question", "answers", "label", "best_answer", "correct_answers", "incorrect_answers",
                "prediction", "retrievals", "model_calls", "seconds", "cpu_seconds", "trace", "error")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


class InputError(Exception):
    """Bad input: one line naming the file (and line) and the fix, as common.InputError (common itself
    is not imported: it loads torch, which a page needs not)."""


# ----------------------------------------------------------------------------------------------
# Reading runs

def read_json(path: Path):
    """A settings or summary file beside a run: its object, or None when there is none."""
    if not path.exists():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read ({e}); fix or delete that file") from None
    if not isinstance(found, dict):
        raise InputError(f"{path}: not a JSON object ({type(found).__name__}); fix or delete that file")
    return found


def read_settings(path: Path):
    """The settings file beside a run; its --threshold (SeaKR's delta, Rowen's threshold) must be a number
    or null (the model's default): the page compares U with it, and a string there stopped it mid-way."""
    settings = read_json(path)
    t = (settings or {}).get("--threshold")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))):
        raise InputError(f"{path}: --threshold is {json.dumps(t)}, not a number; write a number (or null for the "
                         "model's default) or delete that file")
    return settings


def load_run(path: Path) -> dict:
    """{name, path, rows, settings, summary} of one run file; a malformed line is an InputError."""
    try:
        rows = metrics.read_rows(path)
    except ValueError as e:
        raise InputError(str(e)) from None
    summary = read_json(path.with_suffix(".summary.json"))
    if summary is None and rows:
        try:
            summary = {**metrics.summarize(rows), "note": "computed from the rows (no summary file)"}
        except ValueError as e:
            summary = {"note": f"no summary: {e}"}
    figures = read_json(path.parent / "figures.json")     # benchmarks/run_all.py's, in a results folder
    why = "cut where they run on, as today's seakr.py cuts them"
    reread = figures.get("reread", {}) if isinstance(figures, dict) else {}
    reread = reread.get(path.stem) if isinstance(reread, dict) else None
    side = path.with_name(path.stem + ".forced.jsonl")     # benchmarks/force_answers.py, beside a CtrlA run
    if side.exists():
        try:
            forced = {str(f.get("id")): f.get("forced") for f in metrics.read_rows(side)}
        except ValueError as e:
            raise InputError(str(e)) from None
        for row in rows:
            if isinstance(row.get("trace"), dict) and "forced" not in row["trace"] and str(row.get("id")) in forced:
                row["trace"] = {**row["trace"], "forced": forced[str(row.get("id"))], "forced_after": side.name}
        answers = figures.get("forced_answers", {}) if isinstance(figures, dict) else {}
        if isinstance(answers.get(path.stem), dict):
            reread, why = answers[path.stem], f"the forced answers of {side.name}, where the chain named none"
    return {"name": path.stem, "path": str(path), "rows": rows, "summary": summary or {},
            "settings": read_settings(path.with_suffix(".settings.json")),
            "reread": reread if isinstance(reread, dict) else {}, "reread_why": why}


def kind_of(trace) -> str | None:
    """Which solve function wrote a trace, from the fields it holds."""
    if not isinstance(trace, dict) or not trace:
        return None
    if "segments" in trace:
        return "CtrlA"
    if {"z", "z_cl", "z_cm", "perturbed_questions"} & set(trace):
        return "Rowen"
    if "direct" in trace:
        return "SeaKR --calibrate" if isinstance(trace["direct"], str) else "SeaKR, simple QA"
    if "chain" in trace:
        return "CoT"
    steps = trace.get("steps")
    if isinstance(steps, list) and steps and all(isinstance(s, dict) and "passage" in s for s in steps):
        return "IRCoT"
    if "steps" in trace or "step_answer" in trace:
        return "SeaKR"
    return None


def has_gold(row: dict) -> bool:
    return any(row.get(k) is not None for k in ("answers", "label", "correct_answers"))


def verdict(row: dict | None) -> str:
    """right, wrong or unknown (no gold answer in the row), by eval.is_right."""
    if row is None or not has_gold(row):
        return "unknown"
    return "right" if metrics.is_right(row) else "wrong"


def retrievals(row: dict | None) -> int:
    n = (row or {}).get("retrievals") or 0
    return n if isinstance(n, (int, float)) else 0


# ----------------------------------------------------------------------------------------------
# Small pieces of HTML

def esc(x) -> str:
    return html.escape("" if x is None else str(x))


def num(x, places: int = 4) -> str:
    """A number as the trace stores it (the methods round to 3 or 4 places); None as 'not recorded'."""
    if x is None:
        return "not recorded"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if math.isinf(x) or math.isnan(x):
        return str(x)
    return f"{x:.{places}f}".rstrip("0").rstrip(".")


def span(cls: str, text) -> str:
    return f'<span class="{cls}">{esc(text)}</span>'


def missing_note(what: list[str]) -> str:
    return f'<p class="missing">Not in this row: {esc(", ".join(what))}.</p>' if what else ""


def bar(value, lo: float, hi: float, threshold=None, alarm: bool = False, width: int = 200) -> str:
    """An inline SVG bar: the track spans lo..hi, the bar reaches `value` (None: the whole track,
    hatched, for +inf), a dark tick marks the threshold; orange when the value calls for retrieval."""
    pos = lambda v: 2 + (width - 4) * min(1.0, max(0.0, (v - lo) / (hi - lo)))
    fill = "#d4760a" if alarm else "#2f8f46"
    reach = width - 2 if value is None else pos(value) if isinstance(value, (int, float)) else 2
    parts = [f'<svg class="bar" width="{width}" height="14" viewBox="0 0 {width} 14" role="img">',
             f'<rect x="1" y="3" width="{width - 2}" height="8" rx="2" fill="#e8e8e8"/>',
             f'<rect x="2" y="3" width="{max(0.0, reach - 2):.1f}" height="8" rx="2" fill="{fill}"'
             + (' fill-opacity="0.5"' if value is None else "") + "/>"]
    if threshold is not None:
        parts.append(f'<rect x="{pos(threshold) - 1:.1f}" y="0" width="2" height="14" fill="#222"/>')
    return "".join(parts) + "</svg>"


def scale(values, extra=()) -> tuple[float, float]:
    """A common range for the bars of one question: every finite value and threshold, padded."""
    vs = [v for v in list(values) + list(extra) if isinstance(v, (int, float)) and math.isfinite(v)]
    if not vs:
        return 0.0, 1.0
    lo, hi = min(vs), max(vs)
    pad = (hi - lo) * 0.1 or 1.0
    return lo - pad, hi + pad


def table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """Cells are HTML already (escaped by the caller)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr" + (f' class="{r[0]}"' if r[0] else "") + ">" + "".join(f"<td>{c}</td>" for c in r[1:])
                   + "</tr>" for r in rows)
    return f'<table class="{cls}"><tr>{head}</tr>{body}</table>'


# ----------------------------------------------------------------------------------------------
# SeaKR: steps, U against delta, re-ranked candidates, the final choice

def seakr_delta(settings: dict | None, trace: dict, given: float | None) -> tuple[float | None, str]:
    """(delta, where it comes from): the run's --threshold, a trace's own, or view.py's --delta."""
    if settings and settings.get("--threshold") is not None:
        return settings["--threshold"], "from the run's settings"
    if isinstance(trace.get("delta"), (int, float)):
        return trace["delta"], "from the trace"
    if given is not None:
        return given, "given to view.py (--delta)"
    return None, "not recorded: the run used the model's default (pass --delta to view.py)"


def seakr_scores(trace) -> list:
    """Every U a SeaKR trace holds (steps, candidates, the two strategies, a direct answer)."""
    if kind_of(trace) not in SEAKR_KINDS:
        return []
    steps = [s for s in trace.get("steps") or [] if isinstance(s, dict)]
    cands = [c for s in steps for c in s.get("candidates") or []] + list(trace.get("candidates") or [])
    direct = trace.get("direct") if isinstance(trace.get("direct"), dict) else {}
    return ([s.get("score") for s in steps] + [c.get("score") for c in cands if isinstance(c, dict)]
            + [trace.get(k) for k in ("step_score", "read_score", "score")] + [direct.get("score")])


def u_cell(u, delta, lo, hi) -> str:
    """U as a bar against delta and as its number (None: +inf, no usable sample)."""
    alarm = u is None or (delta is not None and u > delta)
    return (f'<span class="nowrap">{bar(u, lo, hi, delta, alarm, 120)} U = '
            f'{span("u", "+inf" if u is None else num(u))}</span>')


def step_reason(step: dict, delta) -> str:
    """Why a step retrieved or not, in words: the rule (paper 3.1) read off the step's numbers."""
    u, retrieved, text = step.get("score"), step.get("retrieved"), step.get("text") or ""
    if not text.strip():
        why = "empty step: retrieve"
    elif u is None:
        why = "U = +inf (no usable sample): retrieve"
    elif delta is None:
        why = "delta unknown"
    else:
        why = "U &gt; delta: retrieve" if u > delta else "U &le; delta: keep the step"
    if retrieved and why.endswith("keep the step"):
        why += "; retrieved anyway (this run retrieves at every step)"
    elif retrieved is False and why.endswith("retrieve"):
        why += ("; not retrieved: a step that states the answer is never checked" if "answer is" in text.lower()
                else "; not retrieved (this run does not retrieve)")
    return why


def seakr_html(trace: dict, settings, given_delta, lo: float, hi: float) -> str:
    """lo..hi: the range of the bars, shared by the runs shown side by side."""
    delta, source = seakr_delta(settings, trace, given_delta)
    direct = trace.get("direct")
    if isinstance(direct, str) and delta is None:   # --calibrate uses no delta: it is what U calibrates
        source = ("a calibration run retrieves nothing and uses no delta: its U beside whether the answer is "
                  "right is what `--calibrate` picks delta from (pass --delta to view.py to mark one)")
    out = [f'<p class="explain">delta = {span("delta", num(delta))} ({esc(source)}): SeaKR retrieves when a '
           "step's eigen score U (the spread of the hidden states of k sampled steps: its uncertainty) is above "
           "delta. The dark tick on each bar is delta.</p>"]
    if isinstance(direct, dict):      # simple QA: one direct answer, then each passage alone
        out.append(f'<p>Direct answer: <b>{esc(direct.get("answer"))}</b> {u_cell(direct.get("score"), delta, lo, hi)}'
                   f' &rarr; {"retrieve" if trace.get("retrieved") else "keep it"}</p>'
                   f'<p class="gen">{esc(direct.get("text"))}</p>')
    elif isinstance(direct, str):     # --calibrate: the direct answer and its scores
        rows = [["", esc(k), span("num", num(trace[k]))]
                for k in ("mean_logprob", "perplexity", "multi_perplexity", "ln_entropy") if k in trace]
        out.append(f'<p class="gen">{esc(direct)}</p><p>{u_cell(trace.get("score"), delta, lo, hi)}</p>'
                   + table(["signal", "value"], rows))
    steps = [s for s in trace.get("steps") or [] if isinstance(s, dict)]
    if steps:
        out.append('<h4>Reasoning steps</h4><ol class="timeline">')
        for s in steps:
            out.append(f'<li class="step{" retrieved" if s.get("retrieved") else ""}">'
                       f'<p class="gen">{esc(s.get("text")) or "<i>(empty step)</i>"}</p>'
                       f'<p>{u_cell(s.get("score"), delta, lo, hi)} &middot; {esc(s.get("samples", "?"))} samples'
                       f' &middot; {step_reason(s, delta)}</p>')
            if s.get("retrieved"):
                out.append(f'<p>Query: <q>{esc(s["query"])}</q></p>' if "query" in s else missing_note(["query"]))
                out.append(candidates_html(s.get("candidates"), s.get("chosen"), lo, hi, "step"))
            out.append("</li>")
        out.append("</ol>")
    if "candidates" in trace:
        out.append(candidates_html(trace["candidates"], trace.get("chosen"), lo, hi, "answer"))
    rows = []
    for key, p, label in (("rationales", "step", "from the rationales (the steps)"),
                          ("knowledge", "read", "from the passages read")):
        if f"{p}_answer" in trace:
            chosen = trace.get("chosen") == key
            rows.append(["kept" if chosen else "", label,
                         f'<b>{esc(trace[f"{p}_answer"])}</b>' + (" &#10003; chosen" if chosen else ""),
                         u_cell(trace.get(f"{p}_score"), None, lo, hi), esc(trace.get(f"{p}_text", ""))])
    if rows:
        out.append("<h4>Self-aware reasoning: the answer with the lower U is final</h4>"
                   + table(["strategy", "answer", "U", "text"], rows, "final")
                   + '<p class="small">A missing or &lsquo;unknown&rsquo; answer loses; a tie goes to the '
                   "passages.</p>")
    if trace.get("passages"):
        out.append(f'<p class="small">Passages kept: {esc(", ".join(map(str, trace["passages"])))}</p>')
    return "".join(out)


def candidates_html(cands, chosen, lo, hi, what: str) -> str:
    """Self-aware re-ranking (paper 3.2): each passage, the U of the step (or answer) regenerated with it."""
    if not cands:
        return ('<p class="small">No new passage, or a repeated query: the loop stops here.</p>' if cands is None
                else '<p class="small">No passage found.</p>')
    rows = [["kept" if c.get("id") == chosen else "", "&#10003; kept" if c.get("id") == chosen else "",
             f'{esc(c.get("title"))} <small>{esc(c.get("id"))}</small>',
             span("num", num(c["bm25"])) if "bm25" in c else "", u_cell(c.get("score"), None, lo, hi),
             esc(c.get(what if what == "answer" else "text")) or "<i>(empty)</i>"] for c in cands]
    return (f'<p class="small">Re-ranking: the {what} is regenerated with each passage; the passage whose {what} '
            "has the lowest U is kept.</p>"
            + table(["", "passage", "BM25", f"U of the regenerated {what}", what], rows, "cands"))


def ircot_html(trace: dict) -> str:
    rows = [["", str(i), f'<q>{esc(s.get("query"))}</q>', esc(s.get("passage")), esc(s.get("text"))]
            for i, s in enumerate(trace.get("steps") or [], 1) if isinstance(s, dict)]
    return ("<p>IRCoT retrieves before every step (the question, then the last step) and reads the top passage.</p>"
            + table(["step", "query", "passage", "step text"], rows)
            + f'<p>Answer: <b>{esc(trace.get("answer"))}</b></p>')


def cot_html(trace: dict) -> str:
    """CoT, and IRCoT in simple QA: one chain of thought with BM25's top passage for the question."""
    how = (f"with BM25's top passage for the question ({esc(', '.join(map(str, trace['passages'])))}; IRCoT)"
           if trace.get("passages") else "no retrieval")
    return (f'<p>One chain of thought, {how}:</p><p class="gen">{esc(trace.get("chain"))}</p>'
            f'<p>Answer: <b>{esc(trace.get("answer"))}</b></p>')


# ----------------------------------------------------------------------------------------------
# CtrlA: per-word confidence, flagged words, queries, refusals

# ctrla.py's MAX_REFUSALS and BARE_QUESTION_AT, copied (view.py imports no method file; a test compares them)
CTRLA_MAX_REFUSALS = 6      # refused regenerations per question; the 7th ends the answer
CTRLA_BARE_QUESTION_AT = 6  # the 6th refusal searches the bare question, not a rewrite


def word_scores(segment: str, tokens: list, scores: list) -> list[tuple[str, float | None, list]]:
    """(word, lowest score of its tokens, [(token, score)]) for each whitespace word of the segment.

    The trace keeps each token's text, not its position: a token is found in the segment right after
    the previous one (whitespace between them only); one that is not (the first may reach back into the
    prompt; a byte of a character split across tokens) is tied to the position reached."""
    spans, at = [], 0
    for tok, score in zip(tokens, scores):
        piece = str(tok).strip()
        i = segment.find(piece, at) if piece else -1
        if i < 0 or segment[at:i].strip():
            spans.append((at, at, tok, score))
        else:
            spans.append((i, i + len(piece), tok, score))
            at = i + len(piece)
    words = []
    for m in re.finditer(r"\S+", segment):
        mine = [(t, s) for a, b, t, s in spans
                if (a < m.end() and b > m.start()) or (a == b and m.start() <= a < m.end())]
        finite = [s for _, s in mine if isinstance(s, (int, float))]
        words.append((m.group(), min(finite) if finite else None, mine))
    return words


def shade(score, top: float) -> str:
    """Red below 0 (unconfident), blue above, stronger the farther from 0 (top: the largest |score|)."""
    if score is None:
        return "transparent"
    alpha = 0.12 + 0.55 * min(1.0, abs(score) / top)
    return f"rgba(207,34,46,{alpha:.2f})" if score < 0 else f"rgba(9,105,218,{alpha:.2f})"


def ctrla_words(seg: dict, top: float) -> str:
    """The segment's words, shaded; the flagged ones (the trace's unconfident_words, in order) marked."""
    flagged = list(seg.get("unconfident_words") or [])
    out = []
    for word, low, toks in word_scores(seg.get("segment") or "", seg.get("tokens") or [], seg.get("scores") or []):
        # the copy flagged: the monitor flags a word with an unconfident token, not an earlier confident copy
        mark = bool(flagged) and word == flagged[0] and low is not None and low < 0
        if mark:
            flagged.pop(0)
        state = ("flagged: unconfident and new information" if mark else
                 "unconfident, not new information (in the question or an earlier sentence, or a stop word)"
                 if low is not None and low < 0 else "confident")
        tip = "; ".join(f"{t!r}: {num(s, 3)}" for t, s in toks) or "no token score"
        tag = "mark" if mark else "span"
        out.append(f'<{tag} class="w{" flag" if mark else ""}" style="background:{shade(low, top)}" '
                   f'title="{esc(state)}&#10;{esc(tip)}">{esc(word)}<sub class="ws">'
                   f'{esc(num(low, 3)) if low is not None else ""}</sub></{tag}>')
    return " ".join(out)


def query_labels(queries: list, question, first: bool, bare: bool = False) -> list[str]:
    """What each query of a retrieval is (paper 3.2.4): CAQ alone, or [the question, TVQ]; later rounds
    are rewrites after a refusal (Prompt B.2), the question kept as it is, except the round after the 6th
    refusal (bare), which searches the question alone and rewrites nothing (ctrla.rewrite)."""
    if bare:
        return [f"the bare question (refusal {CTRLA_BARE_QUESTION_AT} searches it, not a rewrite)"] * len(queries)
    if len(queries) == 1 and (first or queries[0] != question):
        return ["CAQ: the question and the segment without its flagged words (Eq. 3)" if first
                else "CAQ, rewritten by the model (Prompt B.2)"]
    return ["the question" if q == question else "TVQ: a query the model wrote to verify the segment (Prompt B.1)"
            if first else "rewritten by the model (Prompt B.2)" for q in queries]


def ctrla_round(j: int, r: dict, seg: dict, question, later: bool) -> str:
    """One search of a trigger. A round with a "segment" regenerated the segment with its passages: refused
    when a later round followed (older traces) or the step records its refusal n. One without (today's
    ctrla.py, after refusal n) searched the rewritten queries, or the bare question at the 6th, and the
    next segment reads its passages: there is no regenerated text to show."""
    n, regenerated = seg.get("refusal"), "segment" in r
    bare = j > 0 and not regenerated and n == CTRLA_BARE_QUESTION_AT
    queries = r.get("queries") or []
    qs = "".join(f'<li><span class="small">{esc(label)}:</span> <q>{esc(q)}</q></li>'
                 for q, label in zip(queries, query_labels(queries, question, j == 0, bare)))
    docs = ", ".join(f'{esc(d.get("title"))} <small>{esc(d.get("id"))}</small>' for d in r.get("passages") or [])
    after = ("" if not j else f" (after refusal {n}: the bare question, not a rewrite)" if bare else
             f" (after refusal {n}: the queries are rewritten)" if n and not regenerated else
             " (after a refusal: the query is rewritten)")
    if regenerated:
        refused = later or "own_knowledge" in seg or n is not None
        badge = f' <b class="refusal">refusal{f" {n}" if n is not None else ""}</b>' if refused else ""
        tail = f'<p>Regenerated: <span class="gen">{esc(r.get("segment"))}</span>{badge}</p>'
    else:
        tail = '<p class="small">Nothing regenerated: the next segment is written with these passages.</p>'
    return (f'<div class="round"><b>Retrieval {j + 1}</b>{after}<ul>{qs}</ul>'
            f'<p class="small">Passages read: {docs or "none"}</p>{tail}</div>')


def ctrla_html(trace: dict, question) -> str:
    segs = [s for s in trace.get("segments") or [] if isinstance(s, dict)]
    top = max([abs(x) for s in segs for x in s.get("scores") or [] if isinstance(x, (int, float))] + [1e-9])
    out = ['<p class="legend">Each word is shaded by its confidence score minus tau (its lowest token\'s): '
           f'<span class="w" style="background:{shade(-top, top)}">red below 0</span> is unconfident, '
           f'<span class="w" style="background:{shade(top, top)}">blue</span> confident; the small number is the '
           'score. <mark class="w flag">Outlined</mark> words are flagged (unconfident and new information) and '
           'trigger retrieval; a refusal triggers it too.</p><ol class="timeline">']
    for seg in segs:
        rounds = seg.get("rounds") or []
        out.append(f'<li class="seg{" retrieved" if rounds else ""}"><p class="words">{ctrla_words(seg, top)}</p>')
        if "tokens" not in seg:
            out.append('<p class="small">Not monitored (this run does not retrieve).</p>')
        else:
            flagged = seg.get("unconfident_words")
            out.append(f'<p class="small">Trigger: <b class="trigger">{esc(seg.get("trigger") or "none")}</b>'
                       + (f" &middot; flagged: {esc(', '.join(flagged))}" if flagged else "") + "</p>")
        out += [ctrla_round(j, r, seg, question, j + 1 < len(rounds)) for j, r in enumerate(rounds)]
        n = seg.get("refusal")
        if isinstance(n, int) and n > CTRLA_MAX_REFUSALS:
            out.append(f'<p class="small">Refusal {n}, more than the {CTRLA_MAX_REFUSALS} a question is allowed: '
                       "the answer ends here, with no rewrite and no further search.</p>")
        if "own_knowledge" in seg:
            out.append('<p>Still refusing when the rewrites ended (K of them, or one that repeated its query): '
                       'answered without passages: '
                       f'<span class="gen">{esc(seg["own_knowledge"])}</span></p>')
        if "accepted" in seg:
            out.append(f'<p>Kept: <span class="gen">{esc(seg["accepted"])}</span></p>')
        if seg.get("tokens"):
            cells = [["", esc(repr(t)), span("num", num(s, 3))] for t, s in zip(seg["tokens"], seg.get("scores") or [])]
            out.append("<details><summary>tokens and scores</summary>"
                       + table(["token", "score &minus; tau"], cells, "tokens") + "</details>")
        out.append("</li>")
    out.append(f'</ol><p>Answer text: <span class="gen">{esc(trace.get("answer"))}</span></p>'
               f'<p class="small">Search rounds: {span("search-rounds", num(trace.get("search_rounds")))} &middot; '
               f'refused regenerations: {span("refusals", num(trace.get("refusals")))} (at most '
               f"{CTRLA_MAX_REFUSALS}: the {CTRLA_MAX_REFUSALS + 1}th ends the answer)</p>")
    if trace.get("forced") is not None:
        after = f' <small>(computed after the run: {esc(trace["forced_after"])})</small>' if "forced_after" in trace else ""
        out.append('<p>The chain named no answer; forced, as DRAGIN\'s evaluation does: <span class="gen">'
                   f'&hellip; So the answer is<b>{esc(trace["forced"])}</b></span>{after}</p>')
    return "".join(out)


# ----------------------------------------------------------------------------------------------
# Rowen: perturbations, answers in two languages and from the verifier, verdicts, Z

def verdict_cell(v, text) -> str:
    cls, said = {True: ("yes", "&#10003; consistent"), False: ("no", "&#10007; not consistent")}.get(
        v, ("unread", "? unreadable"))
    return f'<span class="v {cls}">{said}</span>' + (f"<br><small>{esc(text)}</small>" if text else "")


def rowen_html(trace: dict, settings) -> str:
    xs = trace.get("perturbed_questions") or []
    lang = esc((settings or {}).get("--target-language") or "the target language")
    cols = [("answers", "answer r<sup>j</sup> (English)", None)]
    if "target_answers" in trace:
        cols += [("translations", f"question in {lang}", None),
                 ("target_answers", f"answer r<sub>T</sub><sup>j</sup> ({lang})", None),
                 ("cl_verdicts", "cross-language verdict", "cl_verdict_texts")]
    if "verifier_answers" in trace:
        cols += [("verifier_answers", "verifier's answer r<sub>V</sub><sup>j</sup>", None),
                 ("cm_verdicts", "cross-model verdict", "cm_verdict_texts")]
    pick = lambda key, j: (trace.get(key) or [])[j] if j < len(trace.get(key) or []) else None
    rows = [["", str(j + 1), esc(x)] + [verdict_cell(pick(key, j), pick(texts, j)) if texts else esc(pick(key, j))
                                         for key, _, texts in cols] for j, x in enumerate(xs)]
    alpha, t, mode = trace.get("alpha", 1.0), trace.get("threshold"), trace.get("mode")
    gauges = []
    for key, label, top in (("z_cl", "Z_CL (share of consistent cross-language pairs, Eq. 4)", 1),
                            ("z_cm", "Z_CM (share of consistent cross-model pairs, Eq. 5)", 1),
                            ("z", {"hybrid": f"Z = Z_CL + {num(alpha)} &times; Z_CM (hybrid, Eq. 6)",
                                   "cl": "Z = Z_CL (Rowen-CL)", "cm": "Z = Z_CM (Rowen-CM)"}.get(mode, "Z"),
                             1 + (alpha if mode == "hybrid" else 0))):
        z = trace.get(key)
        if isinstance(z, (int, float)):
            mark = t if key == "z" else None
            gauges.append(["", label, bar(z, 0, top, mark, mark is not None and z < mark) + " " + span("z", num(z))])
    decision = trace.get("decision")
    said = ("no decision recorded" if decision is None else
            "Z &lt; threshold: retrieve and repair" if decision else "Z &ge; threshold: keep r<sub>0</sub>")
    if decision is not None and trace.get("retrieved", decision) != decision:
        said += (f"; this run {'always' if trace['retrieved'] else 'never'} retrieves (a baseline), so it "
                 + ("retrieved" if trace["retrieved"] else "kept r<sub>0</sub>"))
    out = [f'<h4>Stage 1: M answers</h4><p>Short answer r<sub>0</sub>: <b>{esc(trace.get("initial_answer"))}</b></p>'
           f'<details><summary>chain of thought t<sub>0</sub></summary>'
           f'<p class="gen">{esc(trace.get("initial_long_answer"))}</p></details>',
           f"<h4>Stage 2: {len(xs)} perturbed questions, answered and judged</h4>",
           table(["j", "perturbed question x<sup>j</sup>"] + [c[1] for c in cols], rows, "rowen"),
           table(["score", "value against the threshold " + span("threshold", num(t))], gauges, "zs"),
           f"<p>Decision: <b>{said}</b></p>"]
    if trace.get("queries") or trace.get("evidence"):
        queries = trace.get("queries") or []
        asked = ("the perturbed questions" if queries == xs else
                 "; ".join(f"<q>{esc(q)}</q>" for q in queries))
        out.append(f'<h4>Stage 3: search and repair</h4><p class="small">Queries: {asked}.</p><ol>'
                   + "".join(f"<li>{esc(e)}</li>" for e in trace.get("evidence") or []) + "</ol>"
                   + (f'<p>Repair output: <span class="gen">{esc(trace["repair_output"])}</span></p>'
                      if "repair_output" in trace else ""))
    out.append(f'<p>Final answer: <b>{esc(trace.get("final_answer"))}</b></p>')
    return "".join(out)


# ----------------------------------------------------------------------------------------------
# The page

MARKS = {"right": "&#10003;", "wrong": "&#10007;", "unknown": "?"}


def score_text(row: dict) -> str:
    if not has_gold(row):
        return "no gold answer in this row"
    names = {"em": "EM", "f1": "F1", "acc": "accuracy", "bleu": "BLEU", "rouge_l": "ROUGE-L",
             "closer_to_correct": "closer to a correct answer"}
    return " &middot; ".join(f'{names.get(k, k)} {span("m-" + k, num(v, 3))}'
                             for k, v in metrics.score_record(row).items())


def gold_html(row: dict) -> str:
    if row.get("label") is not None:
        return f"Gold label: <b>{esc(row['label'])}</b>"
    if row.get("correct_answers") is not None:
        return (f"Best answer: <b>{esc(row.get('best_answer'))}</b><br><small>correct: "
                f"{esc(' | '.join(row['correct_answers']))}<br>incorrect: "
                f"{esc(' | '.join(row.get('incorrect_answers') or []))}</small>")
    answers = row.get("answers")
    answers = [answers] if isinstance(answers, str) else answers or []
    return "Gold: " + (" | ".join(f'<b class="gold">{esc(a)}</b>' for a in answers) if answers else "not recorded")


def retrieved_text(row) -> str:
    n = retrievals(row)
    return f"{num(n)} retrieval{'s' * (n != 1)}" if n else ""


def reread_html(run: dict, row: dict, qid) -> str:
    """The prediction as the results table reads it, where that differs from the run's (figures.json)."""
    if str(qid) not in run["reread"]:
        return ""
    again = {**row, "prediction": run["reread"][str(qid)]}
    v = verdict(again)
    return (f'<p class="reread">The results table reads this answer again as <b>{esc(again["prediction"])}</b> '
            f'<span class="mark {v}">{MARKS[v]} {v}</span> <small>({score_text(again)}; figures.json beside '
            f"this file, from benchmarks/run_all.py: {esc(run.get('reread_why', ''))})</small></p>")


def run_column(run: dict, row: dict | None, delta, lo: float, hi: float, qid=None) -> str:
    """One run's answer to one question: prediction, scores, the prediction as the results table reads it
    where that differs, and the method's trace."""
    if row is None:
        return f'<div class="col"><h3>{esc(run["name"])}</h3><p class="missing">Not in this run.</p></div>'
    v = verdict(row)
    trace, kind = row.get("trace"), kind_of(row.get("trace"))
    out = [f'<div class="col"><h3>{esc(run["name"])} <small>{esc(kind or "")}</small></h3>',
           f'<p>Prediction: <b class="prediction">{esc(row.get("prediction", "not recorded"))}</b> '
           f'<span class="mark {v}">{MARKS[v]} {v}</span></p>',
           f'<p class="small">{score_text(row)} &middot; {retrieved_text(row) or "no retrieval"}'
           + "".join(f" &middot; {esc(row[k])} {unit}" for k, unit in (("model_calls", "model calls"), ("seconds", "s"),
                                                                          ("cpu_seconds", "s of CPU"))
                     if k in row) + "</p>", reread_html(run, row, qid)]
    others = [k for k in row if k not in KNOWN_FIELDS]
    if others:
        out.append('<p class="small">Other fields: '
                   + " &middot; ".join(f"{esc(k)} = {span('num', num(row[k]))}" for k in others) + "</p>")
    if "error" in row:
        out.append(f'<p class="error">This question failed: {esc(row["error"])}</p>')
    out.append(missing_note([k for k in ROW_FIELDS if k not in row]
                            + [f"trace.{k}" for k in EXPECTED.get(kind, ()) if k not in trace]))
    if kind in SEAKR_KINDS:
        out.append(seakr_html(trace, run["settings"], delta, lo, hi))
    elif kind == "CoT":
        out.append(cot_html(trace))
    elif kind == "IRCoT":
        out.append(ircot_html(trace))
    elif kind == "CtrlA":
        out.append(ctrla_html(trace, row.get("question")))
    elif kind == "Rowen":
        out.append(rowen_html(trace, run["settings"]))
    elif trace:
        out.append('<p class="missing">A trace of a kind this page does not know: shown as stored below.</p>')
    else:
        out.append('<p class="missing">No trace in this row.</p>')
    out.append('<details class="raw"><summary>the row as stored</summary><pre>'
               + esc(json.dumps(row, ensure_ascii=False, indent=1)) + "</pre></details></div>")
    return "".join(out)


def question_html(n: int, qid, runs: list[dict], rows: list, delta) -> str:
    """One question: a summary line (each run's mark, prediction, retrievals) that expands to the runs
    side by side. Its classes serve the filters: all-right, retrieved, differ."""
    marks = [verdict(r) for r in rows]
    present = {m for m, r in zip(marks, rows) if r is not None}
    classes = ["q", "all-right" if present == {"right"} else "some-wrong"]
    classes += ["retrieved"] * any(retrievals(r) for r in rows) + ["differ"] * (len(present) > 1)
    cells = "".join(f'<span class="cell {m}"><span class="mark {m}">{MARKS[m]}</span> '
                    f'{esc("(not in this run)" if r is None else r.get("prediction", "(no prediction)"))} '
                    f'<span class="ret">{retrieved_text(r)}</span></span>' for m, r in zip(marks, rows))
    first = next(r for r in rows if r is not None)
    question = first.get("question") or f"(no question in this row; id {qid})"
    # SeaKR's bars share one range across the runs, so that equal U look equal
    deltas = [seakr_delta(run["settings"], r["trace"], delta)[0] for run, r in zip(runs, rows)
              if seakr_scores((r or {}).get("trace"))]
    lo, hi = scale([u for r in rows for u in seakr_scores((r or {}).get("trace"))], deltas)
    return (f'<details class="{" ".join(classes)}" id="q{n}" data-id="{esc(qid)}"><summary>'
            f'<span class="n">{n}</span><span class="qt">{esc(question)}</span>{cells}</summary>'
            f'<div class="body"><p>{gold_html(first)} <small>id {esc(qid)}</small></p><div class="cols">'
            + "".join(run_column(run, r, delta, lo, hi, qid) for run, r in zip(runs, rows)) + "</div></div></details>")


def run_header(run: dict) -> str:
    """A run's summary (eval.summarize's figures, percentages as eval.py prints them) and settings."""
    s = run["summary"]
    keys = [k for k in metrics.COLUMNS if k in s] + ["failed"] * ("failed" in s)
    cell = lambda k: num(100 * s[k], 1) if k in metrics.PERCENT else num(s[k], 2)
    summary = table(keys, [[""] + [span("s-" + k, cell(k)) for k in keys]], "summary") if keys else ""
    note = f'<p class="small">{esc(s["note"])}</p>' if s.get("note") else ""
    if run["reread"]:
        note += (f'<p class="reread">The results table reads {len(run["reread"])} of these answers again '
                 f"(figures.json beside this file: {esc(run.get('reread_why', ''))}); this "
                 "page marks the answers as run, and each of those questions shows the answer as read again.</p>")
    settings = run["settings"]
    if settings is None:
        sets = (f'<p class="missing">No {esc(Path(run["path"]).with_suffix(".settings.json").name)} beside this '
                "file: its settings are not recorded (an older run).</p>")
    else:
        sets = (f"<details><summary>settings ({len(settings)})</summary>"
                + table(["setting", "value"], [["", esc(k), esc(v)] for k, v in settings.items()], "settings")
                + "</details>")
    return (f'<div class="run"><h2>{esc(run["name"])} <small>{esc(run["path"])} &middot; {len(run["rows"])} '
            f"questions</small></h2>{summary}{note}{sets}</div>")


def render(runs: list[dict], delta: float | None = None) -> str:
    """The whole page for these runs, as one string; questions matched across runs by id."""
    by_id, order = [], []
    for run in runs:
        ids = {}
        for i, row in enumerate(run["rows"], 1):
            ids.setdefault(row.get("id", f"line {i}"), row)
        by_id.append(ids)
        order += [q for q in ids if q not in order]
    questions = "".join(question_html(n, q, runs, [ids.get(q) for ids in by_id], delta)
                        for n, q in enumerate(order, 1))
    several = len(runs) > 1
    # plain HTML and CSS: a checked box hides the questions of a class (see CSS), no script needed
    filters = ('<input type="checkbox" id="only-wrong"><label for="only-wrong">wrong only'
               + " (in some run)" * several + '</label><input type="checkbox" id="only-retrieved">'
               '<label for="only-retrieved">retrieved only</label>'
               + '<input type="checkbox" id="only-differ"><label for="only-differ">where the runs differ</label>'
               * several)
    head = "".join(f'<span class="cell">{esc(r["name"])}</span>' for r in runs)
    title = " vs ".join(r["name"] for r in runs)
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<meta name="viewport" content="width=device-width"><style>{CSS}</style></head>'
            f'<body style="--runs:{len(runs)}"><h1>{esc(title)}</h1><p class="small">Each run\'s settings and '
            "summary, then every question: click one to see when and why the method retrieved. &#10003; right / "
            "&#10007; wrong (eval.py: the gold answer is in the prediction; TruthfulQA: closer to a correct answer; "
            "StrategyQA: the label), then how often it retrieved. Made by view.py from the run files.</p>"
            + "".join(run_header(r) for r in runs)
            + f'<h2>Questions ({len(order)})</h2>{filters}<div class="questions"><div class="head">'
            f'<span class="n">#</span><span class="qt">question</span>{head}</div>{questions}</div></body></html>')


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;
  margin:20px auto;max-width:1400px;padding:0 16px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:18px 0 6px}h3{font-size:14px;margin:4px 0}
h4{font-size:13px;margin:12px 0 4px}small,.small{color:#59636e;font-size:12px}
.run{border:1px solid #d1d9e0;border-radius:6px;padding:6px 12px;margin:8px 0}
table{border-collapse:collapse;margin:4px 0}th{background:#f6f8fa}table.summary td{text-align:right}
td,th{border:1px solid #d1d9e0;padding:2px 6px;text-align:left;vertical-align:top;font-size:13px;
  overflow-wrap:break-word}
input[type=checkbox]{margin:0 4px 8px 14px}.questions{border:1px solid #d1d9e0;border-radius:6px}
.head,.q>summary{display:grid;grid-template-columns:36px minmax(240px,2fr) repeat(var(--runs),minmax(160px,1fr));
  gap:8px;padding:5px 8px;align-items:baseline}
.head{font-weight:600;background:#f6f8fa;border-bottom:1px solid #d1d9e0}.q{border-bottom:1px solid #eef0f2}
.q>summary{cursor:pointer;list-style:none}.q>summary::-webkit-details-marker{display:none}
.q>summary:hover{background:#f6f8fa}.q[open]>summary{background:#eef4ff;font-weight:600}
.n{color:#59636e}.cell{overflow-wrap:anywhere}.ret{color:#9a6700;font-size:12px}
.mark.right{color:#1a7f37;font-weight:700}.mark.wrong{color:#cf222e;font-weight:700}.mark.unknown{color:#59636e}
#only-wrong:checked~.questions .q.all-right{display:none}
#only-retrieved:checked~.questions .q:not(.retrieved){display:none}
#only-differ:checked~.questions .q:not(.differ){display:none}
.body{padding:6px 12px 12px;background:#fbfcfd}
.cols{display:grid;grid-template-columns:repeat(var(--runs),minmax(0,1fr));gap:12px}
.col{border:1px solid #d1d9e0;border-radius:6px;padding:6px 10px;background:#fff;min-width:0;overflow-x:auto}
.missing{color:#9a6700;background:#fff8c5;padding:2px 6px;border-radius:4px}
.error{color:#cf222e;background:#ffebe9;padding:4px 6px;border-radius:4px}
.gen{font-family:ui-serif,Georgia,serif;overflow-wrap:anywhere}
.timeline{list-style:none;padding-left:14px;border-left:3px solid #d1d9e0}
.timeline>li{position:relative;margin:0 0 10px;padding-left:8px}.timeline p{margin:2px 0}
.timeline>li:before{content:"";position:absolute;left:-23px;top:5px;width:12px;height:12px;border-radius:50%;
  background:#2f8f46}
.timeline>li.retrieved:before{background:#d4760a}
svg.bar{vertical-align:middle}.nowrap{white-space:nowrap}.explain{color:#404850}
.u,.z,.num,.delta{font-variant-numeric:tabular-nums;font-weight:600}tr.kept td{background:#dafbe1}
.w{border-radius:3px;padding:0 1px;line-height:1.9}.w sub{font-size:9px;color:#404850;margin-left:1px}
mark.flag{background:none;outline:2px solid #cf222e;font-weight:700;color:inherit}
.reread{color:#404850;border-left:3px solid #9a6700;padding-left:6px}.trigger{color:#9a6700}.refusal{color:#cf222e}
.round{border-left:3px solid #d4760a;margin:4px 0;padding:2px 8px}.round ul{margin:2px 0;padding-left:18px}
.v.yes{color:#1a7f37}.v.no{color:#cf222e}.v.unread{color:#9a6700}table.rowen td{max-width:260px}
details.raw pre{white-space:pre-wrap;font-size:11px;max-height:300px;overflow:auto;background:#f6f8fa;padding:6px}
"""


# ----------------------------------------------------------------------------------------------
# A real browser: the screenshot for the README, and the test that opens the page

def chromium_missing() -> str | None:
    """Why headless Chromium cannot be driven here (None when it can)."""
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        return "Chromium or its driver is not installed: apt-get install chromium chromium-driver"
    if importlib.util.find_spec("selenium") is None:   # optional: only the screenshot and the browser test
        return "Selenium is not installed: pip install -r requirements.txt"
    return None


@contextlib.contextmanager
def chromium(width: int = 1200, height: int = 900):
    """Headless Chromium driven by Selenium with Debian's chromium-driver, fenced off from the network
    (no first-run, sync, component updates or QUIC) with a fresh profile, removed on exit."""
    if chromium_missing():
        raise InputError(f"a screenshot needs headless Chromium: {chromium_missing()}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    with tempfile.TemporaryDirectory() as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium")
        for flag in CHROMIUM_FLAGS + (f"--window-size={width},{height}", f"--user-data-dir={profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})    # console messages, for the test
        driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
        try:
            yield driver
        finally:
            driver.quit()


def screenshot(page: Path, png: Path, question: str | None = None, width: int = 1200) -> str:
    """Open the page from its file:// URL, expand one question (by id; default: the first that
    retrieved, else the first) by clicking it, and save that question as a PNG. Returns its id."""
    from selenium.webdriver.common.by import By
    with chromium(width) as driver:
        driver.get(page.resolve().as_uri())
        items = driver.find_elements(By.CSS_SELECTOR, "details.q")
        if not items:
            raise InputError(f"{page}: no question to show")
        ids = [q.get_attribute("data-id") for q in items]
        if question is not None and question not in ids:
            raise InputError(f"--question {question}: no such id in the runs; the first ids are {', '.join(ids[:3])}")
        pick = ids.index(question) if question else next(
            (i for i, q in enumerate(items) if "retrieved" in q.get_attribute("class").split()), 0)
        item = items[pick]
        item.find_element(By.TAG_NAME, "summary").click()
        # subtle: a screenshot keeps only what is inside the window: the window is made as tall as the
        # page (at most 10,000 px), then Chromium's own capture is clipped to the question's box
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(width, min(height + 300, 10_000))
        box = driver.execute_script("const r = arguments[0].getBoundingClientRect(); return "
                                    "{x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}", item)
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "clip": {**box, "scale": 1}})
        try:
            png.write_bytes(base64.b64decode(shot["data"]))
        except OSError as e:
            raise InputError(f"--screenshot {png}: cannot write it ({e.strerror}); pass a writable path") from None
        return ids[pick]


def check_png_path(png: Path) -> None:
    """A --screenshot path that cannot be a file (its folder missing, or a folder itself) is said before
    the page is written and Chromium started, not after."""
    if png.is_dir():
        raise InputError(f"--screenshot {png}: a folder, not a file; pass a PNG file's path")
    if not png.parent.is_dir():
        raise InputError(f"--screenshot {png}: no folder {png.parent}; make it or pass a path in an existing one")


def main(argv=None):
    p = argparse.ArgumentParser(description="A run's traces as one offline HTML page (seakr.py, ctrla.py, "
                                            "rowen.py output files; several runs of the same questions side by side)")
    p.add_argument("runs", nargs="+", metavar="RUN.jsonl", help="output files of seakr.py, ctrla.py or rowen.py")
    p.add_argument("-o", "--output", help="the HTML file to write (default: the first run's path with .html)")
    p.add_argument("--delta", type=float, help="SeaKR's delta for runs that do not record it (older files, "
                                               "--calibrate runs)")
    p.add_argument("--open", action="store_true", help="open the page in the default web browser")
    p.add_argument("--screenshot", metavar="PNG", help="also save one expanded question as a PNG (headless Chromium)")
    p.add_argument("--question", metavar="ID",
                   help="the question the screenshot shows (default: the first that retrieved)")
    args = p.parse_args(argv)
    if args.screenshot:
        check_png_path(Path(args.screenshot))
    runs = [load_run(Path(f)) for f in args.runs]
    out = Path(args.output) if args.output else Path(args.runs[0]).with_suffix(".html")
    try:
        out.write_text(render(runs, args.delta), encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {out} ({e.strerror}); pass -o with a writable path") from None
    print(f"wrote {out}: open {out.resolve().as_uri()}")
    if args.screenshot:
        shown = screenshot(out, Path(args.screenshot), args.question)
        print(f"wrote {args.screenshot}: question {shown}")
    if args.open:
        webbrowser.open(out.resolve().as_uri())


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
