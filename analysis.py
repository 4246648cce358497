"""What checks a method rather than running it, apart from the methods (DESIGN.md: a method file is its
method): SeaKR's threshold calibration, CtrlA's feature check (its scores, the one command here that runs a
model, and their report), Rowen's detection analysis and its modes re-read from one run. It imports the
methods it reads (their settings and decision rules); no method imports it.

    python analysis.py calibration FILE [--limit N]  # seakr.py --calibrate's file: delta by paper 5.3 and ours
    python analysis.py second-delta FILE --delta D   # a multi-hop SeaKR run at D: the second delta's rule
    python analysis.py check-features [ctrla.py's flags] [--output FILE]   # paper 5.2's (honesty: ours): runs the model
    python analysis.py features FILE                 # check-features' file: paper 5.2 per layer range
    python analysis.py modes FILE [--limit N]        # a rowen.py --mode hybrid run: detection, modes, threshold
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch

import common
import ctrla
import eval as metrics
import rowen


# ----------------------------------------------------------------------------------------------
# SeaKR: the threshold delta from a `seakr.py --calibrate` file (paper 5.3: delta searched on a sample of
# NQ questions; python analysis.py calibration FILE)

# the two rules of threshold_table: the paper's condition at its cut point (5.3: "less than 80% questions
# cannot be answered correctly"), and ours (each side of a delta holds >= 10% of the questions)
PAPER_KEPT_WRONG = 0.8
MIN_SIDE = 0.1


def threshold_table(rows: list[tuple[float, bool]]) -> dict:
    """From (direct-answer score, answered right) pairs: per candidate delta (the 5%, 10%, .., 95%
    quantiles of the scores), the retrieval rate and the share answered right on each side, and
    two recommended deltas (None when no candidate qualifies), each with at least 10% of the
    questions on each side:
    - "gap" (our rule): the delta that separates right from wrong best, max acc(kept) - acc(retrieved);
    - "paper": paper 5.3's condition read as: of the questions kept (U <= delta), fewer than 80% are
      answered wrong; the largest delta that meets it, i.e. the least retrieval it allows.
    A score of +inf (no usable sample) is retrieved at every delta: it counts on the retrieved side, never
    as a candidate; min, median and max are over the finite scores, "n_unscored" counts the others."""
    rows = sorted(rows)
    scores = [r[0] for r in rows if math.isfinite(r[0])]
    candidates = sorted({round(sc, 2) for f in range(1, 20)
                         if math.isfinite(sc := rows[int(len(rows) * f / 20)][0])})
    table, gap, paper = [], None, None
    for d in candidates:
        kept = [ok for sc, ok in rows if sc <= d]
        retr = [ok for sc, ok in rows if sc > d]
        acc_k = sum(kept) / len(kept) if kept else float("nan")
        acc_r = sum(retr) / len(retr) if retr else float("nan")
        table.append({"delta": d, "retrieval_rate": len(retr) / len(rows), "acc_kept": acc_k,
                      "acc_retrieved": acc_r, "n_kept": len(kept)})
        if min(len(kept), len(retr)) < MIN_SIDE * len(rows):
            continue
        if gap is None or acc_k - acc_r > gap[1]:
            gap = (d, acc_k - acc_r)
        if 1 - acc_k < PAPER_KEPT_WRONG:
            paper = d
    return {"table": table, "gap": gap[0] if gap else None, "gap_points": 100 * gap[1] if gap else None,
            "paper": paper, "n": len(rows), "n_right": sum(ok for _, ok in rows), "n_unscored": len(rows) - len(scores),
            "min": scores[0], "median": statistics.median(scores), "max": scores[-1]}


def calibration_pairs(rows: list[dict], ids=None) -> list[tuple[float, bool]]:
    """(eigen score, answered right) of each calibration row (of `ids` if given): what threshold_table
    reads; right = a gold answer contained in the direct answer. A null score is U = +inf (no usable
    sample: seakr.eigen_score), kept as math.inf, which retrieves at any delta; a NaN (a file from
    before eigen_score mapped it to +inf) and a failed row are left out. Rows written
    before the run files held traces ({"id", "score", "answer", "right"}: results/nq200/) are read as
    they recorded them."""
    pairs = []
    for r in rows:
        if (ids is not None and r.get("id") not in ids) or "error" in r:
            continue
        trace = r.get("trace")
        if isinstance(trace, dict) and "score" in trace:
            score = math.inf if trace["score"] is None else trace["score"]
            if not math.isnan(score):
                pairs.append((score, bool(metrics.accuracy(r["prediction"], r["answers"]))))
        elif "trace" not in r and isinstance(r.get("score"), (int, float)) and isinstance(r.get("right"), bool):
            if math.isfinite(r["score"]):
                pairs.append((r["score"], r["right"]))
    return pairs


def print_calibration(output, records: list[dict] | None = None) -> dict:
    """threshold_table over the questions of `records` (all of them without) in a calibration file, printed."""
    rows = calibration_pairs(metrics.read_rows(output), None if records is None else {r["id"] for r in records})
    if not any(math.isfinite(score) for score, _ in rows):
        raise common.InputError("no question gave a finite score; nothing to calibrate")
    t = threshold_table(rows)
    print(f"{'delta':>8} {'retrieve%':>9} {'acc kept':>9} {'acc retr':>9} {'n kept':>7}")
    for r in t["table"]:
        print(f"{r['delta']:8.2f} {100 * r['retrieval_rate']:9.1f} {100 * r['acc_kept']:9.1f} "
              f"{100 * r['acc_retrieved']:9.1f} {r['n_kept']:7d}")
    print(f"scores: min {t['min']:.3f}, median {t['median']:.3f}, max {t['max']:.3f} over {t['n'] - t['n_unscored']} "
          f"questions, {t['n_right']} of {t['n']} answered right without retrieval"
          + (f"; {t['n_unscored']} with no usable sample (U = +inf: retrieved at every delta)" if t["n_unscored"] else ""))
    print("our rule (largest accuracy gap kept - retrieved): "
          + (f"--threshold {t['gap']} ({t['gap_points']:.1f} points)" if t["gap"] is not None else "no candidate"))
    print("paper 5.3 (kept questions under 80% wrong): "
          + (f"--threshold {t['paper']}" if t["paper"] is not None else
             "no candidate: the model answers too few right unaided; retrieve (nearly) always"))
    return t


def second_delta(rows: list[dict], delta: float) -> dict | None:
    """SeaKR's second delta for a multi-hop run made at `delta`, read off the run's first-step eigen scores
    alone, no answer read (results/README.md: a reasoning step scores lower than an NQ answer, so the NQ
    calibration says little there): of the questions whose first step does not retrieve at delta (U <=
    delta), the lower median of their U, rounded to 2 decimals as a delta is written, keeps about half of
    them from retrieving; the rounding is to the nearest, so the median step itself may retrieve (HotpotQA's
    50 at 0.41: 48 kept, cut -0.9872, second delta -0.99, 23 kept; 2WikiMultihopQA's: cut -0.5551, -0.56, 23
    kept). The test is SeaKR's less its two exceptions, which no first step of those runs meets: an empty
    step retrieves at any delta, a step that states its answer at none. None without first steps."""
    found = metrics.first_steps(rows)
    # a null U is +inf (no usable sample): that step retrieves at any delta, so it is never kept
    kept = sorted(u for _, v in found[1].values() if (u := v["eigen score U"]) <= delta) \
        if found and found[0] == "SeaKR" else []
    if not kept:
        return None
    cut = statistics.median_low(kept)
    return {"delta": round(cut, 2), "cut": cut, "questions": len(found[1]), "kept_at_run_delta": len(kept),
            "kept_at_second_delta": sum(u <= round(cut, 2) for u in kept)}


# ----------------------------------------------------------------------------------------------
# CtrlA: the feature check (paper 5.2, Table 6): its scores on every layer (python analysis.py check-features,
# which runs the model), then their report per layer range (python analysis.py features FILE)

CHECK_FILE = common.DATA_DIR / "ctrla_feature_check.json"


@torch.inference_mode()
def check_features(run: ctrla.Run, limit: int | None = None, honesty_file=ctrla.HONESTY_FILE) -> dict:
    """Paper 5.2's scores on every layer (ctrla.layer_scores: [L, ...], indexed by key -1..-L as the
    features), as JSON-ready lists; features_report averages them over layer ranges and scores them.
    Honesty: true statements of the honesty file the features did not use and false ones (ours), each
    said in the honest persona's reply and scored at its last token. Confidence (Table 6): the first
    segment of the answer to 20 answerable and 20 unanswerable questions (ours), every token of prompt +
    segment scored as ctrla.monitor scores it, with the spans ctrla.judge reads."""
    model, tok, h, c = run.model, run.tok, run.feats["honesty"], run.feats["confidence"]
    data = json.loads(CHECK_FILE.read_text())
    true = [r["statement"] for r in common.read_statements(honesty_file)[h["statements_used"]:][-(limit or 40):]]
    false = data["false_statements"][:limit]
    persona = common.chat_prompt(tok, ctrla.PERSONA.format(ctrla.PERSONAS["honesty"][0]))
    states = common.last_token_states(model, tok, [ctrla.append(persona, x) for x in true + false])
    answers = []
    questions = [(q, k == "answerable") for k in ("answerable", "unanswerable") for q in data[k][:limit]]
    for q, ok in questions:
        prompt = ctrla.build_prompt(tok, "short", q, honesty=run.s.honesty_prompt)
        seg = ctrla.next_segment(run, prompt)[0]
        text = ctrla.append(prompt, seg)
        hs, spans = common.text_states(model, tok, text)
        answers.append({"question": q, "answerable": ok, "text": text, "start": len(text) - len(seg),
                        "spans": [list(x) for x in spans],
                        "scores": ctrla.layer_scores(hs, c["direction"], c["sign"], c["mean"]).tolist()})
    center = c.get("center")
    return {"n_layers": len(common.decoder_layers(model)), "steer": list(run.s.steer), "monitor": list(run.s.monitor),
            "tau": run.s.tau, "center": None if center is None else center.tolist(), "true": true, "false": false,
            "honesty": ctrla.layer_scores(states, h["direction"], h["sign"], h["mean"]).tolist(), "answers": answers}


def write_check(args) -> Path:
    """python analysis.py check-features: the model and features as ctrla.py loads them (ctrla.prepare, the
    same flags), check_features' scores into --output (default outputs/ctrla-check_*.json)."""
    out = Path(args.output) if args.output else common.default_output("ctrla-check", args).with_suffix(".json")
    run = ctrla.prepare(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(check_features(run, args.limit, args.honesty_data or ctrla.HONESTY_FILE)) + "\n")
    print(f"wrote {out}; its report per layer range: python analysis.py features {out}", file=sys.stderr)
    return out


