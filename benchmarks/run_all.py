"""Every method and its baselines on the same questions, model and corpus: one table and one plot.

    python benchmarks/run_all.py --data FILE --limit 50 --out results/hotpotqa50 [--jobs 2]
    python benchmarks/run_all.py --out results/hotpotqa50 --table-only      # table + plot from the files
    python benchmarks/run_all.py ... --model M --deltas ... --taus ... -- --device cuda --dtype float16

Runs (each a plain command line of seakr.py / ctrla.py / rowen.py, written to OUT/NAME.jsonl with its
log in OUT/NAME.log; a run already complete is skipped, a partial one resumes):
- SeaKR at its default delta and at the --deltas; the papers' baselines from seakr.py: CoT (one chain,
  no retrieval), IRCoT (retrieve at every step, BM25's top hit) and the "- S.A. Retrieval" ablation;
- CtrlA at its default tau, at the --taus, never and always retrieving;
- named with --runs only, for the signals (eval.signals): seakr-calibrate (seakr.py --calibrate),
  ctrla-monitor-only, rowen-hybrid-never (Z recorded, no retrieval);
- Rowen once with --mode hybrid --retrieve always: it computes Z_CL and Z_CM and repairs every answer,
  so Rowen-CL, -CM, -Hybrid at any threshold (the default, rowen.THRESHOLDS, and the --zs) and never-retrieve are
  re-read from that one run (analysis.at_threshold: the predictions a run of that mode and threshold
  gives; calls and seconds stay the hybrid run's).
Every run shares one call cache (--cache, default outputs/call-cache; speed.through_cache): a model call
whose inputs all equal one an earlier run made is served from it, so a threshold sweep or an ablation
computes only the calls that differ from the runs already made, and each file is the one a run without
the cache writes. --no-cache turns it off.
Writes OUT/table.md (EM, F1, acc, retrieval rate, retrievals, model calls and seconds per question;
then each run against its method's no-retrieval run (CoT, CtrlA never, Rowen never) and, if it decides when
to retrieve, its always-retrieve run (SeaKR - S.A. Retrieval, CtrlA always, Rowen always), question by question,
with a bootstrap interval: eval.paired_difference; then, for every file in OUT that holds a method's own score beside its unaided answers, that
signal's AUROC against wrong answers: eval.signals; with a SeaKR run and CoT's (a CtrlA run and its
never run), SeaKR's eigen score of each question's first step (CtrlA's monitor over its first segment)
against the unaided run's wrong answers and against where retrieving at every step helps:
eval.step_signals; and from a seakr-calibrate file, SeaKR's threshold
by the paper's 5.3 rule and ours: analysis.threshold_table), OUT/figures.json and, if matplotlib is installed (an optional dependency of this command only),
OUT/f1_vs_retrieval.png: F1 against retrieval rate (acc_vs_retrieval.png for StrategyQA's accuracy), one line
per method through its thresholds, its baselines as named squares. SeaKR's answers (its baselines' too) are read again as the
official code reads them (eval.reread_seakr: runs before the official reading read them to a sentence end); the table
says how many changed and where the official reading would have taken another course (course_changes), and
figures.json holds the changed answers (its "reread"), which view.py shows; every EM/F1 run is also read under
that one rule, CtrlA's too (one_rule), and the reading across methods comes from that table and its pairs
(every_other_pair: each run against every run above it that no table pairs it with). A CtrlA
run's multi-hop chains that name no answer take the forced answers of its side file, NAME.forced.jsonl
(`benchmarks/force_answers.py`, for runs made before ctrla.py forced them itself; eval.with_forced): the
table says how many, figures.json holds the counts ("forced") and the changed answers
("forced_answers"), which view.py shows; a run whose ctrla.py forced them in its loop is counted too
("forced_in_run"). A run file with fewer questions than the directory's longest (a
run still going) is left out of all of it and named under the table (figures.json: "in_progress").

The default sweeps suit SmolLM2-135M: SeaKR delta 2.5 and 0.8 are about the median and the 25th
percentile of the step scores of our first 30 HotpotQA questions (default 3.01); CtrlA tau -9.8 and
-6.8 are the calibrated -7.82 moved by -2 and +1, which moved the first segment's trigger rate on those
questions from 67% to about 30% and 93%. They spread the retrieval rate; another model needs its own
(with --model, run_all.py asks for --deltas and --taus).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import eval as metrics  # noqa: E402  (the project's metrics; no model is loaded here)

# Sweep values for SmolLM2-135M (see above); another model gives its own (--deltas, --taus, --zs).
DELTAS, TAUS, ZS = [2.5, 0.8], [-9.8, -6.8], [0.5, 1.0]
HYBRID = "rowen-hybrid-always"


def runs(a) -> dict:
    """name -> (script, extra arguments, method, label in the table), in table order."""
    out = {"seakr": ("seakr.py", [], "SeaKR", "SeaKR (default delta)")}
    out.update({f"seakr-delta{d:g}": ("seakr.py", ["--threshold", f"{d:g}"], "SeaKR", f"SeaKR, delta {d:g}")
                for d in a.deltas})
    out["cot"] = ("seakr.py", ["--retrieve", "never"], "SeaKR", "CoT (no retrieval)")
    out["ircot"] = ("seakr.py", ["--retrieve", "ircot"], "SeaKR", "IRCoT (retrieve every step, top hit)")
    out["seakr-no-sa-retrieval"] = ("seakr.py", ["--retrieve", "no-sa-retrieval"], "SeaKR",
                                    "SeaKR - S.A. Retrieval (ablation: retrieve every step)")
    out["ctrla"] = ("ctrla.py", [], "CtrlA", "CtrlA (default tau)")
    out.update({f"ctrla-tau{t:g}": ("ctrla.py", ["--tau", f"{t:g}"], "CtrlA", f"CtrlA, tau {t:g}") for t in a.taus})
    out["ctrla-never"] = ("ctrla.py", ["--retrieve", "never"], "CtrlA", "CtrlA, never retrieve")
    out["ctrla-always"] = ("ctrla.py", ["--retrieve", "always"], "CtrlA", "CtrlA, always retrieve")
    out[HYBRID] = ("rowen.py", ["--mode", "hybrid", "--retrieve", "always"], "Rowen", "Rowen, always retrieve")
    out = {n: v for n, v in out.items() if n in a.runs or a.runs == ["all"]}
    out.update({n: v for n, v in SIGNAL_RUNS.items() if n in a.runs})   # only when named
    return out


# Runs that measure a method's signal rather than its answers (eval.signals reads them): never in
# "all", named with --runs on a question file of their own (README: Results).
SIGNAL_RUNS = {
    "seakr-calibrate": ("seakr.py", ["--calibrate"], "SeaKR", "SeaKR direct answers with U (--calibrate)"),
    "ctrla-monitor-only": ("ctrla.py", ["--retrieve", "monitor-only"], "CtrlA", "CtrlA, never retrieve, monitor recorded"),
    "rowen-hybrid-never": ("rowen.py", ["--mode", "hybrid", "--retrieve", "never"], "Rowen",
                           "Rowen, never retrieve (Z recorded)"),
}


def command(name: str, a) -> list[str]:
    script, extra, _, _ = runs(a)[name]
    return ([sys.executable, str(ROOT / script), "--data", str(a.data), "--corpus", a.corpus,
             "--output", str(a.out / f"{name}.jsonl")] + (["--limit", str(a.limit)] if a.limit else [])
            + (["--model", a.model] if a.model else [])
            + (["--verifier", a.verifier] if a.verifier and script == "rowen.py" else [])
            + (["--cache", str(a.cache)] if getattr(a, "cache", None) else []) + extra + a.extra)


def done(name: str, a) -> bool:
    path = a.out / f"{name}.jsonl"
    return a.limit is not None and path.exists() and len(metrics.read_rows(path)) >= a.limit


# exit statuses of a run stopped by SIGINT or SIGTERM (Python's own 130 after KeyboardInterrupt, a shell's
# 128 + N, Popen's -N for a process killed by the signal itself)
INTERRUPTED = {130, 143, -signal.SIGINT, -signal.SIGTERM}


def swept(out: Path, prefix: str, first: list[float]) -> list[float]:
    """The thresholds of the sweep files OUT/PREFIX<value>.jsonl: those of `first` in its order, then the rest
    in ascending order."""
    found = set()
    for path in out.glob(f"{prefix}*.jsonl"):
        try:
            found.add(float(path.stem[len(prefix):]))
        except ValueError:
            continue        # another run's file that shares the prefix
    return [v for v in first if v in found] + sorted(found - set(first))


def run_all(names: list[str], a) -> None:
    """The runs not yet complete, `a.jobs` at a time (each a fresh process, its log in OUT/NAME.log).
    A run that fails goes in the summary and the next one starts; a run stopped by a signal (someone
    stopping the sweep) stops it all: the others are stopped too and none starts (each resumes where its
    file ends on the next call)."""
    todo = [n for n in names if not done(n, a)]
    running: list[tuple] = []      # (name, process, start time, log file)
    stopped = None
    while todo or running:
        while todo and len(running) < a.jobs:
            name = todo.pop(0)
            cmd = command(name, a)
            print("running:", " ".join(cmd[1:]), flush=True)
            log = open(a.out / f"{name}.log", "a")
            running.append((name, subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log), time.time(), log))
        time.sleep(2)
        for item in list(running):
            name, proc, start, log = item
            if proc.poll() is not None:
                running.remove(item)
                log.close()
                status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode}, see {name}.log)"
                said = [line.split(": ", 1)[1] for line in (a.out / f"{name}.log").read_text(errors="replace")
                        .splitlines() if line.startswith("call cache ")]     # common.run's last word on it
                print(f"{name}: {status} in {time.time() - start:.0f} s" + (f" ({said[-1]})" if said else ""),
                      flush=True)
                if proc.returncode in INTERRUPTED and stopped is None:
                    stopped = name
                    todo.clear()
                    for _, other, _, _ in running:
                        other.send_signal(signal.SIGINT)
    if stopped is not None:
        raise SystemExit(f"stopped: {stopped} was interrupted, so no further run started; "
                         "the same command resumes every run where its file ends")


# Run files made before the baselines got the papers' names (results/hotpotqa50, results/2wikimultihopqa50):
# read when present, under labels that say what their code ran.
LEGACY = {"seakr-never": ("SeaKR", "SeaKR --retrieve never (old code: two chains chosen by U; not CoT)"),
          "seakr-always": ("SeaKR", "SeaKR --retrieve always (old code: the - S.A. Retrieval ablation; not IRCoT)")}


def row_id(row: dict, line: int) -> str:
    """How view.py names a run's row: its id, or "line N" (1-based) for a row without one."""
    return str(row.get("id", f"line {line}"))


