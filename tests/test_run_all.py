"""benchmarks/run_all.py: the commands it runs, and the table it builds from run files (no model)."""
import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import run_all  # noqa: E402


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def qa(qid, prediction, retrievals, calls=4, seconds=2.0):
    return {"id": qid, "answers": ["Paris"], "prediction": prediction, "retrievals": retrievals,
            "model_calls": calls, "seconds": seconds}


def rowen_row(qid, z_cl, z_cm, initial, final):
    return {**qa(qid, final, 2, calls=40, seconds=100.0),
            "trace": {"task": "qa", "mode": "hybrid", "z_cl": z_cl, "z_cm": z_cm, "z": z_cl + z_cm, "alpha": 1.0,
                      "retrieved": True, "queries": ["a", "b"],
                      "initial_answer": initial, "final_answer": final}}


def test_commands_and_resume(tmp_path):
    a = argparse.Namespace(data=Path("q.json"), corpus="contexts", limit=2, model=None, verifier="V", out=tmp_path, jobs=1,
                           runs=["all"], deltas=run_all.DELTAS, taus=run_all.TAUS, zs=run_all.ZS, extra=["--seed", "1"])
    cmd = run_all.command("ctrla-tau-9.8", a)
    assert cmd[1].endswith("ctrla.py") and cmd[2:] == ["--data", "q.json", "--corpus", "contexts", "--output",
                                                       str(tmp_path / "ctrla-tau-9.8.jsonl"), "--limit", "2",
                                                       "--tau", "-9.8", "--seed", "1"]
    assert run_all.command("rowen-hybrid-always", a)[-8:-2] == ["--verifier", "V", "--mode", "hybrid", "--retrieve", "always"]
    # the baselines by --retrieve, as all three methods name them (the old flags are aliases)
    assert run_all.command("ctrla-never", a)[-4:-2] == ["--retrieve", "never"]
    assert run_all.command("ctrla-always", a)[-4:-2] == ["--retrieve", "always"]
    assert "--verifier" not in run_all.command("seakr", a)
    assert list(run_all.runs(a)) == ["seakr", "seakr-delta2.5", "seakr-delta0.8", "cot", "ircot", "seakr-no-sa-retrieval",
                                     "ctrla", "ctrla-tau-9.8", "ctrla-tau-6.8", "ctrla-never", "ctrla-always",
                                     "rowen-hybrid-always"]
    # the signal runs are never part of "all"; named, they run on the question file given
    assert not set(run_all.SIGNAL_RUNS) & set(run_all.runs(a))
    b = argparse.Namespace(**{**vars(a), "runs": ["seakr-calibrate", "ctrla-monitor-only"]})
    assert list(run_all.runs(b)) == ["seakr-calibrate", "ctrla-monitor-only"]
    assert run_all.command("seakr-calibrate", b)[-3:] == ["--calibrate", "--seed", "1"]
    assert run_all.command("ctrla-monitor-only", b)[-4:-2] == ["--retrieve", "monitor-only"]
    c = argparse.Namespace(**{**vars(a), "runs": ["rowen-hybrid-never"]})
    assert run_all.command("rowen-hybrid-never", c)[-4:-2] == ["--retrieve", "never"]
    write(tmp_path / "seakr.jsonl", [qa("1", "Paris", 1)])
    assert not run_all.done("seakr", a)          # 1 of 2 questions: resumes
    write(tmp_path / "seakr.jsonl", [qa("1", "Paris", 1), qa("2", "Rome", 0)])
    assert run_all.done("seakr", a) and not run_all.done("ctrla", a)


def test_table_from_run_files(tmp_path, capsys):
    write(tmp_path / "seakr.jsonl", [qa("1", "Paris", 1), qa("2", "Rome", 0)])
    write(tmp_path / "ctrla-never.jsonl", [qa("1", "in Paris France", 0), qa("2", "Rome", 0)])
    # hybrid Z: 1.5 (keeps r0 at 1.4) and 0.0; r0 wrong on q1, right on q2; the repair the reverse
    write(tmp_path / "rowen-hybrid-always.jsonl", [rowen_row("1", 0.5, 1.0, "Rome", "Paris"),
                                                   rowen_row("2", 0.0, 0.0, "Paris", "Rome")])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["seakr"]["em"] == 0.5 and figures["seakr"]["retrieval_rate"] == 0.5
    assert figures["ctrla-never"]["f1"] == pytest.approx((0.5 + 0) / 2)  # "in paris france": P 1/3, R 1
    assert figures["rowen-hybrid-always"]["em"] == 0.5 and figures["rowen-hybrid-always"]["retrieval_rate"] == 1.0
    assert figures["rowen-hybrid"]["em"] == 0.0 and figures["rowen-hybrid"]["retrieval_rate"] == 0.5  # r0 on q1, repair on q2
    assert figures["rowen-cl"]["retrieval_rate"] == 1.0        # Z_CL 0.5 and 0.0 < 0.6
    assert figures["rowen-cm"]["em"] == 0.0                    # Z_CM 1.0 keeps Rome, 0.0 repairs to Rome
    assert figures["rowen-never"]["em"] == 0.5 and figures["rowen-never"]["retrieval_rate"] == 0.0
    assert figures["rowen-hybrid-t0.5"] == figures["rowen-hybrid"]
    table = (tmp_path / "table.md").read_text()
    assert table.startswith("| run | n | em | f1 | acc |") and "| SeaKR (default delta) | 2 | 50.0 |" in table
    assert "model time of the runs: 0.06 h" in capsys.readouterr().out   # (2 + 2) s x 2 + 100 s x 2
    # the Rowen file holds Z beside r0: a low Z on the right r0 (q2), a high one on the wrong (q1) -> AUROC 0
    sig = figures["signals"]["rowen-hybrid-always"]
    assert sig["method"] == "Rowen" and sig["signals"]["-Z_hybrid"]["auroc"] == 0.0
    assert set(figures["signals"]) == {"rowen-hybrid-always"}   # the other files hold no score
    assert "| rowen-hybrid-always | Rowen | -Z_hybrid | 2 | 1 | 0.000 |" in table
    # each run against its method's no-retrieval run, question by question: Rowen-Hybrid at 0.5 keeps the
    # wrong r0 on q1 (F1 0 - 0) and repairs the right one on q2 into Rome (0 - 1): -0.5; always: +1 and -1
    # and, for a run that decides when to retrieve, against its always run: at 0.5 (0 - 1) on q1, (0 - 0) on q2
    paired = {(d["run"], d["against"]): d for d in figures["paired"]}
    never, always = "Rowen, never retrieve", "Rowen, always retrieve"
    assert paired["Rowen-Hybrid (threshold 0.5)", never]["difference"] == -0.5
    assert paired["Rowen-Hybrid (threshold 0.5)", always]["difference"] == -0.5
    assert paired[always, never]["difference"] == 0.0 and paired[always, never]["n"] == 2
    # the always run against itself, the never run against either, SeaKR (no CoT file): none of them
    assert {b for r, b in paired if r in (never, always)} == {never} and (never, always) not in paired
    assert {b for _, b in paired} == {never, always} and not any(r.startswith("SeaKR") for r, _ in paired)
    assert len(paired) == 5 * 2 + 1   # Hybrid, CL, CM at their defaults and Hybrid at the --zs 0.5 and 1: each
    assert paired["Rowen-CL (threshold 0.6)", always]["difference"] == 0.0   # Z_CL 0.5 and 0: it retrieves on both
    assert "| Rowen-Hybrid (threshold 0.5) | Rowen, never retrieve | 2 | f1 | -50.0 |" in table