def layer_ranges(steer, monitor, n_layers: int) -> dict:
    third = n_layers // 3
    return {"steer": list(steer), "monitor": list(monitor), "top third": list(range(-1, -third - 1, -1)),
            "middle third": list(range(-third - 1, -2 * third - 1, -1)),
            "bottom third": list(range(-2 * third - 1, -n_layers - 1, -1))}


def auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """P(a positive scores above a negative), ties counting half."""
    return float(((pos[:, None] > neg[None]).float() + 0.5 * (pos[:, None] == neg[None]).float()).mean())


def features_report(check: dict) -> dict:
    """Paper 5.2 per layer range, from check_features' per-layer scores, each range's mean over its
    layers (ctrla.token_scores). Honesty, our check (the paper's steers on TruthfulQA, Fig. 2, Table 5):
    held-out true vs false statements (accuracy at the median, AUC). Confidence (Table 6): answerable vs
    unanswerable questions' first segments, flagged iff a word is flagged at the range's tau (ctrla.threshold,
    ctrla.judge; a refusal, which also triggers retrieval, does not count here); AUC of the mean token score
    (answerable higher). Printed, and returned per range."""
    honesty, answers = torch.tensor(check["honesty"]), check["answers"]
    n_true, n_false = len(check["true"]), len(check["false"])
    conf = {"center": None if check["center"] is None else torch.tensor(check["center"])}
    ok = torch.tensor([a["answerable"] for a in answers])
    print(f"{n_true} held-out true and {n_false} false statements; {int(ok.sum())} answerable (A_Y)"
          f" and {int((~ok).sum())} unanswerable (A_N) questions")
    print(f"{'layers':12} {'keys':>10} | honesty: acc   AUC | confidence: flagged A_Y  flagged A_N   acc"
          f"   AUC    tau")
    report = {}
    for name, keys in layer_ranges(check["steer"], check["monitor"], check["n_layers"]).items():
        score = honesty[keys].mean(0)
        is_true = torch.arange(len(score)) < n_true
        tau = ctrla.threshold(ctrla.Settings(tau=check["tau"]), {"confidence": conf}, keys)
        verdicts = [ctrla.judge(torch.tensor(a["scores"])[keys].mean(0), a["spans"], a["text"], a["start"],
                                a["question"], [], tau) for a in answers]
        flagged = torch.tensor([bool(v["flagged"]) for v in verdicts])
        mean = torch.tensor([sum(v["scores"]) / max(len(v["scores"]), 1) for v in verdicts])
        r = report[name] = {
            "keys": [keys[0], keys[-1]], "tau": round(tau, 3),
            "honesty_acc": float(((score > score.median()) == is_true).float().mean()),
            "honesty_auc": auc(score[is_true], score[~is_true]), "flagged_answerable": int(flagged[ok].sum()),
            "flagged_unanswerable": int(flagged[~ok].sum()),
            "confidence_acc": float((flagged != ok).float().mean()),
            "confidence_auc": auc(mean[ok], mean[~ok])}
        print(f"{name:12} {keys[0]:>4}..{keys[-1]:<4} | {r['honesty_acc']:12.1%} {r['honesty_auc']:5.2f} | "
              f"{r['flagged_answerable']:>23} {r['flagged_unanswerable']:>12} {r['confidence_acc']:6.1%}"
              f" {r['confidence_auc']:5.2f} {tau:6.2f}")
    for a in answers:
        print(f"  {'A_Y' if a['answerable'] else 'A_N'} {a['question']} -> {a['text'][a['start']:]!r}")
    return report