# what the reading before the official one took for a named answer: "the answer is" and a word after it
_NAMED_BEFORE = re.compile(r"the answer is\s*:?\s*\w", re.IGNORECASE)


def course_changes(rows: list[dict]) -> list[str]:
    """Ids of the questions (as eval.reread_seakr names them) where the official reading would have taken another
    course than the reading the run was made with, so that reading the final answer again does not give what
    today's code would answer: a step kept before the last names an answer by the official reading (a comma
    or period after it, "So the answer is August 25, 1963": today's loop stops there), or a text whose answer
    the run read has no comma or period after it (a CoT chain, a reasoning strategy's text: today's code
    forces one there). A loop's last step is not checked: a step that names its answer without a period is
    final today where the ". " stop cut it (seakr.step_answer), which its text alone cannot tell. A step kept
    after a retrieval is the chosen candidate's regenerated text (SeaKR), the step's text otherwise (IRCoT)."""
    out = []
    for i, r in enumerate(rows, 1):
        trace = r.get("trace") or {}
        texts = []
        for step in trace.get("steps") or []:
            chosen = [c for c in step.get("candidates") or () if c.get("id") == step.get("chosen")]
            texts.append(chosen[0]["text"] if chosen else step.get("text") or "")
        early = any(metrics.read_answer(t) is not None for t in texts[:-1])
        answered = [trace.get(k) or "" for k in ("chain", "step_text", "read_text")]
        if early or any(_NAMED_BEFORE.search(t) and metrics.read_answer(t) is None for t in answered):
            out.append(row_id(r, i))
    return out