def test_no_run_files_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="unknown run seakr-x"):
        run_all.main(["--out", str(tmp_path), "--table-only", "--runs", "seakr", "seakr-x"])
    with pytest.raises(SystemExit, match="no run files"):
        run_all.main(["--out", str(tmp_path), "--table-only"])
    with pytest.raises(SystemExit, match="give --deltas and --taus around m/7b's own"):
        run_all.main(["--out", str(tmp_path), "--data", "q.json", "--model", "m/7b"])
    with pytest.raises(SystemExit, match="the default --taus suit smollm2-135m; give --taus around m/7b's own"):
        run_all.main(["--out", str(tmp_path), "--data", "q.json", "--model", "m/7b", "--deltas", "-6"])
    # a SeaKR sweep alone needs no taus: it goes on to the question file
    with pytest.raises(SystemExit, match="no such question file"):
        run_all.main(["--out", str(tmp_path), "--data", str(tmp_path / "missing.json"), "--model", "m/7b",
                      "--deltas", "-6", "--runs", "seakr-delta-6", "cot"])
    with pytest.raises(SystemExit, match="no such question file"):
        run_all.main(["--out", str(tmp_path), "--data", str(tmp_path / "missing.json")])
    # a signal run has no threshold sweep to ask for
    with pytest.raises(SystemExit, match="no such question file"):
        run_all.main(["--out", str(tmp_path), "--data", str(tmp_path / "missing.json"), "--model", "m/7b",
                      "--runs", "seakr-calibrate"])


def test_table_gives_seakrs_threshold_from_a_calibration_file(tmp_path):
    # U = 0..9; the three lowest answered right: candidates 0..9 (the 5%..95% quantiles); delta 9 keeps
    # every question (no retrieved side) and is not a candidate. Our rule: delta 2 (acc kept 100%, retrieved
    # 0%); the paper's: the largest delta whose kept questions are under 80% wrong: 8 (3 of 9 right)
    rows = [{"id": str(i), "answers": ["Paris"], "prediction": "Paris" if i < 3 else "Rome", "retrievals": 0,
             "model_calls": 1, "seconds": 1.0, "trace": {"direct": "x", "score": float(i)}} for i in range(10)]
    write(tmp_path / "seakr-calibrate.jsonl", rows + [{"id": "e", "answers": ["x"], "error": "too long"}])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    cal = json.loads((tmp_path / "figures.json").read_text())["calibration"]
    assert (cal["gap"], cal["paper"], cal["n"], cal["n_right"]) == (2, 8, 10, 3)
    table = (tmp_path / "table.md").read_text()
    assert "our rule delta = 2 (accuracy kept minus retrieved: 100.0 points)" in table
    assert "the paper's 5.3 condition (kept questions under 80% wrong) delta = 8." in table
    assert "| 2 | 70.0 | 100.0 | 0.0 | 3 |" in table and "| 9 | 0.0 | 30.0 | - | 10 |" in table
    assert "(10 direct answers with a finite eigen score U, 3 holding" in table
    unscored = {**rows[9], "id": "u", "trace": {"direct": "", "score": None}}    # no usable sample: U = +inf
    write(tmp_path / "seakr-calibrate.jsonl", rows + [unscored])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    assert json.loads((tmp_path / "figures.json").read_text())["calibration"]["n_unscored"] == 1
    assert ("(10 direct answers with a finite eigen score U and 1 with none (U = +inf: retrieved at every delta), "
            "3 holding") in (tmp_path / "table.md").read_text()
    write(tmp_path / "seakr-calibrate.jsonl", [unscored])                  # nothing to calibrate: no table, no crash
    run_all.main(["--out", str(tmp_path), "--table-only"])
    assert "calibration" not in json.loads((tmp_path / "figures.json").read_text())


@pytest.mark.parametrize("script, must", [
    ("baseline_plan.sh", {"cot", "ircot", "seakr-no-sa-retrieval", "ctrla-monitor-only", "rowen-hybrid-always"}),
    ("second_pin_plan.sh", {"cot", "ircot"}),
    ("third_pin_plan.sh", {"seakr-no-sa-retrieval", "ctrla", "ctrla-never", "ctrla-always", "ctrla-monitor-only"})])