# ----------------------------------------------------------------------------------------------
# Rowen: one `--mode hybrid` output re-read (python analysis.py modes FILE [--limit N])
#
# How well Z_CL, Z_CM and the hybrid Z flag wrong initial answers, and (for a --retrieve always run)
# what Rowen-CL, -CM, -Hybrid and never-retrieve would have answered. The hybrid Z of a row is
# Z_CL + alpha Z_CM with the alpha of the run that wrote it (its trace), never a default or the
# command line's.

def _cut(lo: float, hi: float) -> float:
    """A threshold between two scores: the midpoint, to 2 decimals where that keeps it in (lo, hi]."""
    mid = (lo + hi) / 2
    return round(mid, 2) if lo < round(mid, 2) <= hi else mid


def threshold_for_rate(zs: list[float], rate: float) -> dict | None:
    """The threshold t (retrieve iff Z < t) under which the share of scores is nearest `rate`: a threshold
    read off the scores' distribution alone, no answer read. Candidates: the lowest score (none retrieve),
    one between each two consecutive distinct scores (_cut), and the highest plus 0.5 (all retrieve); a tie
    goes to the lower rate. {"threshold", "rate", "table": [[t, rate], ...]}; None without scores."""
    if not zs:
        return None
    values = sorted({round(z, 9) for z in zs})      # 5/6 + 1/2 and 2/3 + 2/3 differ in their last bits
    cands = [min(zs)] + [_cut(a, b) for a, b in zip(values, values[1:])] + [max(zs) + 0.5]
    table = [[t, sum(z < t for z in zs) / len(zs)] for t in cands]
    # the distance in questions, rounded: 0.3 - 0.2 and 0.2 - 0.1 differ in their last bits, and a tie
    # must go to the lower rate, not to the rounding
    t, r = min(table, key=lambda c: (round(abs(c[1] - rate) * len(zs), 9), c[1]))
    return {"threshold": t, "rate": r, "table": table}