def table_rows(a, reread: dict | None = None, course: dict | None = None,
               in_progress: dict | None = None, forced: dict | None = None) -> list[tuple[str, str, str, dict, list]]:
    """(name, method, label, summary, rows) for every run file present, the Rowen rows re-read, the SeaKR
    answers read again (eval.read_run; `reread` gets the changed predictions of each run, `course` the
    questions of each where the official reading would have changed the course: course_changes). A run with fewer
    questions than the directory's longest (one still running, as the background plan's runs are while
    their files grow) is left out, and `in_progress` gets its [questions done, of]: a table compares
    runs over the same questions. A CtrlA run's multi-hop chains that name no answer take the forced
    answers of its side file (eval.with_forced); `forced` gets (rows that took one, rows still without,
    {id: the answer it changed to}) per CtrlA run that has such chains."""
    import analysis  # here, not at the top: it imports torch through common
    import rowen
    out = []
    named = {**runs(a), **SIGNAL_RUNS, **{n: ("seakr.py", None, m, label) for n, (m, label) in LEGACY.items()}}
    found = {name: metrics.read_rows(a.out / f"{name}.jsonl") for name in named if (a.out / f"{name}.jsonl").exists()}
    most = max(map(len, found.values()), default=0)
    for name, (script, _, method, label) in named.items():
        rows = found.get(name)
        if not rows:        # no file, or a run that has just started
            continue
        if len(rows) < most:
            if in_progress is not None:
                in_progress[name] = [len(rows), most]
            continue
        rows, info = metrics.read_run(a.out / f"{name}.jsonl", script, name in SIGNAL_RUNS and script == "seakr.py")
        if "reread" in info and info["reread"] and reread is not None:
            reread[name] = info["reread"]
        if (script == "seakr.py" and name not in SIGNAL_RUNS and course is not None
                and not metrics.read_officially(a.out / f"{name}.jsonl") and (ids := course_changes(rows))):
            course[name] = ids      # checked in every older run: a step may change the course where no answer does
        if "forced" in info and forced is not None:
            forced[name] = tuple(info["forced"])
        if name != HYBRID:
            out.append((name, method, label, rows))
            continue
        pair = analysis.run_models(a.out / f"{name}.jsonl")  # the (M, M_V) whose default thresholds apply,
        scoring = analysis.run_scoring(a.out / f"{name}.jsonl")  # at the run's alpha, k and language,
        task = analysis.rows_task(rows)                       # and the task: each has its own
        modes = analysis.modes_from_run(rows, *pair, scoring)
        default = {m: rowen.default_threshold(m, *pair, task, scoring=scoring) for m in ("hybrid", "cl", "cm")}
        out += [(f"rowen-{m}", method, f"Rowen-{m.upper() if m != 'hybrid' else 'Hybrid'} (threshold "
                 f"{default[m]:g})", modes[m]) for m in ("hybrid", "cl", "cm")]
        zs = list(a.zs)
        if (cal := analysis.rate_calibration(rows)) is not None and cal["threshold"] not in zs + [default["hybrid"]]:
            zs.append(cal["threshold"])     # this run's own Z at the paper's rate (no answer read)
        out += [(f"rowen-hybrid-t{t:g}", method, f"Rowen-Hybrid, threshold {t:g}"
                 + (" (the paper's retrieval rate on these Z)" if cal and t == cal["threshold"] else ""),
                 analysis.at_threshold(rows, "hybrid", t)) for t in zs]
        out += [("rowen-never", method, "Rowen, never retrieve", modes["never"]), (name, method, label, rows)]
    return [(name, method, label, metrics.summarize(rows), rows) for name, method, label, rows in out]


# Each run against its method's runs that never and always retrieve (CoT and the "- S.A. Retrieval" ablation
# are SeaKR's: the paper's own comparisons, its Tables 1 and 3); a run that itself retrieves at every step
# (IRCoT among them) only against the one that never does, and that one against neither
BASELINES_OF = {"SeaKR": ("cot", "seakr-no-sa-retrieval"), "CtrlA": ("ctrla-never", "ctrla-always"),
                "Rowen": ("rowen-never", HYBRID)}
RETRIEVE_ALWAYS = {"ircot", "seakr-no-sa-retrieval", "ctrla-always", HYBRID}
# a pair is compared by its paper's metric where that is not eval.main_metric's: CtrlA reports accuracy on
# short-form QA (its 4, "For short-form QA, we report the accuracy"), where main_metric takes F1
PAPER_METRIC = {("CtrlA", "popqa"): "acc", ("CtrlA", "triviaqa"): "acc"}


def paired_rows(rows) -> list[tuple[str, str, dict]]:
    """(label, baseline label, eval.paired_difference) for each run against its method's never-retrieve run
    and, for a run that decides when to retrieve, its always-retrieve run, where those are present."""
    by_name = {name: (label, run_rows) for name, _, label, _, run_rows in rows}
    out = []
    for name, method, label, _, run_rows in rows:
        if name in SIGNAL_RUNS or name in LEGACY:
            continue
        never, always = BASELINES_OF.get(method, (None, None))
        metric = PAPER_METRIC.get((method, next((r.get("dataset") for r in run_rows if r.get("dataset")), None)))
        for base in (never, None if name in RETRIEVE_ALWAYS or name == never else always):
            if base in by_name and name != base and (
                    found := metrics.paired_difference(run_rows, by_name[base][1], metric=metric)):
                out.append((label, by_name[base][0], found))
    return out