def test_plan_script_parses_and_names_only_known_runs(script, must):
    import re
    import subprocess
    script = Path(run_all.__file__).with_name(script)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    named = [n.strip('"') for m in re.finditer(r"--runs ((?:[^\s\\-][^\s\\]*\s+)+)", text) for n in m[1].split()]
    known = {*run_all.runs(argparse.Namespace(runs=["all"], deltas=[], taus=[])), *run_all.SIGNAL_RUNS}
    assert named and all(n in known or n.startswith("seakr-delta$") for n in named), named
    assert must <= set(named)


def _sweep(tmp_path, monkeypatch, first_code):
    """Two runs through run_all.run_all: the first runs `first_code`, the second leaves a file behind."""
    marker = tmp_path / "second-ran"
    codes = {"one": first_code, "two": f"open({str(marker)!r}, 'w').close()"}
    monkeypatch.setattr(run_all, "command", lambda name, a: [sys.executable, "-c", codes[name]])
    a = argparse.Namespace(out=tmp_path, jobs=1, limit=None)
    return a, marker


def test_a_failed_run_lets_the_next_start(tmp_path, monkeypatch):
    a, marker = _sweep(tmp_path, monkeypatch, "raise SystemExit(1)")
    run_all.run_all(["one", "two"], a)
    assert marker.exists()