def rows_task(rows) -> str | None:
    """The task of a run's rows (their traces', a failed row's none), None where they hold several or none."""
    tasks = {r.get("trace", {}).get("task") for r in rows if "error" not in r}
    return tasks.pop() if len(tasks) == 1 else None


def mode_score(trace, mode):
    """Z of one mode from a Rowen trace that holds Z_CL and Z_CM (hybrid: Eq. 6 with the trace's alpha)."""
    # every rowen.py trace records its alpha; a hand-made row without one is read at the default
    alpha = trace.get("alpha", rowen.ALPHA)
    return rowen.hybrid_score(trace["z_cl"], trace["z_cm"], alpha) if mode == "hybrid" else trace[f"z_{mode}"]


def at_threshold(rows, mode, threshold):
    """The rows a Rowen run of `mode` with this threshold would give, re-read from one `--mode hybrid
    --retrieve always` run. Every mode draws the same perturbations (same seed) and gets the same greedy
    answers and verdicts, and retrieval repairs with the same greedy call, so the prediction is the
    run's repaired answer iff Z_mode < threshold, else r0 (exactly what a run of that mode returns).
    Model calls and seconds stay those of the hybrid run (a CL-only run makes fewer). A failed question
    stays as it failed (wrong in every mode, as in the run's own row)."""
    out = []
    for row in rows:
        if "error" in row:
            out.append(row)
            continue
        tr = row["trace"]
        if tr.get("z_cl") is None or tr.get("z_cm") is None or not tr.get("retrieved"):
            raise common.InputError(f"{row['id']}: not from a --mode hybrid --retrieve always run")
        retrieve = rowen.should_retrieve(mode_score(tr, mode), threshold)
        final = tr["final_answer"] if retrieve else tr["initial_answer"]
        if tr["task"] == "strategyqa":
            final = rowen.yes_no_label(final)
        out.append({**row, "prediction": final, "retrievals": len(tr["queries"]) if retrieve else 0})
    return out