def pair_table(pairs) -> list[str]:
    """(label, baseline label, eval.paired_difference) pairs as the lines of a markdown table, in points."""
    return ["| run | against | n | metric | difference | 95% interval |", "|---|---|---:|---|---:|---:|"] + [
        f"| {label} | {base} | {d['n']} | {d['metric']} | {100 * d['difference']:+.1f} | "
        f"{100 * d['interval'][0]:+.1f} to {100 * d['interval'][1]:+.1f} |" for label, base, d in pairs]


def paired_text(pairs) -> str:
    """The paired differences in markdown."""
    lines = ["Each run against its method's run that never retrieves and, if it decides when to retrieve, "
             "its run that always does, on the questions both answered: the mean "
             "per-question difference in F1 (StrategyQA, and CtrlA on PopQA and TriviaQA: accuracy; TruthfulQA: "
             "closer to a correct answer), "
             "in points, with a 95% percentile bootstrap interval (questions resampled, 1000 draws; "
             "`eval.paired_difference`). An interval that holds 0 is no verdict.", ""] + pair_table(pairs)
    return "\n".join(lines)


def read_under_one_rule(rows) -> dict:
    """{name: its rows with each prediction under eval.common_reading} for every EM/F1 run; empty when the
    rule changes no prediction."""
    read = {name: [{**r, "prediction": metrics.common_reading(r.get("prediction"))} for r in run_rows]
            for name, _, _, s, run_rows in rows if "f1" in s and name not in SIGNAL_RUNS and name not in LEGACY}
    if all(a.get("prediction") == b.get("prediction") for name, _, _, _, run_rows in rows if name in read
           for a, b in zip(run_rows, read[name])):
        return {}
    return read


def one_rule(rows) -> list[tuple[str, str, dict, list]]:
    """Every EM/F1 run read under one rule, the official SeaKR reading (eval.common_reading: each prediction
    cut at its first comma or period), so that methods whose own readings differ compare on the same one:
    (name, label, summary, [(baseline label, eval.paired_difference)] for the pairs of paired_rows whose
    predictions the rule changes). Empty when no run's reading differs from it."""
    if not (read := read_under_one_rule(rows)):
        return []
    again = [(name, method, label, metrics.summarize(read[name]), read[name])
             for name, method, label, _, _ in rows if name in read]
    pairs = paired_rows(again)
    changed = {label for name, _, label, _, run_rows in rows if name in read
               and any(a.get("prediction") != b["prediction"] for a, b in zip(run_rows, read[name]))}
    return [(name, label, s, [(base, d) for run, base, d in pairs if run == label and (run in changed or base in changed)])
            for name, _, label, s, _ in again]


def every_other_pair(rows, pairs) -> list[tuple[str, str, dict]]:
    """Under the one rule, every pair of EM/F1 runs that `pairs` (paired_rows') does not hold (across methods,
    and a method's runs beyond its baselines), each once, the run lower in the table against the one above it:
    (label, baseline label, eval.paired_difference). Empty where one_rule is."""
    read = read_under_one_rule(rows)
    runs = [(label, read[name]) for name, _, label, _, _ in rows if name in read]
    held = {frozenset((label, base)) for label, base, _ in pairs}
    return [(label, base, found) for i, (label, run_rows) in enumerate(runs) for base, base_rows in runs[:i]
            if frozenset((label, base)) not in held and (found := metrics.paired_difference(run_rows, base_rows))]


def one_rule_text(common) -> str:
    """one_rule in markdown: the reading across methods comes from this table."""
    lines = ["Every run read under one rule, the official SeaKR reading (`eval.common_reading`: each answer cut "
             "at its first comma or period); the reading across methods comes from this table:", "",
             "| run | EM | F1 |", "|---|---:|---:|"]
    lines += [f"| {label} | {100 * s['em']:.1f} | {100 * s['f1']:.1f} |" for _, label, s, _ in common]
    if pairs := [(label, base, d) for _, label, _, ps in common for base, d in ps]:
        lines += ["", "The pairs whose answers this rule changes, under it:", ""] + pair_table(pairs)
    return "\n".join(lines)


def every_other_pair_text(pairs) -> str:
    """every_other_pair in markdown."""
    lines = ["Every other pair, under the one rule: each run against every run above it that the tables above "
             "do not pair it with, across methods too (F1, `eval.paired_difference` as above). Read the other "
             "way round, a difference and its interval change sign (the same draws, where both runs list the "
             "questions in the same order, as runs of one question file do). Each interval holds for its pair alone: "
             "among this many pairs, some interval will miss 0 by chance.", ""] + pair_table(pairs)
    return "\n".join(lines)


PROVENANCE = ROOT / "results" / "provenance.json"   # the pinned commits, and notes for files run elsewhere


def code_ids(settings: dict) -> dict:
    """{file name: "N bytes, sha256 X"} of every code file a run's settings name ("method code": "seakr.py, N
    bytes, sha256 X"; "common.py code": "N bytes, sha256 X"; ...)."""
    out = {}
    for key, value in settings.items():
        if key == "method code" and isinstance(value, str):
            name, _, value = value.partition(", ")
            out[name] = value
        elif key.endswith(" code") and isinstance(value, str):
            out[key[:-len(" code")]] = value
    return out


def file_id_at(commit: str, name: str, known: dict) -> str | None:
    """How a run's settings name the project file `name` as it was at `commit` (its size and the start of its
    sha256, speed.file_id), from git; None where git or the file at that commit is not there."""
    if (commit, name) not in known:
        found = subprocess.run(["git", "show", f"{commit}:{name}"], cwd=ROOT, capture_output=True)
        data = found.stdout if found.returncode == 0 else None
        known[commit, name] = None if data is None else f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}"
    return known[commit, name]