@pytest.mark.parametrize("code", ["raise KeyboardInterrupt",           # Ctrl-C: killed by SIGINT, exit -2
                                  "raise SystemExit(130)",             # a shell's 128 + SIGINT
                                  "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
def test_an_interrupted_run_stops_the_sweep(tmp_path, monkeypatch, code):
    a, marker = _sweep(tmp_path, monkeypatch, code)
    with pytest.raises(SystemExit, match="one was interrupted"):
        run_all.run_all(["one", "two"], a)
    assert not marker.exists()


def test_table_reads_every_sweep_file_present(tmp_path):
    # a table rebuilt without --deltas/--taus (make results) shows the sweep runs a model's own thresholds
    # made, not only the SmolLM2 defaults', in the defaults' order first, then ascending
    for name in ("seakr-delta0.41", "seakr-delta-0.99", "seakr-delta2.5", "ctrla-tau2.962", "cot"):
        write(tmp_path / f"{name}.jsonl", [qa("1", "Paris", 1)])
    write(tmp_path / "seakr-deltaX.jsonl", [qa("1", "Paris", 1)])      # not a threshold: left out
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert list(figures)[:5] == ["seakr-delta2.5", "seakr-delta-0.99", "seakr-delta0.41", "cot", "ctrla-tau2.962"]
    assert "| SeaKR, delta 0.41 | 1 | 100.0 |" in (tmp_path / "table.md").read_text()
    assert run_all.swept(tmp_path, "seakr-delta", [0.8, 2.5]) == [2.5, -0.99, 0.41]


def test_the_sweep_run_at_the_codes_own_delta_is_the_default(tmp_path):
    # the plan passes SeaKR's calibrated delta explicitly (seakr-delta0.41): that run is the one at the
    # default threshold, the plot's star; another delta, another model, no --threshold or no settings: not
    import seakr
    d = seakr.THRESHOLDS["qwen2.5-coder-1.5b"]
    for name, model, threshold in (("seakr-delta0.41", "qwen2.5-coder-1.5b", d),
                                   ("seakr-delta-0.99", "qwen2.5-coder-1.5b", -0.99),
                                   ("seakr-delta0.41b", "smollm2-135m", d), ("seakr", "qwen2.5-coder-1.5b", None)):
        (tmp_path / f"{name}.settings.json").write_text(json.dumps({"--model": model, "--threshold": threshold}))
    (tmp_path / "broken.settings.json").write_text("{")
    assert run_all.at_code_default(tmp_path, "seakr-delta0.41")
    assert not run_all.at_code_default(tmp_path, "seakr-delta-0.99")
    assert not run_all.at_code_default(tmp_path, "seakr-delta0.41b")
    assert not run_all.at_code_default(tmp_path, "seakr")
    assert not run_all.at_code_default(tmp_path, "broken")
    assert not run_all.at_code_default(tmp_path, "absent")


def test_the_plot_shows_the_tasks_own_metric(tmp_path):
    # F1 for short-answer QA, accuracy for StrategyQA (its rows carry no F1: plotted as F1 they all sat at 0)
    write(tmp_path / "cot.jsonl", [qa("1", "Paris", 0)])
    write(tmp_path / "ircot.jsonl", [qa("1", "Rome", 1)])
    rows = run_all.table_rows(argparse.Namespace(out=tmp_path, runs=["all"], deltas=[], taus=[], zs=[]))
    assert run_all.plot_metric(rows)[0] == "f1"
    strategy = tmp_path / "strategyqa"
    strategy.mkdir()
    row = {**rowen_row("1", 0.0, 0.0, "No", "Yes"), "label": True}
    write(strategy / "rowen-hybrid-always.jsonl", [row, {**row, "id": "2", "label": False}])
    rows = run_all.table_rows(argparse.Namespace(out=strategy, runs=["all"], deltas=[], taus=[], zs=[]))
    assert {name for name, *_ in rows} >= {"rowen-hybrid", "rowen-never", "rowen-hybrid-always"}
    assert run_all.plot_metric(rows) == ("acc", "accuracy")
    always = next(s for name, _, _, s, _ in rows if name == "rowen-hybrid-always")
    assert always["acc"] == 0.5          # "Yes" is right on the first question, wrong on the second


def test_runs_at_one_point_of_the_plot_share_one_label():
    # StrategyQA's Rowen at Z 1 and at its own rate's 0.92 both retrieve on 14% at 46.0: their two labels
    # were printed one over the other
    sweep = [(0.0, 40.0, "rowen-hybrid-t0.5"), (14.0, 46.0, "rowen-hybrid-t1"), (14.0, 46.0, "rowen-hybrid-t0.92"),
             (40.0, 46.0, "rowen-hybrid")]
    others = [(0.0, 46.0, "rowen-never"), (100.0, 46.0, "rowen-hybrid-always")]
    assert run_all.point_labels(sweep, others, "rowen-hybrid") == [
        (0.0, 40.0, "Z 0.5", False), (14.0, 46.0, "Z 1, Z 0.92", False), (40.0, 46.0, "hybrid", True),
        (0.0, 46.0, "never", True), (100.0, 46.0, "hybrid-always", True)]
    # a baseline above and a threshold below the same point keep a label each; SeaKR's and CtrlA's names
    assert run_all.point_labels([(5.0, 20.0, "seakr-delta0.41"), (60.0, 30.0, "seakr")], [(5.0, 20.0, "cot")], "seakr") == [
        (5.0, 20.0, "δ 0.41", False), (60.0, 30.0, "seakr", True), (5.0, 20.0, "cot", True)]
    assert run_all.point_labels([(9.0, 1.0, "ctrla-tau2.5")], [], "ctrla") == [(9.0, 1.0, "τ 2.5", False)]
    # points nearer than `near` share a label too (IRCoT's 38.9 and the ablation's 38.8 F1 at 100%): the first's place
    near = [(100.0, 38.9, "ircot"), (100.0, 38.8, "seakr-no-sa-retrieval"), (100.0, 33.0, "seakr-always")]
    assert run_all.point_labels([], near, "seakr", (1.0, 0.84)) == [
        (100.0, 38.9, "ircot, no-sa-retrieval", True), (100.0, 33.0, "always", True)]
    assert len(run_all.point_labels([], near, "seakr")) == 3                        # exact points only


def test_table_reads_seakr_answers_as_the_official_code(tmp_path):
    # runs made before the official reading: "Paris.Human: ..." and "Paris, France" are read as "Paris"
    # (EM 1), the run files unchanged; CtrlA's own reading is kept in its row
    write(tmp_path / "ircot.jsonl", [qa("1", "Paris.Human: Given the context, what is", 1), qa("2", "Rome", 1)])
    write(tmp_path / "cot.jsonl", [qa("1", "Paris, France", 0), qa("2", "", 0)])
    write(tmp_path / "ctrla-never.jsonl", [qa("1", "Paris, France", 0), qa("2", "Rome", 0)])  # not SeaKR's: as run
    write(tmp_path / "seakr-no-sa-retrieval.jsonl", [])                             # just started: no row
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["ircot"]["em"] == 0.5 and figures["reread"] == {"ircot": {"1": "Paris"}, "cot": {"1": "Paris"}}
    assert figures["cot"]["em"] == 0.5
    assert figures["ctrla-never"]["em"] == 0.0
    table = (tmp_path / "table.md").read_text()
    assert "cot 1 of 2, ircot 1 of 2 predictions changed; the run files keep them as run." in table
    assert "S.A. Retrieval" not in table and "seakr-no-sa-retrieval" not in figures
    assert "Paris.Human" in (tmp_path / "ircot.jsonl").read_text()
    assert "In no question would the official reading have taken another course" in table
    assert "course_changes" not in figures
    # every run under the one rule: CtrlA's "Paris, France" is "Paris" there, EM 0.5; SeaKR's as above
    assert figures["one_rule"] == {"ircot": {"em": 0.5, "f1": 0.5}, "cot": {"em": 0.5, "f1": 0.5},
                                   "ctrla-never": {"em": 0.5, "f1": 0.5}}
    assert "| CtrlA, never retrieve | 50.0 | 50.0 |" in table


def test_every_other_pair_is_read_under_the_one_rule(tmp_path):
    # IRCoT against CoT is SeaKR's own pair (the first paired table); CtrlA's never run against each of them
    # comes only here, under the one rule ("Paris, France" is "Paris"), the lower run against the upper
    write(tmp_path / "cot.jsonl", [qa("1", "Paris", 0), qa("2", "Rome", 0), qa("3", "Lyon", 0), qa("4", "Paris", 0)])
    write(tmp_path / "ircot.jsonl", [qa("1", "Paris", 1), qa("2", "Paris", 1), qa("3", "Paris", 1), qa("4", "Rome", 1)])
    write(tmp_path / "ctrla-never.jsonl", [qa("1", "Paris, France", 0), qa("2", "Rome", 0), qa("3", "Rome", 0),
                                           qa("4", "Rome", 0)])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    pairs = {(p["run"], p["against"]): p for p in json.loads((tmp_path / "figures.json").read_text())["every_other_pair"]}
    never, cot, ircot = "CtrlA, never retrieve", "CoT (no retrieval)", "IRCoT (retrieve every step, top hit)"
    assert set(pairs) == {(never, cot), (never, ircot)}
    # F1 differences [0, 0, 0, -1]: a draw's mean is 0 with probability (3/4)^4 = 0.32 and -0.75 or less with
    # 4 (1/4)^3 (3/4) + (1/4)^4 = 0.051 (-1 alone 0.004), so the 95% interval is -0.75 to 0
    assert pairs[never, cot]["difference"] == -0.25 and pairs[never, cot]["interval"] == [-0.75, 0.0]
    # [0, -1, -1, 0]: all four draws -1 (or all 0) with probability 1/16 = 0.06, so the ends are -1 and 0
    assert pairs[never, ircot]["difference"] == -0.5 and pairs[never, ircot]["interval"] == [-1.0, 0.0]
    table = (tmp_path / "table.md").read_text()
    assert f"| {never} | {cot} | 4 | f1 | -25.0 | -75.0 to +0.0 |" in table.split("Every other pair")[1]


def test_one_rule_is_left_out_where_no_reading_differs(tmp_path):
    write(tmp_path / "cot.jsonl", [qa("1", "Paris", 0), qa("2", "Rome", 0)])
    write(tmp_path / "ctrla-never.jsonl", [qa("1", "Paris", 0), qa("2", "", 0)])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    assert "one_rule" not in json.loads((tmp_path / "figures.json").read_text())
    assert "under one rule" not in (tmp_path / "table.md").read_text()


def test_a_step_before_the_last_that_names_an_answer_officially_is_named(tmp_path):
    # today's code would have stopped at the first step of q1 (IRCoT: a period after its answer) and at
    # the second of q2 (SeaKR: the chosen candidate's regenerated text is what the loop kept); q3's last
    # step is not checked; q4's CoT chain names its answer with no comma or period after it (forced today)
    step = lambda text, **k: {"text": text, **k}
    ircot = [{**qa("1", "Rome", 1), "trace": {"steps": [
                 step("So the answer is Rome, Italy"), step("So the answer is Rome")]}},
             {**qa("3", "Paris", 1), "trace": {"steps": [
                 step("Paris is in France"), step("So the answer is Paris.")]}}]
    seakr = [{**qa("2", "Paris", 1), "trace": {"steps": [
                 step("Mr Smith lives in Paris"),
                 step("So the answer is Rome", candidates=[{"id": "c1", "text": "So the answer is Rome"},
                                                           {"id": "c2", "text": "So the answer is Paris."}],
                      chosen="c2"),
                 step("So the answer is Paris")]}}]
    write(tmp_path / "ircot.jsonl", ircot)
    write(tmp_path / "seakr-delta0.41.jsonl", seakr + [qa("5", "Paris", 0)])   # as many questions as ircot
    write(tmp_path / "cot.jsonl", [{**qa("4", "Rome", 0), "trace": {"chain": "It is Rome. So the answer is Rome"}},
                                   {**qa("6", "Paris", 0), "trace": {"chain": "So the answer is Paris."}}])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["course_changes"] == {"seakr-delta0.41": ["2"], "cot": ["4"], "ircot": ["1"]}
    assert "seakr-delta0.41: 2; cot: 4; ircot: 1." in (tmp_path / "table.md").read_text()
    assert "reread" not in figures
    only = tmp_path / "only"                         # nothing re-read, a question still named
    only.mkdir()
    (only / "cot.jsonl").write_text((tmp_path / "cot.jsonl").read_text())
    run_all.main(["--out", str(only), "--table-only"])
    assert "no predictions changed" in (only / "table.md").read_text()
    assert json.loads((only / "figures.json").read_text())["course_changes"] == {"cot": ["4"]}
    # a run made by code that reads answers officially (its settings hash eval.py: today's code) took today's
    # course, so nothing is named in it, whatever its texts hold
    (only / "cot.settings.json").write_text(json.dumps({"method code": "seakr.py, 1 bytes, sha256 x",
                                                        "eval.py code": "eval.py, 1 bytes, sha256 y"}))
    run_all.main(["--out", str(only), "--table-only"])
    assert "course_changes" not in json.loads((only / "figures.json").read_text())


def test_table_gives_seakrs_step_signal_from_a_seakr_run_and_cot(tmp_path):
    def seakr_row(qid, score, prediction):
        return {**qa(qid, prediction, 0), "trace": {"steps": [{"text": "a first step", "score": score}]}}
    write(tmp_path / "seakr-delta0.41.jsonl", [seakr_row("1", 2.0, "Rome"), seakr_row("2", -1.0, "Paris")])
    write(tmp_path / "cot.jsonl", [qa("1", "Rome", 0), qa("2", "Paris", 0)])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    step = json.loads((tmp_path / "figures.json").read_text())["step_signals"]["SeaKR"]
    # CoT wrong on 1 (U 2.0), right on 2 (U -1.0): AUROC 1; no ablation run, so no second target
    assert step["run"] == "seakr-delta0.41" and step["n"] == 2 and list(step["targets"]) == ["CoT's answer wrong"]
    assert step["targets"]["CoT's answer wrong"]["signals"]["eigen score U"]["auroc"] == 1.0
    assert "| CoT's answer wrong | 1 of 2 | eigen score U | 1.000 | 1.00 to 1.00 |" in (tmp_path / "table.md").read_text()
    (tmp_path / "cot.jsonl").unlink()                  # without CoT's answers: no step signal
    run_all.main(["--out", str(tmp_path), "--table-only"])
    assert "step_signals" not in json.loads((tmp_path / "figures.json").read_text())


def test_table_gives_ctrlas_step_signal_from_its_run_its_never_run_and_its_always_run(tmp_path):
    def seg(text, scores, unconfident=()):
        return {"segment": text, "trigger": "confidence" if unconfident else None, "tokens": text.split(),
                "scores": scores, "unconfident_words": list(unconfident)}

    def row(qid, prediction, retrievals, segments):
        return {**qa(qid, prediction, retrievals), "trace": {"answer": " ".join(g["segment"] for g in segments),
                                                             "segments": segments}}
    write(tmp_path / "ctrla.jsonl", [row("1", "Paris", 1, [seg("Lyon is it.", [-0.5, 1.0], ["Lyon"])]),
                                     row("2", "Paris", 0, [seg("Paris it is.", [0.7, 0.2])]),
                                     row("3", "Rome", 0, [seg("Rome.", [0.9])])])
    never = [{**qa(q, p, 0), "trace": {"answer": a, "segments": [{"segment": a, "trigger": None}]}}
             for q, p, a in [("1", "Lyon", "Lyon is it. So Lyon."), ("2", "Paris", "Paris it is."), ("3", "Milan", "Milan.")]]
    write(tmp_path / "ctrla-never.jsonl", never)
    write(tmp_path / "ctrla-always.jsonl", [qa("1", "Paris", 1), qa("2", "Paris", 1), qa("3", "Rome", 1)])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    step = json.loads((tmp_path / "figures.json").read_text())["step_signals"]["CtrlA"]
    # question 3's never run does not begin with "Rome.": left out. Never wrong on 1 (lowest -0.5,
    # triggered), right on 2 (lowest 0.2): both signals order the pair -> 1.0; always beats never on 1
    assert (step["run"], step["n"], step["differs"]) == ("ctrla", 2, 1)
    wrong = step["targets"]["ctrla-never's answer wrong"]["signals"]
    assert wrong["monitor trigger"]["auroc"] == 1.0 and wrong["-(lowest score - tau)"]["auroc"] == 1.0
    assert step["targets"]["retrieving every step beats ctrla-never's F1"]["positives"] == 1
    table = (tmp_path / "table.md").read_text()
    assert "CtrlA's step signal on these questions (`eval.step_signals`, the monitor read from ctrla" in table
    assert "1 question(s) whose ctrla-never run does not begin with that segment are left out." in table
    assert "| ctrla-never's answer wrong | 1 of 2 | monitor trigger | 1.000 |" in table


def test_table_leaves_out_a_run_still_running_and_says_so(tmp_path):
    write(tmp_path / "cot.jsonl", [qa("1", "Paris", 0), qa("2", "Rome", 0), qa("3", "Paris", 0)])
    write(tmp_path / "ircot.jsonl", [qa("1", "Paris", 1)])           # 1 of the 3 questions so far
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert "ircot" not in figures and figures["in_progress"] == {"ircot": [1, 3]}
    assert figures["cot"]["n"] == 3
    table = (tmp_path / "table.md").read_text()
    assert "Left out, with fewer questions than the other runs here (still running, or run on fewer): ircot (1 of 3)." in table
    assert "| IRCoT" not in table
    write(tmp_path / "ircot.jsonl", [qa(q, "Paris", 1) for q in "123"])   # done: in the table
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert "in_progress" not in figures and figures["ircot"]["n"] == 3


def test_table_of_a_directory_of_signal_files_only_such_as_rowens_verifier_runs(tmp_path, capsys):
    # three --never-retrieve runs of the same questions, one per verifier (names run_all does not run)
    write(tmp_path / "rowen-v-a.jsonl", [rowen_row("1", 1.0, 0.0, "Paris", "Paris"), rowen_row("2", 0.5, 0.0, "Rome", "Rome")])
    write(tmp_path / "rowen-v-b.jsonl", [rowen_row("1", 1.0, 0.9, "Paris", "Paris"), rowen_row("2", 0.5, 0.2, "Rome", "Rome")])
    write(tmp_path / "rowen-v-c.jsonl", [rowen_row("1", 1.0, 0.9, "Paris", "Paris")])       # still running
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert set(figures["signals"]) == {"rowen-v-a", "rowen-v-b"} and figures["in_progress"] == {"rowen-v-c": [1, 2]}
    # -Z_CM, higher = less sure: wrong (2, Rome) vs right (1): verifier a gives both 0 (a tie: 0.5),
    # b gives -0.2 against -0.9 (1.0)
    assert figures["signals"]["rowen-v-a"]["signals"]["-Z_CM"]["auroc"] == 0.5
    assert figures["signals"]["rowen-v-b"]["signals"]["-Z_CM"]["auroc"] == 1.0
    table = (tmp_path / "table.md").read_text()
    assert table.startswith("Left out, with fewer questions than the other runs here (still running, or run on "
                            "fewer): rowen-v-c (1 of 2).")
    assert "| rowen-v-b | Rowen | -Z_CM | 2 | 1 | 1.000 |" in table
    assert not (tmp_path / "f1_vs_retrieval.png").exists()
    # their model time is counted (4 questions of 100 s in the table; c, left out, is not)
    assert "model time of the runs: 0.11 h" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no run files"):
        run_all.main(["--out", str(empty), "--table-only"])


def test_a_monitor_run_on_multihop_chains_is_scored_by_its_forced_answers(tmp_path):
    # CtrlA's monitor over two chains that name no answer; chain 1 mentions the gold answer on the way
    # but its forced answer is wrong, chain 2's forced answer is right: read whole, both chains would be
    # right (acc) and the signal undefined; read by their forced answers, 1 is wrong and its lower score shows
    def row(qid, chain, lowest):
        seg = {"segment": chain, "trigger": None, "scores": [lowest, 0.5], "unconfident_words": []}
        return {**qa(qid, chain, 0), "question": "Q?", "trace": {"task": "hotpotqa", "answer": chain, "segments": [seg]}}
    write(tmp_path / "ctrla-monitor-only.jsonl", [row("1", "Paris or Lyon, then.", -2.0), row("2", "It is Paris.", 1.0)])
    write(tmp_path / "ctrla-monitor-only.forced.jsonl", [{"id": "1", "forced": " Lyon.", "seconds": 1.0, "cpu": "x"},
                                                         {"id": "2", "forced": " Paris.", "seconds": 1.0, "cpu": "x"}])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    signal = figures["signals"]["ctrla-monitor-only"]["signals"]["-(lowest score - tau)"]
    assert signal["wrong"] == 1 and signal["auroc"] == 1.0
    # the length is the chain's (4 words wrong, 3 right: 1.0), not its forced answer's (1 and 1: 0.5)
    assert figures["signals"]["ctrla-monitor-only"]["signals"][run_all.metrics.LENGTH]["auroc"] == 1.0
    (tmp_path / "ctrla-monitor-only.forced.jsonl").unlink()      # without the side file: the chains whole
    run_all.main(["--out", str(tmp_path), "--table-only"])
    signal = json.loads((tmp_path / "figures.json").read_text())["signals"]["ctrla-monitor-only"]["signals"]
    assert signal["-(lowest score - tau)"]["wrong"] == 0 and signal["-(lowest score - tau)"]["auroc"] is None


def test_table_reads_ctrlas_multihop_chains_with_their_forced_answers(tmp_path):
    def row(qid, chain, prediction):
        return {**qa(qid, prediction, 0), "question": "Q?", "trace": {"task": "hotpotqa", "answer": chain}}
    chains = [("1", "Paris is in France.", "Paris is in France."), ("2", "So the answer is Rome.", "Rome")]
    write(tmp_path / "ctrla.jsonl", [row(*c) for c in chains])
    write(tmp_path / "ctrla-never.jsonl", [row(*c) for c in chains])
    write(tmp_path / "ctrla.forced.jsonl", [{"id": "1", "forced": " Paris.", "seconds": 3.0, "cpu": "x"}])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["forced"] == {"ctrla": [1, 0], "ctrla-never": [0, 1]}
    assert figures["ctrla"]["em"] == 0.5 and figures["ctrla-never"]["em"] == 0.0   # "Paris" now, as forced
    assert figures["ctrla"]["calls_per_q"] == 4.5 and figures["ctrla"]["sec_per_q"] == 3.5   # its call counted
    table = (tmp_path / "table.md").read_text()
    assert "ctrla 1 of 2, ctrla-never 0 of 2 (1 still without one); the run files keep their answers as run." in table
    assert "ctrla.forced" not in figures and "in_progress" not in figures     # the side file is no run
    assert figures["forced_answers"] == {"ctrla": {"1": "Paris"}}
    assert "forced_in_run" not in figures             # a side file's forced answer is not counted again


def test_table_counts_the_answers_ctrla_forced_in_its_own_loop(tmp_path):
    def row(qid, chain, forced, prediction):
        return {**qa(qid, prediction, 0), "question": "Q?",
                "trace": {"task": "hotpotqa", "answer": chain, "forced": forced}}
    write(tmp_path / "ctrla.jsonl", [row("1", "Paris is in France.", " Paris.", "Paris"),
                                     row("2", "So the answer is Rome.", None, "Rome"),
                                     row("3", "Lyon is a city.", " Lyon.", "Lyon")])
    run_all.main(["--out", str(tmp_path), "--table-only"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["forced_in_run"] == {"ctrla": 2} and "forced" not in figures
    assert figures["ctrla"]["em"] == pytest.approx(1 / 3)     # the rows' predictions, as the run made them
    table = (tmp_path / "table.md").read_text()
    assert "took DRAGIN's forced answer in the run itself" in table and "its row's trace \"forced\"): ctrla 2 of 3." in table
    assert "computed after the run into a side file" not in table


def test_rowen_thresholds_of_the_runs_pair_and_at_the_papers_rate(tmp_path):
    import rowen
    pair = ("qwen2.5-coder-1.5b", "smollm2-135m")

    def sq(qid, z_cl, z_cm, initial, final, label):
        row = rowen_row(qid, z_cl, z_cm, initial, final)
        return {**row, "label": label, "trace": {**row["trace"], "task": "strategyqa"}}
    # hybrid Z 0.0, 1.0, 2.0, 2.0, 2.0: the paper's 20% StrategyQA rate is 1 of 5, under the cut 0.5
    rows = [sq("1", 0.0, 0.0, "No", "Yes", True), sq("2", 0.5, 0.5, "No", "Yes", True)] + [
        sq(str(i), 1.0, 1.0, "Yes", "No", True) for i in (3, 4, 5)]
    write(tmp_path / "rowen-hybrid-always.jsonl", rows)
    (tmp_path / "rowen-hybrid-always.settings.json").write_text(json.dumps({"--model": pair[0], "--verifier": pair[1]}))
    run_all.main(["--out", str(tmp_path), "--table-only", "--zs", "1.5"])
    figures = json.loads((tmp_path / "figures.json").read_text())
    table = (tmp_path / "table.md").read_text()
    # Rowen-Hybrid at the pair's threshold calibrated on StrategyQA (Z 0 retrieves below 0.92: 1 of 5)
    t = rowen.CALIBRATED[("strategyqa", *pair)]
    assert t == 0.92 and rowen.CALIBRATED[("truthfulqa", *pair)] == 1.25
    assert f"| Rowen-Hybrid (threshold {t:g}) | 5 |" in table
    assert figures["rowen-hybrid"]["retrieval_rate"] == sum(z < t for z in (0, 1, 2, 2, 2)) / 5
    # the --zs value, then this run's own Z at the paper's StrategyQA rate (no answer read): 0.5, 1 of 5
    assert figures["rowen-hybrid-t1.5"]["retrieval_rate"] == 0.4
    # q1 repaired to "Yes" (right), q2 keeps "No" (wrong), q3-5 keep "Yes" (right)
    assert figures["rowen-hybrid-t0.5"]["retrieval_rate"] == 0.2 and figures["rowen-hybrid-t0.5"]["acc"] == 0.8
    assert "| Rowen-Hybrid, threshold 0.5 (the paper's retrieval rate on these Z) | 5 |" in table
    cal = figures["rowen_rate_calibration"]["rowen-hybrid-always"]
    assert (cal["threshold"], cal["rate"], cal["target"]) == (0.5, 0.2, 0.2)
    assert "Rowen, rowen-hybrid-always: hybrid threshold at the paper's 20% retrieval rate" in table
    assert "| threshold | retrieval rate |\n|---:|---:|\n| 0 | 0.0 |\n| 0.5 | 20.0 |\n| 1.5 | 40.0 |\n| 2.5 | 100.0 |" in table


def test_provenance_names_the_pinned_commit_of_each_run_or_its_note(tmp_path, monkeypatch):
    """A run's settings record its code's hashes; the run is at a pinned commit when every file at that commit
    (git show) hashes the same; a side file without settings needs a note; anything else fails make results."""
    import subprocess
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=run_all.ROOT, capture_output=True,
                          text=True).stdout.strip()
    if not head:
        pytest.skip("no git history here")
    at_head = {name: run_all.file_id_at(head, name, {}) for name in ("seakr.py", "common.py", "eval.py")}
    out = tmp_path / "dir"
    out.mkdir()
    good = {"method code": "seakr.py, " + at_head["seakr.py"], "common.py code": at_head["common.py"],
            "eval.py code": at_head["eval.py"], "--model": "m"}
    for name, settings in (("cot", good), ("ircot", {**good, "eval.py code": "1 bytes, sha256 0123456789abcdef"})):
        write(out / f"{name}.jsonl", [qa("1", "Paris", 0)])
        (out / f"{name}.settings.json").write_text(json.dumps(settings))
    write(out / "ctrla.forced.jsonl", [{"id": "1", "forced": " Paris."}])
    pins = tmp_path / "provenance.json"
    pins.write_text(json.dumps({"pinned": {head: "test"}, "notes": {"dir/ctrla.forced.jsonl": "made by hand"}}))
    monkeypatch.setattr(run_all, "PROVENANCE", pins)
    where, bad = run_all.provenance(out)
    assert where == {"cot.jsonl": head, "ctrla.forced.jsonl": "note: made by hand", "ircot.jsonl": "no pinned commit"}
    assert bad == ["ircot.jsonl"]
    assert run_all.code_ids(good) == at_head


@pytest.mark.parametrize("code_file, runs", [("ctrla.py", ("ctrla", "ctrla-never")),
                                             ("seakr.py", ("seakr-no-sa-retrieval", "seakr-delta0.41"))])
def test_third_pin_plan_sets_aside_only_the_first_pins_files(tmp_path, code_file, runs):
    """set_aside moves a run whose settings name another CODE file's hash, with its forced answers, to
    DIR-062262b; a run of this checkout's code stays, and a second call moves nothing."""
    import hashlib
    import re
    import subprocess
    text = Path(run_all.__file__).with_name("third_pin_plan.sh").read_text()
    function = re.search(r"^set_aside\(\) \{.*?^\}$", text, re.S | re.M)[0]
    (tmp_path / code_file).write_text("pinned\n")
    code = hashlib.sha256(b"pinned\n").hexdigest()[:16]
    d = tmp_path / "results" / "d"
    d.mkdir(parents=True)
    old, new = runs
    (d / f"{old}.settings.json").write_text(f'{{"method code": "{code_file}, 9 bytes, sha256 10563c93d5607f69"}}')
    (d / f"{new}.settings.json").write_text(f'{{"method code": "{code_file}, 7 bytes, sha256 {code}"}}')
    for name in (f"{old}.jsonl", f"{old}.forced.jsonl", f"{new}.jsonl"):
        (d / name).write_text("{}\n")
    for _ in range(2):
        subprocess.run(["bash", "-c", f"set -euo pipefail\n{function}\nset_aside {code_file} results/d {old} {new} x"],
                       cwd=tmp_path, check=True, capture_output=True)
    assert sorted(p.name for p in d.iterdir()) == [f"{new}.jsonl", f"{new}.settings.json"]
    assert sorted(p.name for p in (tmp_path / "results" / "d-062262b").iterdir()) == [
        f"{old}.forced.jsonl", f"{old}.jsonl", f"{old}.settings.json"]


@pytest.mark.parametrize("dataset, metric, difference", [("popqa", "acc", 1.0), ("triviaqa", "acc", 1.0),
                                                          ("hotpotqa", "f1", 0.4)])
def test_ctrla_pairs_compare_by_accuracy_on_short_form_qa(tmp_path, dataset, metric, difference):
    # CtrlA reports accuracy on PopQA and TriviaQA (its 4): "capital is paris city" holds the gold answer
    # (acc 1) at F1 2 * (1/4 * 1) / (1/4 + 1) = 0.4; "Lyon" neither
    write(tmp_path / "ctrla.jsonl", [{**qa("1", "The capital is Paris, a city", 1), "dataset": dataset}])
    write(tmp_path / "ctrla-never.jsonl", [{**qa("1", "Lyon", 0), "dataset": dataset}])
    rows = run_all.table_rows(argparse.Namespace(out=tmp_path, runs=["all"], deltas=[], taus=[], zs=[]))
    (label, base, d), = run_all.paired_rows(rows)
    assert (d["metric"], d["n"]) == (metric, 1) and d["difference"] == pytest.approx(difference)


def test_step_signal_text_names_the_ablation_target_only_where_it_is_read():
    """Without the ablation's run there is one target: the text does not describe a second one it lacks."""
    t = {"positives": 3, "signals": {"eigen score U": {"n": 5, "auroc": 0.75, "interval": [0.5, 1.0]}}}
    one = run_all.step_signal_text("SeaKR", "seakr-delta0.41", {"n": 5, "targets": {"CoT's answer wrong": t}})
    two = run_all.step_signal_text("SeaKR", "seakr-delta0.41", {"n": 5, "targets": {
        "CoT's answer wrong": t, "retrieving every step beats CoT's F1": t}})
    assert "beating" not in one and "once the ablation has run" in one and "| CoT's answer wrong | 3 of 5 |" in one
    assert "(the ablation) beating CoT's F1" in two and two.count("| eigen score U | 0.750 | 0.50 to 1.00 |") == 2


def test_a_failed_question_in_rowens_adaptive_run_counts_wrong_in_every_mode(tmp_path):
    """The modes re-read from the hybrid always run keep a failed row as it failed (a KeyError on its missing
    trace before), and the run's task, and so its thresholds, come from the rows that have a trace (a failed
    row made it None: threshold 0.5 for the pair's 0.92)."""
    shipped = Path(run_all.__file__).parents[1] / "results" / "strategyqa50-qwen2.5-coder-1.5b"
    for suffix in (".jsonl", ".settings.json"):
        (tmp_path / f"rowen-hybrid-always{suffix}").write_text((shipped / f"rowen-hybrid-always{suffix}").read_text())
    with open(tmp_path / "rowen-hybrid-always.jsonl", "a") as f:
        f.write(json.dumps({"id": "x", "question": "Q?", "answers": ["yes"], "label": True, "dataset": "strategyqa",
                            "prediction": "", "error": "too long"}) + "\n")
    run_all.main(["--out", str(tmp_path), "--table-only"])
    table = (tmp_path / "table.md").read_text()
    # 23 of 50 right at 0.92 (46.0), now of 51; 7 of 50 retrieve, now of 51
    assert "| Rowen-Hybrid (threshold 0.92) | 51 | 45.1 | 13.7 |" in table