def modes_from_run(rows, model=None, verifier=None, scoring=rowen.CALIBRATED_AT):
    """Rowen-CL, -CM, -Hybrid at their default thresholds for the run's task, (M, M_V) and scoring (run_scoring)
    and the never-retrieve baseline (threshold 0: Z < 0 never holds), re-read from one `--mode hybrid
    --retrieve always` run (at_threshold)."""
    task = rows_task(rows)
    out = {m: at_threshold(rows, m, rowen.default_threshold(m, model, verifier, task, scoring=scoring))
           for m in ("cl", "cm", "hybrid")}
    out["never"] = at_threshold(rows, "hybrid", 0.0)
    return out


def initial_is_right(row):
    """Whether Rowen's r0 (the initial answer) is right: StrategyQA's label, TruthfulQA's
    closer-to-correct, otherwise the gold answer contained in it (CtrlA's accuracy)."""
    r0 = row["trace"]["initial_answer"]
    if row["trace"]["task"] == "strategyqa":
        r0 = rowen.yes_no_label(r0)
    return metrics.is_right(row, r0)


def detection_quality(rows, model=None, verifier=None, scoring=rowen.CALIBRATED_AT):
    """Does a low Z go with a wrong initial answer? Per score (Z_CL, Z_CM, hybrid): the AUC of Z
    separating right from wrong r0 (the chance that a random right answer has the higher Z, i.e.
    auroc of -Z against wrong; ties count half; 0.5 = no signal), the default threshold for the run's task
    and (M, M_V), and the rate at which it sends wrong and right answers to retrieval."""
    if any(r["trace"].get("z_cl") is None or r["trace"].get("z_cm") is None for r in rows):
        raise common.InputError("detection quality needs Z_CL and Z_CM: a --mode hybrid run")
    right = [initial_is_right(r) for r in rows]
    out = {"n": len(rows), "wrong": right.count(False)}
    for name in ("cl", "cm", "hybrid"):
        z = [mode_score(r["trace"], name) for r in rows]
        good = [v for v, ok in zip(z, right) if ok]
        bad = [v for v, ok in zip(z, right) if not ok]
        auc = metrics.auroc([-v for v in z], [not ok for ok in right])
        th = rowen.default_threshold(name, model, verifier, rows_task(rows), scoring=scoring)
        out[name] = {"auc": round(auc, 3) if auc is not None else None, "threshold": th,
                     "retrieve_wrong": round(sum(v < th for v in bad) / len(bad), 3) if bad else None,
                     "retrieve_right": round(sum(v < th for v in good) / len(good), 3) if good else None}
    return out