def provenance(out: Path) -> tuple[dict, list[str]]:
    """For every run file and side file in `out`: the pinned commit (results/provenance.json) whose files match
    every code hash its settings record, or its note there. Returns ({file: commit or "note: ..."}, the files
    that match no pinned commit and have no note: what `make results` fails on)."""
    pins = json.loads(PROVENANCE.read_text()) if PROVENANCE.exists() else {"pinned": {}, "notes": {}}
    known, found, bad = {}, {}, []
    for path in sorted(out.glob("*.jsonl")):
        key = f"{out.name}/{path.name}"
        settings_file = path.with_suffix(".settings.json")
        ids = code_ids(json.loads(settings_file.read_text())) if settings_file.exists() else {}
        match = next((c for c in pins["pinned"] if ids and all(file_id_at(c, n, known) == v for n, v in ids.items())),
                     None)
        if match:
            found[path.name] = match
        elif key in pins["notes"]:
            found[path.name] = "note: " + pins["notes"][key]
        else:
            found[path.name] = "no pinned commit" if ids else "no settings"
            bad.append(path.name)
    return found, bad


# how a CtrlA chain that names no answer gets one, as the table says
FORCE_HOW = "ctrla.force_answer: the chain, \" So the answer is\" and 20 greedy tokens, as the evaluation the paper follows does"

# Each method's first-step signal (eval.step_signals): (its run without retrieval, its run that retrieves
# at every step, the first's name in the targets, the score's name, the step's name, what is read)
STEP_RUNS = {"SeaKR": ("cot", "seakr-no-sa-retrieval", "CoT", "U", "step",
                       "the eigen score U of each question's first reasoning step, and the step's length in words"),
             "CtrlA": ("ctrla-never", "ctrla-always", "ctrla-never", "the monitor", "segment",
                       "the confidence monitor over each question's first segment (its trigger, and its lowest "
                       "token score minus tau), and the segment's length in words")}


def step_signal(rows) -> list[tuple[str, str, dict]]:
    """(method, the run it read, eval.step_signals) per method of STEP_RUNS over the table's rows (answers
    as read again): the first run of the method listed whose first steps hold its score, against the
    method's run without retrieval, and against its run that retrieves at every step where present;
    nothing for a method without both."""
    by_name = {name: run_rows for name, _, _, _, run_rows in rows}
    out = []
    for method, (unaided, always, label, *_) in STEP_RUNS.items():
        if unaided not in by_name:
            continue
        for name, m, _, _, _ in rows:
            if m == method and name not in ("ircot", unaided, *SIGNAL_RUNS, *LEGACY):
                found = metrics.step_signals(by_name[name], by_name[unaided], by_name.get(always), unaided=label)
                if found:
                    out.append((method, name, found))
                    break
    return out


def step_signal_text(method: str, name: str, found: dict) -> str:
    """eval.step_signals in markdown."""
    _, always, label, score, unit, what = STEP_RUNS[method]
    against = "the ablation" if method == "SeaKR" else always
    left = (f" {found['differs']} question(s) whose {label} run does not begin with that {unit} are left out."
            if found.get("differs") else "")
    helps = (f" and against retrieving at every {unit} ({against}) beating {label}'s F1 (over all {found['n']} "
             f"questions, then over those {label} gets wrong)" if len(found["targets"]) > 1 else
             f" (over all {found['n']} questions; against where retrieving at every {unit} helps once {against} "
             f"has run)")
    lines = [f"{method}'s step signal on these questions (`eval.step_signals`, {score} read from {name}; the first "
             f"{unit} comes before any retrieval and is {label}'s first sentence, so every {method} run here "
             f"scores it alike): {what}, against {label}'s answer being wrong{helps}; AUROC 0.5 = no signal.{left}",
             "",
             "| target | questions | signal | AUROC | 95% interval |", "|---|---:|---|---:|---:|"]
    for target, t in found["targets"].items():
        for sig, v in t["signals"].items():
            auc = "-" if v["auroc"] is None else f"{v['auroc']:.3f}"
            ci = "-" if v["interval"] is None else f"{v['interval'][0]:.2f} to {v['interval'][1]:.2f}"
            lines.append(f"| {target} | {t['positives']} of {v['n']} | {sig} | {auc} | {ci} |")
    return "\n".join(lines)


def calibration(out: Path) -> dict | None:
    """SeaKR's threshold rules (analysis.threshold_table) over OUT/seakr-calibrate.jsonl, if present: each
    direct answer's eigen score against whether it holds a gold answer (as `analysis.py calibration`)."""
    import analysis  # here, not at the top: it imports torch through common
    path = out / "seakr-calibrate.jsonl"
    if not path.exists():
        return None
    pairs = analysis.calibration_pairs(metrics.read_rows(path))
    return analysis.threshold_table(pairs) if any(math.isfinite(score) for score, _ in pairs) else None


def calibration_text(t: dict) -> str:
    """The calibration's candidates and the two recommended deltas, in markdown."""
    gap = (f"delta = {t['gap']:g} (accuracy kept minus retrieved: {t['gap_points']:.1f} points)"
           if t["gap"] is not None else "no candidate")
    paper = f"delta = {t['paper']:g}" if t["paper"] is not None else "met at no candidate"
    unscored = f" and {t['n_unscored']} with none (U = +inf: retrieved at every delta)" if t["n_unscored"] else ""
    lines = [f"SeaKR's threshold from `seakr-calibrate` ({t['n'] - t['n_unscored']} direct answers with a finite "
             f"eigen score U{unscored}, {t['n_right']} holding a gold answer; U from {t['min']:.3f} to {t['max']:.3f}, median "
             f"{t['median']:.3f}): our rule {gap}; the paper's 5.3 condition (kept questions under 80% wrong) "
             f"{paper}. Retrieve iff U > delta.", "",
             "| delta | retrieval rate | acc kept | acc retrieved | n kept |", "|---:|---:|---:|---:|---:|"]
    pct = lambda x: "-" if x != x else f"{100 * x:.1f}"    # nan (an empty side) as "-"
    lines += [f"| {r['delta']:g} | {pct(r['retrieval_rate'])} | {pct(r['acc_kept'])} | {pct(r['acc_retrieved'])} "
              f"| {r['n_kept']} |" for r in t["table"]]
    return "\n".join(lines)


def rowen_rates(files: dict) -> dict:
    """For the Rowen runs among {name: rows} that record Z over a task's questions (rowen-hybrid-never and
    rowen-hybrid-always): the hybrid threshold at the paper's retrieval rate for the task
    (analysis.rate_calibration; Z alone, no answer read)."""
    import analysis  # here, not at the top: it imports torch through common
    out = {}
    for name, rows in files.items():
        if name in ("rowen-hybrid-never", HYBRID) and (cal := analysis.rate_calibration(rows)) is not None:
            out[name] = cal
    return out


def rowen_rate_text(cal: dict) -> str:
    """analysis.rate_text, then each candidate threshold with its retrieval rate, in markdown."""
    import analysis
    return (analysis.rate_text(cal) + ". Retrieve iff Z < threshold.\n\n| threshold | retrieval rate |\n|---:|---:|\n"
            + "\n".join(f"| {t:g} | {100 * r:.1f} |" for t, r in cal["table"]))


# A method's own runs through its thresholds (the line of the plot): the default run and the sweep's
SWEEPS = {"SeaKR": ("seakr", "seakr-delta"), "CtrlA": ("ctrla", "ctrla-tau"), "Rowen": ("rowen-hybrid", "rowen-hybrid-t")}


def at_code_default(out: Path, name: str) -> bool:
    """A SeaKR threshold run whose --threshold is the code's own delta for its model (seakr.THRESHOLDS), as
    seakr-delta0.41 is for Qwen2.5-Coder-1.5B: the run at the default threshold, though its name gives the
    delta (the plan passes it explicitly; a settings file that cannot be read says no)."""
    import common
    import seakr
    try:
        saved = common.read_settings(out / f"{name}.settings.json")
    except common.InputError:
        return False
    return saved.get("--threshold") is not None and saved.get("--threshold") == seakr.THRESHOLDS.get(saved.get("--model"))


# What the plot puts against the retrieval rate: the first of these that every plotted run has (F1 for
# short-answer QA, accuracy for StrategyQA, TruthfulQA's closer-to-correct)
PLOT_METRICS = (("f1", "F1"), ("acc", "accuracy"), ("closer_to_correct", "closer to a correct answer"))


def plot_metric(rows) -> tuple[str, str] | None:
    """(key, label) of the metric the plot shows for these table rows (PLOT_METRICS), None if none fits."""
    return next((m for m in PLOT_METRICS if all(m[0] in s for _, _, _, s, _ in rows)), None)


def point_labels(sweep, others, default: str, near=(0.0, 0.0)) -> list[tuple[float, float, str, bool]]:
    """The plot's labels of one method's points, (x, y, name) each: (x, y, text, above). The default run and
    the baselines are named above their point, the sweep's thresholds below it ("Z 0.92", "δ 0.41"); runs
    on the same side of points at most `near` (dx, dy) apart share one label at the first one's place, their
    names joined by ", " (printed one over another, they were unreadable: IRCoT's 38.9 and the ablation's 38.8)."""
    names = {}
    for x, y, name in sweep + others:
        short = name.replace("seakr-", "").replace("ctrla-", "").replace("rowen-", "")
        above = name == default or (x, y, name) in others
        key = next((k for k in names if k[2] == above and abs(k[0] - x) <= near[0] and abs(k[1] - y) <= near[1]),
                   (x, y, above))
        names.setdefault(key, []).append(
            short if above else short.replace("delta", "δ ").replace("tau", "τ ").replace("hybrid-t", "Z "))
    return [(x, y, ", ".join(shorts), above) for (x, y, above), shorts in names.items()]