def rate_calibration(rows: list[dict], rate: float | None = None) -> dict | None:
    """threshold_for_rate over the hybrid Z of a --mode hybrid run's rows (each trace's alpha), at `rate` or
    the paper's Rowen-Hybrid rate for the rows' task (rowen.PAPER_RATES); adds "target" and "n". None when a row
    holds no Z or the task has no paper rate."""
    if not rows or any(r.get("trace", {}).get("z_cl") is None or r["trace"].get("z_cm") is None for r in rows):
        return None
    rate = rowen.PAPER_RATES.get(rows[0]["trace"].get("task")) if rate is None else rate
    if rate is None:
        return None
    found = threshold_for_rate([mode_score(r["trace"], "hybrid") for r in rows], rate)
    return {**found, "target": rate, "n": len(rows)}


def run_flags(path) -> dict:
    """A Rowen run's settings file beside it, or, for a Stage 3 redone by benchmarks/repair_again.py (its
    settings name --repair-again, not --verifier or --alpha), its source run's flags under its own; {}
    where it cannot be read."""
    try:
        saved = common.read_settings(Path(path).with_suffix(".settings.json"))
    except common.InputError:
        return {}
    if source := saved.get("--repair-again"):   # as given where it ran: the project's root, run from elsewhere
        source = source if Path(source).exists() else Path(__file__).resolve().parent / source
        return {**run_flags(source), **{k: v for k, v in saved.items() if v is not None}}
    return saved


def run_models(path) -> tuple[str | None, str | None]:
    """(M, M_V) as a run's settings name them (run_flags); (None, None) where they cannot be read."""
    flags = run_flags(path)
    return flags.get("--model"), flags.get("--verifier")


def run_scoring(path) -> tuple:
    """(alpha, k, target language) of a Rowen run as its settings name them (run_flags): which calibrated
    threshold applies (rowen.default_threshold); rowen.CALIBRATED_AT's where they cannot be read."""
    flags = run_flags(path)
    return tuple(flags.get(f, d) for f, d in zip(("--alpha", "--k", "--target-language"), rowen.CALIBRATED_AT))


def report(path, limit=None):
    """The text `python analysis.py modes FILE` prints: for a --retrieve always run the modes' table
    (modes_from_run), then detection_quality at the thresholds of the run's task and (M, M_V) (its settings file),
    then the hybrid threshold at the paper's retrieval rate for the task (rate_calibration); with `limit`,
    the file's first rows only."""
    try:
        rows = metrics.read_rows(path)
    except (OSError, ValueError) as e:
        raise common.InputError(f"{path}: {e}") from None
    rows = rows[:limit] if limit else rows
    failed = sum("error" in r for r in rows)
    rows = [r for r in rows if "error" not in r]     # a failed question has no trace to read
    lines = [f"{failed} failed question{'s' if failed != 1 else ''} left out"] if failed else []
    pair, scoring = run_models(path), run_scoring(path)
    if all(r["trace"].get("retrieved") for r in rows):
        table = [(f"rowen-{m}", metrics.summarize(r)) for m, r in modes_from_run(rows, *pair, scoring).items()]
        lines.append(metrics.format_table(table, markdown=True))
    q = detection_quality(rows, *pair, scoring)
    lines.append(f"detection on {q['n']} questions, {q['wrong']} initial answers wrong:")
    for name in ("cl", "cm", "hybrid"):
        lines.append(f"  Z_{name}: AUC {q[name]['auc']}; below threshold {q[name]['threshold']:g} it retrieves "
                     f"{q[name]['retrieve_wrong']} of wrong and {q[name]['retrieve_right']} of right answers")
    if (cal := rate_calibration(rows)) is not None:
        lines.append(rate_text(cal))
    return "\n".join(lines)