def plot(rows, out: Path, title: str) -> Path | None:
    """The task's metric against retrieval rate, into OUT/<metric>_vs_retrieval.png (f1_vs_retrieval.png for
    short-answer QA): per method, a line through its threshold runs in order of retrieval rate, and its
    baselines (CoT, IRCoT, never, always, ...) as squares of the same colour, each named (the signal runs,
    which never retrieve, left out; no plot without another run). Returns the picture's path."""
    rows = [r for r in rows if r[0] not in SIGNAL_RUNS]
    metric = plot_metric(rows)
    if not rows or metric is None:
        return None
    key, label = metric
    path = out / f"{key}_vs_retrieval.png"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ys = [100 * s[key] for _, _, _, s, _ in rows]
    near = (1.0, 0.03 * (max(ys) - min(ys)))      # a label's height: about 3% of the axis at this size
    starred = False
    for method, color in (("SeaKR", "tab:blue"), ("CtrlA", "tab:orange"), ("Rowen", "tab:green")):
        pts = sorted((100 * s["retrieval_rate"], 100 * s[key], name)
                     for name, m, _, s, _ in rows if m == method and name not in ("rowen-cl", "rowen-cm"))
        default, prefix = SWEEPS[method]
        sweep = [p for p in pts if p[2] == default or p[2].startswith(prefix)]
        named = {p[2] for p in sweep}
        star = default if default in named else next(    # else the sweep run at the code's default threshold
            (n for n in sorted(named) if method == "SeaKR" and at_code_default(path.parent, n)), None)
        others = [p for p in pts if p not in sweep]
        if sweep:
            ax.plot([p[0] for p in sweep], [p[1] for p in sweep], "-o", color=color, alpha=0.8,
                    label=f"{method}, through its thresholds")
        if others:
            ax.plot([p[0] for p in others], [p[1] for p in others], "s", color=color, alpha=0.8, linestyle="none",
                    label=f"{method}'s baselines" if sweep else method)
        for x, y, text, above in point_labels(sweep, others, default, near):
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4 if above else -10),
                        fontsize=7, color=color)
        for x, y, name in sweep:
            if name == star:   # the run at the method's default threshold
                ax.plot([x], [y], "*", color=color, markersize=14)
                starred = True
    ax.set_xlabel("retrieval rate (% of questions)")
    ax.set_ylabel(f"{label} (%)")
    ax.set_title(title + ("  (star: default threshold)" if starred else ""), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="question file (e.g. HotpotQA dev distractor JSON)")
    p.add_argument("--corpus", default="contexts", help="passed to each method (default: contexts)")
    p.add_argument("--limit", type=int, help="first N questions")
    p.add_argument("--model", help="main model of every run (default: each method's default)")
    p.add_argument("--verifier", help="Rowen's verifier model (default: rowen.py's)")
    p.add_argument("--out", type=Path, required=True, help="directory of the run files, table and plot")
    p.add_argument("--runs", nargs="+", default=["all"], metavar="NAME",
                   help="a subset of the runs (names as in the file names: seakr, ctrla-never, rowen-hybrid-always, ...)")
    p.add_argument("--deltas", type=float, nargs="*", help=f"SeaKR thresholds beside the default (SmolLM2: {DELTAS})")
    p.add_argument("--taus", type=float, nargs="*", help=f"CtrlA taus beside the default (SmolLM2: {TAUS})")
    p.add_argument("--zs", type=float, nargs="*", default=ZS, help="Rowen hybrid thresholds beside the default (rowen.THRESHOLDS)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (2 cores: 2, with OMP_NUM_THREADS=1)")
    p.add_argument("--table-only", action="store_true", help="no runs: the table and plot from OUT")
    p.add_argument("--cache", type=Path, default=ROOT / "outputs" / "call-cache",
                   help="the runs' call cache (each method's --cache): calls equal to one already made are "
                        "served from it (default: outputs/call-cache)")
    p.add_argument("--no-cache", action="store_true", help="every run computes every model call")
    p.add_argument("extra", nargs=argparse.REMAINDER,
                   help="after --: arguments every method takes, for every run (common ones: -- --device cuda "
                        "--dtype float16 --seed 1)")
    a = p.parse_args(argv)
    a.extra = a.extra[1:] if a.extra[:1] == ["--"] else a.extra
    a.cache = None if a.no_cache else a.cache
    # scores live on a scale of their own per model: SmolLM2's sweep would retrieve always or never
    # ("smollm2-135m" is common.DEFAULT_MODEL, not imported here: common loads torch); each sweep that runs
    # needs its own values
    missing = [flag for flag, prefix, given in (("--deltas", "seakr-delta", a.deltas), ("--taus", "ctrla-tau", a.taus))
               if given is None and (a.runs == ["all"] or any(r.startswith(prefix) for r in a.runs))]
    if a.model not in (None, "smollm2-135m") and not a.table_only and missing:
        raise SystemExit(f"error: the default {' and '.join(missing)} suit smollm2-135m; give {' and '.join(missing)} "
                         f"around {a.model}'s own thresholds (README: Thresholds)")
    a.deltas = DELTAS if a.deltas is None else a.deltas
    a.taus = TAUS if a.taus is None else a.taus
    if a.table_only:    # the table reads every sweep file in OUT, whatever thresholds made them
        a.deltas, a.taus = swept(a.out, SWEEPS["SeaKR"][1], a.deltas), swept(a.out, SWEEPS["CtrlA"][1], a.taus)
    known = {**runs(argparse.Namespace(**{**vars(a), "runs": ["all"]})), **SIGNAL_RUNS}
    if a.runs != ["all"] and set(a.runs) - set(known):
        raise SystemExit(f"error: unknown run {sorted(set(a.runs) - set(known))[0]}; runs: {', '.join(known)}")
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.table_only:
        if a.data is None or not a.data.exists():
            raise SystemExit(f"error: --data {a.data}: no such question file")
        start = time.time()
        run_all(list(runs(a)), a)
        print(f"all runs: {time.time() - start:.0f} s wall clock")
    reread, course, in_progress, forced = {}, {}, {}, {}
    try:
        rows = table_rows(a, reread, course, in_progress, forced)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    # the files that hold a method's own score beside its unaided answers (any name: the verifier runs
    # of Rowen's item 4 too), a file with fewer questions than the directory's longest left out as above
    # each run as the table reads it (a CtrlA monitor run on multi-hop chains: with its forced answers,
    # so that "wrong" is its answer's, not a whole chain's), any other file as it is
    as_read = {name: file_rows for name, _, _, _, file_rows in rows}
    files = {path.stem: as_read.get(path.stem) or metrics.read_rows(path) for path in sorted(a.out.glob("*.jsonl"))
             if not path.name.endswith(".forced.jsonl")}      # ctrla's side files are no runs
    most = max(map(len, files.values()), default=0)
    signals = []
    for name, file_rows in files.items():
        if (found := metrics.signals(file_rows)) and len(file_rows) < most:
            in_progress.setdefault(name, [len(file_rows), most])
        elif found:
            signals.append((name, found))
    if not rows and not signals:
        raise SystemExit(f"error: no run files in {a.out}")
    parts = [metrics.format_table([(label, s) for _, _, label, s, _ in rows], markdown=True, first="run")] if rows else []
    if in_progress:
        parts.append("Left out, with fewer questions than the other runs here (still running, or run on fewer): "
                     + ", ".join(f"{name} ({k} of {n})" for name, (k, n) in in_progress.items()) + ".")
    if reread or course:
        n = {name: s["n"] for name, _, _, s, _ in rows}
        parts.append("SeaKR's answers (its baselines' too) are read here as the official code reads them "
                     "(eval.read_answer: up to the first comma or period after \"the answer is\"; the runs of "
                     "seakr.py before the official reading read them to the first sentence end, \"Mumbai, "
                     "India\"), each prediction cut at its first comma or period (eval.common_reading): "
                     + (", ".join(f"{name} {len(k)} of {n[name]}" for name, k in reread.items()) or "no")
                     + " predictions changed; the run files keep them as run."
                     + (" In no question would the official reading have taken another course (course_changes)."
                        if not course else
                        " In these questions the official reading would have taken another course (a step before "
                        "the last names an answer with a comma or period after it, where today's loop stops; or "
                        "a chain or reasoning text names its answer with none after it, where today's code forces "
                        "one: course_changes), so the answer read again is not what today's code would give: "
                        + "; ".join(f"{name}: {', '.join(ids)}" for name, ids in course.items()) + "."))
    n = {name: s["n"] for name, _, _, s, _ in rows}
    if forced:
        parts.append("CtrlA's multi-hop chains that name no answer (\"the answer is\") take DRAGIN's forced answer "
                     f"({FORCE_HOW}), computed after the run into a side file beside it (`python "
                     "benchmarks/force_answers.py RUN.jsonl`, same model and precision; its call and seconds are added to the row): "
                     + ", ".join(f"{name} {k} of {n[name]}" + (f" ({left} still without one)" if left else "")
                                 for name, (k, left, _) in forced.items())
                     + "; the run files keep their answers as run.")
    # the runs whose ctrla.py forced the answer itself, in its loop (trace "forced": the same call, since cd147d0)
    in_run = {name: k for name, _, _, _, run_rows in rows if name not in forced
              and (k := sum(isinstance((r.get("trace") or {}).get("forced"), str) for r in run_rows))}
    if in_run:
        parts.append("CtrlA's multi-hop chains that name no answer (\"the answer is\") took DRAGIN's forced answer in "
                     f"the run itself ({FORCE_HOW}; called by ctrla.py's loop once the chain ends, its row's trace "
                     "\"forced\"): " + ", ".join(f"{name} {k} of {n[name]}" for name, k in in_run.items()) + ".")
    inside = {label: (k, round(s["acc"] * s["n"])) for _, _, label, s, run_rows in rows if "acc" in s
              and (k := sum(metrics.inside_a_word(r.get("prediction"), r.get("answers")) for r in run_rows))}
    if inside:      # the official metric kept, its substring hits counted
        parts.append("acc is CtrlA's official `match`, a substring test: a gold alias found inside a word counts "
                     "(\"pol\" in \"political science\"; `eval.inside_a_word`): "
                     + ", ".join(f"{k} of the {n} right answers of {label}" for label, (k, n) in inside.items())
                     + " are such hits.")
    total = sum(s["sec_per_q"] * s["n"] for name, _, _, s, _ in rows if name in runs(a) or name in SIGNAL_RUNS)
    total += sum(r.get("seconds") or 0 for name, _ in signals if name not in runs(a) and name not in SIGNAL_RUNS
                 for r in files[name])      # signal files under names of their own (Rowen's verifier runs)
    figures = {name: s for name, _, _, s, _ in rows}
    if in_progress:
        figures["in_progress"] = in_progress
    if inside:
        figures["acc_inside_a_word"] = {label: list(kn) for label, kn in inside.items()}
    if reread:
        figures["reread"] = reread
    if forced:      # the counts, and the answers changed (view.py shows them beside the answers as run)
        figures["forced"] = {name: [k, left] for name, (k, left, _) in forced.items()}
        figures["forced_answers"] = {name: changed for name, (_, _, changed) in forced.items() if changed}
    if in_run:
        figures["forced_in_run"] = in_run
    if course:
        figures["course_changes"] = course
    if pairs := paired_rows(rows):      # every_other_pair below leaves these out
        parts.append(paired_text(pairs))
        figures["paired"] = [{"run": label, "against": base, **d} for label, base, d in pairs]
    if common := one_rule(rows):
        parts.append(one_rule_text(common))
        figures["one_rule"] = {name: {"em": c["em"], "f1": c["f1"]} for name, _, c, _ in common}
        figures["one_rule_paired"] = [{"run": label, "against": base, **d} for _, label, _, ps in common
                                      for base, d in ps]
    if others := every_other_pair(rows, pairs):
        parts.append(every_other_pair_text(others))
        figures["every_other_pair"] = [{"run": label, "against": base, **d} for label, base, d in others]
    if signals:
        parts.append("Each method's own signal against wrong unaided answers (`python eval.py signals FILE`; "
                     "AUROC 0.5 = no signal):\n\n" + metrics.signals_table(signals, markdown=True))
        figures["signals"] = dict(signals)
    if steps := step_signal(rows):
        parts += [step_signal_text(*step) for step in steps]
        figures["step_signals"] = {method: {"run": name, **found} for method, name, found in steps}
    if (cal := calibration(a.out)) is not None:
        parts.append(calibration_text(cal))
        figures["calibration"] = cal
    if rates := rowen_rates({name: file_rows for name, file_rows in files.items() if len(file_rows) == most}):
        parts += [f"Rowen, {name}: " + rowen_rate_text(cal) for name, cal in rates.items()]
        figures["rowen_rate_calibration"] = rates
    checked = a.out.resolve().parent == (ROOT / "results").resolve()     # the shipped tables: their provenance
    if checked:
        where, bad = provenance(a.out)
        commits = sorted({c for c in where.values() if not c.startswith(("note", "no "))})
        noted = [f for f, c in where.items() if c.startswith("note")]
        parts.append("Code: the runs here were made at " + (", ".join(commits) or "no pinned commit")
                     + " (each run's settings record the hash of every code file it ran; `make results` checks them "
                       "against results/provenance.json's pinned commits)"
                     + (f"; {', '.join(noted)}: see the note in results/provenance.json" if noted else "") + ".")
        figures["code"] = where
    table = "\n\n".join(parts)
    (a.out / "table.md").write_text(table + "\n")
    (a.out / "figures.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(table)
    print(f"model time of the runs: {total / 3600:.2f} h (sum of per-question seconds)")
    if rows and (picture := plot(rows, a.out, f"{a.out.name}, {rows[0][3]['n']} questions")):
        print(f"plot: {picture}")
    if checked and bad:
        raise SystemExit(f"error: {a.out}: {', '.join(f'{f} ({where[f]})' for f in bad)}: made at no commit pinned "
                         "in results/provenance.json; pin the commit it ran at, or add a note saying why")


if __name__ == "__main__":
    main()