def rate_text(cal: dict) -> str:
    """rate_calibration's threshold, one line."""
    return (f"hybrid threshold at the paper's {100 * cal['target']:.0f}% retrieval rate (threshold_for_rate "
            f"over {cal['n']} questions' Z, no answer read): {cal['threshold']:g}, retrieving on "
            f"{100 * cal['rate']:.0f}%")


# ----------------------------------------------------------------------------------------------
# Command line

def main(argv=None):
    p = argparse.ArgumentParser(description="Check a method: SeaKR's calibration, CtrlA's feature check, "
                                "Rowen's detection and modes (a model is loaded by check-features only)")
    sub = p.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibration", help="seakr.py --calibrate's file: accuracy per threshold, the deltas "
                         "paper 5.3's condition and our rule recommend (threshold_table)")
    scores = sub.add_parser("check-features", help="CtrlA's features scored on held-out statements and answers, "
                            "every layer (paper 5.2; check_features), into --output: runs the model, ctrla.py's flags")
    ctrla.add_args(scores)
    second = sub.add_parser("second-delta", help="a multi-hop SeaKR run made at --delta: the second delta, "
                            "from its first-step scores (second_delta)")
    second.add_argument("--delta", type=float, required=True, help="the run's delta")
    feat = sub.add_parser("features", help="check-features' file: the features' accuracy per layer "
                          "range (paper 5.2; features_report)")
    modes = sub.add_parser("modes", help="a rowen.py --mode hybrid run: how well Z_CL, Z_CM and Z flag wrong "
                           "initial answers (detection_quality), for a --retrieve always run Rowen-CL, -CM, "
                           "-Hybrid and never-retrieve re-read from it (modes_from_run), and the hybrid threshold "
                           "at the paper's retrieval rate (rate_calibration); the hybrid Z with the run's alpha")
    for sp in (cal, second, feat, modes):
        sp.add_argument("file", type=Path)
    for sp in (cal, modes):
        sp.add_argument("--limit", type=int, help="the file's first N rows only")
    args = p.parse_args(argv)
    if args.command == "check-features":
        write_check(args)
        return
    if not args.file.exists():
        raise common.InputError(f"{args.file}: no such file")
    if args.command == "calibration":
        rows = metrics.read_rows(args.file)
        print_calibration(args.file, rows[:args.limit] if args.limit else rows)
    elif args.command == "second-delta":
        got = second_delta(metrics.read_rows(args.file), args.delta)
        if got is None:
            raise common.InputError(f"{args.file}: no SeaKR first-step scores at or below {args.delta:g}")
        print(f"second delta {got['delta']:g}: of the {got['questions']} questions, {got['kept_at_run_delta']} do not "
              f"retrieve at their first step at {args.delta:g}; the lower median of their U is {got['cut']:g}, "
              f"and at {got['delta']:g} {got['kept_at_second_delta']} of them still do not")
    elif args.command == "features":
        try:
            check = json.loads(args.file.read_text(encoding="utf-8"))
        except ValueError as e:
            raise common.InputError(f"{args.file}: not an analysis.py check-features file ({e})") from None
        features_report(check)
    else:
        print(report(args.file, args.limit))


if __name__ == "__main__":
    common.main_guard(main)
