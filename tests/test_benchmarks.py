"""The benchmarks' default inputs are where `make data` puts them."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_oracle_context_reads_the_fetched_hotpotqa_file_by_default():
    hotpot = load("oracle_context").HOTPOT
    assert hotpot == ROOT / "data/raw/hotpotqa/hotpot_dev_distractor_v1_100.json"
    if not hotpot.is_file():
        pytest.skip("no data/raw here: `make data` fetches it")


# ---------------------------------------------------------------- bench_limit.py: the limit's arithmetic

def test_bench_limit_arithmetic_by_hand():
    bl = load("bench_limit")
    assert bl.product_flops(21, 1536, 8960) == 2 * 21 * 1536 * 8960 == 578_027_520
    # one row through 6.2 GB at 13 GB/s: the weights bound it (0.477 s), not 3.1 GFLOP at 100 GFLOP/s (0.031 s)
    assert bl.step_limit(3.1e9, 6.2e9, 100e9, 13e9) == pytest.approx(6.2 / 13)
    # a 600-token prefill: 1.86 TFLOP at 100 GFLOP/s (18.6 s) bounds it, not the same weights (0.477 s)
    assert bl.step_limit(1.86e12, 6.2e9, 100e9, 13e9) == pytest.approx(18.6)
    steps = [dict(rows=1, tokens=600, seconds=20.0, linear_seconds=18.0, flops=1.86e12, weight_bytes=6.2e9),
             dict(rows=21, tokens=21, seconds=1.3, linear_seconds=1.2, flops=65.1e9, weight_bytes=6.2e9),
             dict(rows=1, tokens=1, seconds=0.5, linear_seconds=0.45, flops=3.1e9, weight_bytes=6.2e9),
             dict(rows=1, tokens=1, seconds=0.5, linear_seconds=0.45, flops=3.1e9, weight_bytes=6.2e9),
             dict(rows=2, tokens=2, seconds=0.7, linear_seconds=0.6, flops=6.2e9, weight_bytes=6.2e9)]
    hist = bl.rows_histogram(steps, 100e9, 13e9)
    assert list(hist) == ["1", "2", "21", "prefill"]          # decoding by rows, prefills last
    assert hist["1"]["steps"] == 2 and hist["1"]["seconds"] == pytest.approx(1.0)
    assert hist["1"]["limit_seconds"] == pytest.approx(2 * 6.2 / 13)
    assert hist["21"]["limit_seconds"] == pytest.approx(max(0.651, 6.2 / 13))    # 65.1 GFLOP: 0.651 s > 0.477 s
    assert hist["prefill"] == dict(steps=1, tokens=600, seconds=20.0, linear_seconds=18.0, flops=1.86e12,
                                   weight_bytes=6.2e9, limit_seconds=pytest.approx(18.6))


def test_bench_limit_weight_bytes_and_shapes():
    import torch
    bl = load("bench_limit")
    import models
    lin = torch.nn.Linear(8, 4)
    assert bl.weight_bytes(lin) == (8 * 4 + 4) * 4
    assert bl.weight_bytes(models.OneDNNLinear(lin)) == (8 * 4 + 4) * 4
    assert bl.weight_bytes(torch.nn.Linear(8, 4, bias=False, dtype=torch.bfloat16)) == 8 * 4 * 2
    from types import SimpleNamespace
    cfg = SimpleNamespace(hidden_size=1536, intermediate_size=8960, num_attention_heads=12, num_key_value_heads=2,
                          head_dim=128, vocab_size=151936)          # Qwen2.5-1.5B
    assert bl.layer_shapes(cfg) == [("q", 1536, 1536), ("k", 1536, 256), ("v", 1536, 256), ("o", 1536, 1536),
                                    ("gate", 1536, 8960), ("up", 1536, 8960), ("down", 8960, 1536),
                                    ("lm_head", 1536, 151936)]


# ---------------------------------------------------------------- gpu_path.py: the budget and what it reads back

def test_gpu_path_steps_keep_to_the_budget(tmp_path):
    import os
    import sys
    import time
    gp = load("gpu_path")
    log, env = open(tmp_path / "log", "w"), dict(os.environ)
    ok = gp.step("quick", [sys.executable, "-c", "print('{\"x\": 1}')"], log, time.monotonic() + 60, env)
    assert ok["status"] == "ok"
    assert gp.last_json(tmp_path / "log", "===== quick:") == {"x": 1}
    failed = gp.step("bad", [sys.executable, "-c", "raise SystemExit(3)"], log, time.monotonic() + 60, env)
    assert failed["status"] == "exit 3"
    slow = gp.step("slow", [sys.executable, "-c", "import time; time.sleep(30)"], log, time.monotonic() + 11, env)
    assert slow["status"].startswith("stopped at the budget") and slow["seconds"] < 20
    assert gp.step("late", ["true"], log, time.monotonic() + 5, env)["status"] == "not run: budget spent"


def test_gpu_path_reads_back_the_last_figures_of_a_step_and_a_run_row(tmp_path):
    gp = load("gpu_path")
    log = tmp_path / "gpu_path.log"
    log.write_text('===== sampling bfloat16: x\n{"ours_s": 1.0}\n===== sampling float32: y\nnoise\n{"ours_s": 2.5}\n'
                   '{not json\n===== seakr bfloat16: z\n')
    assert gp.last_json(log, "===== sampling float32:") == {"ours_s": 2.5}
    assert gp.last_json(log, "===== sampling bfloat16:") == {"ours_s": 1.0}   # its own step's, not the next
    assert gp.last_json(log, "===== seakr bfloat16:") == {} == gp.last_json(log, "===== rowen bfloat16:")
    run = tmp_path / "run.jsonl"
    run.write_text('{"id": "q1", "seconds": 27.0, "model_calls": 9, "retrievals": 1, "trace": [1, 2], '
                   '"prediction": "' + "a" * 200 + '"}\n{"id": "q2"}\n')
    row = gp.run_row(run)
    assert row == {"id": "q1", "seconds": 27.0, "retrievals": 1, "model_calls": 9, "prediction": "a" * 120}
    run.write_text("")
    assert gp.run_row(run) == {}


# ---------------------------------------------------------------- force_answers.py: CtrlA runs made before it forced

def mh_row(qid, answer, task="hotpotqa"):
    return {"id": qid, "question": "Q?", "answers": ["C"], "prediction": answer.strip(), "retrievals": 0,
            "model_calls": 3, "seconds": 10.0, "trace": {"task": task, "answer": answer}}


def test_force_answers_writes_a_side_file_and_resumes(tmp_path, monkeypatch):
    run_file = tmp_path / "ctrla.jsonl"
    run_file.write_text("".join(json.dumps(r) + "\n" for r in
                                [mh_row("1", "A is B."), mh_row("2", "So the answer is E."), mh_row("3", "G.")]))
    (tmp_path / "ctrla.settings.json").write_text(json.dumps({"--model": "smollm2-135m"}))
    fa = load("force_answers")
    loads, forced = [], []
    monkeypatch.setattr(fa.common, "load_model", lambda *a, **k: loads.append(a) or (None, None))
    monkeypatch.setattr(fa.ctrla, "force_answer", lambda m, t, task, q, text: forced.append(text) or " C.")
    argv = [str(run_file), "--model", "smollm2-135m", "--dtype", "float32"]
    fa.main(argv)
    side = [json.loads(line) for line in (tmp_path / "ctrla.forced.jsonl").read_text().splitlines()]
    assert [(r["id"], r["forced"]) for r in side] == [("1", " C."), ("3", " C.")] and forced == ["A is B.", "G."]
    settings = json.loads((tmp_path / "ctrla.forced.settings.json").read_text())     # the side file's own
    assert settings["--model"] == "smollm2-135m" and settings["method code"].startswith("ctrla.py, ")
    assert {"common.py code", "eval.py code"} <= set(settings)
    (tmp_path / "ctrla.forced.jsonl").write_text(json.dumps(side[0]) + "\n")    # one row left to force, but
    with pytest.raises(fa.InputError, match="computed with --dtype = float32, this run has bfloat16"):
        fa.main(argv[:-1] + ["bfloat16"])                                   # in another precision: refused
    fa.main(argv)
    assert len(loads) == 2 and forced[-1] == "G."
    fa.main(argv)                                   # all there: no model loaded, nothing written
    assert len(loads) == 2 and len((tmp_path / "ctrla.forced.jsonl").read_text().splitlines()) == 2
    with pytest.raises(fa.InputError, match="the run's model is smollm2-135m; pass --model smollm2-135m"):
        fa.main([str(run_file), "--model", "qwen2.5-coder-0.5b"])
    with pytest.raises(fa.InputError, match="no such file"):
        fa.main([str(tmp_path / "none.jsonl")])
    (tmp_path / "seakr.jsonl").write_text(json.dumps({"id": "1", "prediction": "x"}) + "\n")
    with pytest.raises(fa.InputError, match="not a CtrlA run file"):
        fa.main([str(tmp_path / "seakr.jsonl")])
    for bad, says in (('{"--model": "smollm2', "cannot read"), ('["--model"]', "not a run's settings")):
        (tmp_path / "ctrla.settings.json").write_text(bad)      # a damaged settings file: one line, no model
        with pytest.raises(fa.InputError, match=says):
            fa.main(argv)
    assert len(loads) == 2


# ---------------------------------------------------------------- same_rows.py: a before/after check

def test_same_rows_ignores_the_clock_and_names_the_first_difference(tmp_path, capsys):
    sr = load("same_rows")
    row = {"id": "q1", "prediction": "Paris", "seconds": 3.2, "cpu_seconds": 6.1, "cpu": "A", "libraries": "torch 1",
           "trace": {"steps": [{"score": 0.5}, {"score": 0.25}]}}
    before, after = tmp_path / "before", tmp_path / "after"
    for folder, seconds, cpu, score in ((before, 3.2, "A", 0.25), (after, 9.9, "B", 0.25)):
        folder.mkdir()
        rows = [row, {**row, "id": "q2", "seconds": seconds, "cpu_seconds": seconds * 2, "cpu": cpu,
                      "libraries": f"torch {cpu}", "trace": {"steps": [{"score": 0.5}, {"score": score}]}}]
        (folder / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sr.main([str(before), str(after)]) == 0
    assert capsys.readouterr().out == "run.jsonl: 2 of 2 rows identical (all but seconds, cpu_seconds, cpu, libraries)\n"
    lines = (after / "run.jsonl").read_text().splitlines()
    (after / "run.jsonl").write_text(lines[0] + "\n" + lines[1].replace("0.25", "0.26") + "\n")
    assert sr.main([str(before / "run.jsonl"), str(after / "run.jsonl")]) == 1
    assert capsys.readouterr().out == ("run.jsonl: 1 of 2 rows identical (all but seconds, cpu_seconds, cpu, libraries); first difference: "
                                       "row q2, trace.steps[1].score\n")
    assert sr.first_difference({"a": [1, 2]}, {"a": [1]}) == "a (length 2 -> 1)"
    assert sr.first_difference({"a": 1}, {"a": 1, "b": 2}) == "b (only after)"
    assert sr.main([str(before), str(after / "run.jsonl")]) == 2          # a folder against a file


# ---------------------------------------------------------------- bench_attention.py: what the fast path attends with

def test_bench_attention_times_what_the_fast_path_computes(tiny, monkeypatch):
    """Its "bfloat16 in float32" way gives speed._sdpa_grouped's output for a 16-bit decoding step (on a
    CPU without AMX), and its "bfloat16" way the kernel's, which the fast path keeps for a prefill."""
    import torch
    import common
    import speed
    monkeypatch.setattr(speed, "HALF", (torch.bfloat16, torch.float16))
    ba = load("bench_attention")
    attn = common.decoder_layers(tiny[0])[0].self_attn           # 4 query heads over 2 key/value heads
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, 1, 8).bfloat16(), torch.randn(2, 2, 6, 8).bfloat16(), torch.randn(2, 2, 6, 8).bfloat16()
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., :2] = False
    ours = speed._sdpa_grouped(attn, q, k, v, mask, scaling=8 ** -0.5)[0]
    assert torch.equal(ours, ba.attend(q, k, v, mask, False, True).transpose(1, 2))
    q6, m6 = torch.randn(2, 4, 6, 8).bfloat16(), torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
    prefill = speed._sdpa_grouped(attn, q6, k, v, m6, scaling=8 ** -0.5)[0]
    assert torch.equal(prefill, ba.attend(q6, k, v, m6, False, False).transpose(1, 2))


# ---------------------------------------------------------------- bf16_drift.py: the state U reads, fed again

def test_bf16_drift_refeeds_the_state_reference_records(tiny_real):
    """Feeding a run's samples again (one prefill, then each sample's tokens with its last one replaced
    by EOS) reads the very state common.reference recorded as `hidden`, on both tokenizer kinds; and a row
    that ended at EOS is read at prompt + its tokens + EOS, as one plain forward pass over them reads it."""
    import torch
    import common
    from speed import Generation
    bd = load("bf16_drift")
    model, tok = tiny_real
    mlp = common.decoder_layers(model)[1].mlp
    prompt = "Question: Who directed the film Laughter In Hell? Answer:"
    gens = common.reference(model, tok, prompt, 4, seed=3, top_k=30, temperature=1.3, max_new_tokens=6,
                            stop=("e",), hidden_module=mlp)
    assert {g.finish for g in gens} >= {"length"} and all(g.token_ids for g in gens)
    again = bd.refeed_states(model, tok, prompt, gens, mlp)
    assert again.shape == (5, model.config.hidden_size)
    assert torch.allclose(again, torch.stack([g.hidden for g in gens]), atol=1e-5)
    ended = Generation("x", gens[0].token_ids[:3], [0.0] * 3, "eos")
    ids = common.encode(tok, prompt) + ended.token_ids + [tok.eos_token_id]
    with common.record_output(mlp) as out, torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    assert torch.allclose(bd.refeed_states(model, tok, prompt, [ended], mlp)[0], out[0][0, -1], atol=1e-5)


def test_bf16_drift_direction_agreement_by_hand():
    """The cosine of the signed directions: a direction flipped with its sign agrees fully (1), an
    orthogonal one not at all (0), one at 60 degrees by half; keys index from the top as CtrlA's do."""
    import math
    import torch
    bd = load("bf16_drift")
    a = {"direction": torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]), "sign": torch.tensor([1.0, 1.0, -1.0])}
    c60 = [math.cos(math.pi / 3), math.sin(math.pi / 3)]
    b = {"direction": torch.tensor([[-1.0, 0.0], [0.0, 1.0], c60]), "sign": torch.tensor([-1.0, 1.0, 1.0])}
    assert bd.direction_agreement(a, b, [-3, -2, -1]) == pytest.approx([1.0, 0.0, -0.5])
    assert bd.direction_agreement(a, a, [-1]) == [1.0]


def test_compile_step_times_three_paths_that_compute_the_same_step(tiny):
    """The compiled step (inductor, static cache) and the eager ones compute the same logits; every path is
    timed on the same number of steps."""
    import torch
    cs = load("compile_step")
    model, _ = tiny
    prompt = torch.randint(3, 60, (1, 12), generator=torch.Generator().manual_seed(0))
    got = cs.compare(model, prompt, steps=4, rounds=2, warm=1)
    assert got["max_logit_diff"] < 1e-4
    assert set(got["ms_per_step"]) == {"eager plain", "eager onednn", "compiled plain"} and got["steps_timed"] == 6
    assert all(v > 0 for v in got["ms_per_step"].values()) and got["compile_s"] > 0


def test_cpu_grid_runs_each_cell_once_and_bfloat16_only_where_the_cpu_has_it(tmp_path):
    """cpu_grid.sh with a stand-in for python that prints its arguments as the JSON line: every method x
    kernel x precision cell once, in files named by them; a second call runs nothing (it resumes)."""
    import os
    import subprocess
    fake = tmp_path / "py"
    fake.write_text('#!/usr/bin/env bash\necho "log line"\necho "{\\"args\\": \\"$*\\"}"\necho x >> "$CALLS"\n')
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    for flags, dtypes in (("fpu avx2 fma", ["float32"]), ("avx2 avx512_bf16 amx_tile", ["float32", "bfloat16"])):
        out, info = tmp_path / f"out-{len(dtypes)}", tmp_path / "cpuinfo"
        info.write_text(f"flags\t\t: {flags}\n")
        env = {**os.environ, "PY": str(fake), "CPUINFO": str(info), "CALLS": str(calls)}
        for _ in range(2):
            subprocess.run(["bash", str(ROOT / "benchmarks" / "cpu_grid.sh"), str(out), "m1"], env=env, check=True,
                           capture_output=True)
        want = {f"{m}-m1-{k}-{d}.json" for m in ("seakr", "ctrla", "rowen") for k in ("plain", "onednn") for d in dtypes}
        assert {p.name for p in out.glob("*.json")} == want
        assert len(calls.read_text().split()) == len(want)
        calls.unlink()
        line = json.loads((out / "ctrla-m1-onednn-float32.json").read_text())
        assert line["args"] == ("benchmarks/bench_limit.py --method ctrla --model m1 --limit 16 --linear onednn "
                                "--dtype float32")


# ---------------------------------------------------------------- profile_method.py: operators by what they serve

def test_profile_method_groups_operators_and_adds_up_each_question():
    import torch
    pm = load("profile_method")
    assert [pm.group_of(n) for n in ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm", "aten::bmm",
                                     "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_softmax",
                                     "aten::_log_softmax", "aten::topk", "aten::argmax", "aten::matmul",
                                     "aten::copy_")] == [
        "linear", "linear", "linear", "attention", "attention", "attention",
        "sampling", "sampling", "sampling", "rest", "rest"]
    prof = pm.Profiled()
    x, w, b = torch.randn(3, 8), torch.randn(4, 8), torch.randn(4)
    for _ in range(2):                      # two questions: the recorder is switched on and off for each
        prof.on = True
        assert prof.on
        torch.nn.functional.linear(x, w, b)
        torch.bmm(torch.randn(2, 3, 8), torch.randn(2, 8, 5))
        prof.on = False
    assert not prof.on and prof.wall > 0
    assert prof.events["aten::addmm"][1] == 2 and prof.events["aten::bmm"][1] == 2
    assert all(sec >= 0 for sec, _ in prof.events.values())
    # a model's forward passes fold the events every FLUSH passes; none is lost or counted twice
    model = torch.nn.Linear(8, 4)
    prof.attach(model)
    prof.attach(model)                      # attached again (bench_limit attaches each run): one hook
    prof.FLUSH = 3
    prof.on = True
    for _ in range(7):
        model(x)
    prof.on = False
    assert prof.events["aten::addmm"][1] == 2 + 7


def test_profile_method_records_each_question_with_its_prediction(tmp_path, monkeypatch):
    pm = load("profile_method")
    rows = [{"id": "q1", "prediction": "Paris"}, {"id": "q2", "prediction": ""}]

    def fake_run(method, argv, prof):           # the method's run, stood in for: its rows, no model
        assert method == "seakr" and argv[:2] == ["--model", "m"]
        return rows, [0.1, 0.2]
    monkeypatch.setattr(pm.bench_limit, "run_method", fake_run)
    out = tmp_path / "p.json"
    monkeypatch.setattr("sys.argv", ["profile_method.py", "--method", "seakr", "--model", "m", "--limit", "2",
                                     "--dtype", "float32", "--linear", "plain", "--json", str(out)])
    pm.main()
    figures = json.loads(out.read_text())
    assert figures["predictions"] == {"q1": "Paris", "q2": ""}
    assert figures["questions"] == 2 and figures["dtype"] == "float32" and figures["linear"] == "plain"


# ---------------------------------------------------------------- pinned_runs.sh: run files between main and the worktrees

PINNED_M = "qwen2.5-coder-1.5b"


def pinned_layout(tmp_path):
    """A main checkout holding pinned_runs.sh and a .venv whose python is this one, beside a third-pin worktree
    whose ctrla.py is one line: (main, the worktree, the settings line of a run made there: its sha256)."""
    import hashlib
    import shutil
    import sys
    main, w3 = tmp_path / "main", tmp_path / "wt-runs3"
    (main / "benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "pinned_runs.sh", main / "benchmarks")
    (main / ".venv" / "bin").mkdir(parents=True)
    (main / ".venv" / "bin" / "python").symlink_to(sys.executable)
    w3.mkdir()
    (w3 / "ctrla.py").write_text("# the third pin's CtrlA\n")
    return main, w3, "ctrla.py, sha256 " + hashlib.sha256(b"# the third pin's CtrlA\n").hexdigest()[:16]


def put_run(path, rows, settings=None):
    """A run file of rows {"id": ROW}, with its settings file holding `settings` when given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"id": "{r}"}}\n' for r in rows))
    if settings is not None:
        (path.parent / (path.name[:-len(".jsonl")] + ".settings.json")).write_text(settings)


def run_ids(path):
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def pinned_runs(main, *args):
    import subprocess
    return subprocess.run(["bash", str(main / "benchmarks" / "pinned_runs.sh"), *args], capture_output=True, text=True)


def test_pinned_runs_copies_in_and_collects_back_without_losing_rows(tmp_path):
    """copy: main's longer run files into the worktrees, a run the third pin makes again from its growing copy
    in main (the first pin's file and forced answers taken out of the checkout); collect: what grew back to
    its place, never a shorter file, a first-pin copy left alone, and a file that rewrote committed rows refused."""
    import shutil
    m = PINNED_M
    main, w3, third = pinned_layout(tmp_path)
    w2 = tmp_path / "wt-runs2"
    put_run(main / f"results/2wikimultihopqa50-{m}/cot.jsonl", ["q1", "q2", "q3"], "cot@e860858")
    put_run(w2 / f"results/2wikimultihopqa50-{m}/cot.jsonl", ["q1"], "cot@e860858")       # the checkout's, older
    put_run(main / f"results/hotpotqa50-{m}/cot.jsonl", ["q1", "q2"], "cot@062262b")
    put_run(main / f"results/hotpotqa50-{m}/ctrla.jsonl", ["a1", "a2", "a3"], "ctrla@062262b")
    put_run(main / f"results/hotpotqa50-{m}/ctrla.forced.jsonl", ["a1"])
    put_run(main / f"results/hotpotqa50-{m}/ctrla-never.jsonl", ["n1"], "never@062262b")
    put_run(main / f"results/hotpotqa50-{m}-cd147d0/ctrla.jsonl", ["b1", "b2"], third)
    for name in ("ctrla.jsonl", "ctrla.settings.json", "ctrla.forced.jsonl"):              # the checkout's first pin
        dest = w3 / f"results/hotpotqa50-{m}" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(main / f"results/hotpotqa50-{m}" / name, dest)
    assert pinned_runs(main, "copy").returncode == 0
    assert run_ids(w2 / f"results/2wikimultihopqa50-{m}/cot.jsonl") == ["q1", "q2", "q3"]
    hot = w3 / f"results/hotpotqa50-{m}"
    assert run_ids(hot / "cot.jsonl") == ["q1", "q2"]
    assert run_ids(hot / "ctrla.jsonl") == ["b1", "b2"] and (hot / "ctrla.settings.json").read_text() == third
    assert not (hot / "ctrla.forced.jsonl").exists() and not (hot / "ctrla-never.jsonl").exists()

    put_run(hot / "ctrla.jsonl", ["b1", "b2", "b3"])                                           # the plans go on
    put_run(w2 / f"results/2wikimultihopqa50-{m}/seakr.jsonl", ["s1", "s2"], "seakr@e860858")
    put_run(w3 / f"results/2wikimultihopqa50-{m}/ctrla.jsonl", ["c1"], third)
    put_run(w3 / f"results/2wikimultihopqa50-{m}/cot.jsonl", ["q1"], "cot@e860858")            # an older copy
    put_run(hot / "seakr-no-sa-retrieval.jsonl", ["x1"], "ablation@062262b")                   # a first-pin copy
    shutil.copy(hot / "seakr-no-sa-retrieval.settings.json", main / f"results/hotpotqa50-{m}")
    assert pinned_runs(main, "collect").returncode == 0
    assert run_ids(main / f"results/hotpotqa50-{m}-cd147d0/ctrla.jsonl") == ["b1", "b2", "b3"]
    assert run_ids(main / f"results/hotpotqa50-{m}/ctrla.jsonl") == ["a1", "a2", "a3"]          # the first pin's stays
    assert run_ids(main / f"results/2wikimultihopqa50-{m}/seakr.jsonl") == ["s1", "s2"]
    assert run_ids(main / f"results/2wikimultihopqa50-{m}/ctrla.jsonl") == ["c1"]
    assert run_ids(main / f"results/2wikimultihopqa50-{m}/cot.jsonl") == ["q1", "q2", "q3"]
    assert not (main / f"results/hotpotqa50-{m}-cd147d0/seakr-no-sa-retrieval.jsonl").exists()

    put_run(hot / "ctrla.jsonl", ["b1", "other", "b3", "b4"])                        # committed rows rewritten
    done = pinned_runs(main, "collect")
    assert done.returncode == 1 and "does not begin with the 3 rows" in done.stderr
    assert run_ids(main / f"results/hotpotqa50-{m}-cd147d0/ctrla.jsonl") == ["b1", "b2", "b3"]


def test_pinned_runs_promotes_only_finished_third_pin_runs_and_start_resumes_after_it(tmp_path):
    """promote: nothing moves while a named run holds other questions than the first pin's; then the first pin's
    files (forced answers and their provenance note too) go to FOLDER-062262b, the third pin's into FOLDER; copy
    and collect afterwards take a promoted file for the third pin's, so a new machine's plan does not redo it."""
    m = PINNED_M
    main, w3, third = pinned_layout(tmp_path)
    res = main / "results"
    hot, new, hist = res / f"hotpotqa50-{m}", res / f"hotpotqa50-{m}-cd147d0", res / f"hotpotqa50-{m}-062262b"

    for run in ("ctrla", "ctrla-never"):
        put_run(hot / f"{run}.jsonl", ["q1", "q2", "q3"], f"{run}@062262b")
        put_run(hot / f"{run}.forced.jsonl", ["q1"])
    put_run(new / "ctrla.jsonl", ["q1", "q2", "q3"], third)
    put_run(new / "ctrla-never.jsonl", ["q1", "q2"], third)                                    # still growing
    notes = {"pinned": {}, "notes": {f"hotpotqa50-{m}/ctrla.forced.jsonl": "made at main", "other": "kept"}}
    (res / "provenance.json").write_text(json.dumps(notes, indent=1) + "\n")
    done = pinned_runs(main, "promote", f"hotpotqa50-{m}", "ctrla", "ctrla-never")
    assert done.returncode == 1 and "ctrla-never.jsonl holds 2 questions" in done.stderr
    assert "nothing moved" in done.stderr
    assert run_ids(hot / "ctrla.jsonl") == ["q1", "q2", "q3"] and not hist.exists()
    assert (hot / "ctrla.settings.json").read_text() == "ctrla@062262b"
    done = pinned_runs(main, "promote", f"hotpotqa50-{m}", "cot")
    assert done.returncode == 1 and "is no run the third pin makes again" in done.stderr
    (new / "ctrla.settings.json").write_text("ctrla@062262b")                               # not the third pin's
    done = pinned_runs(main, "promote", f"hotpotqa50-{m}", "ctrla")
    assert done.returncode == 1 and "does not name the third pin's method file" in done.stderr
    (new / "ctrla.settings.json").write_text(third)

    put_run(new / "ctrla-never.jsonl", ["q1", "q2", "q3"], third)
    done = pinned_runs(main, "promote", f"hotpotqa50-{m}", "ctrla")       # one of CtrlA's two: the pins would mix
    assert done.returncode == 1 and f"name hotpotqa50-{m}:ctrla-never too" in done.stderr
    assert "nothing moved" in done.stderr and not hist.exists() and (new / "ctrla.jsonl").exists()
    done = pinned_runs(main, "promote", f"hotpotqa50-{m}", "ctrla", "ctrla-never", "ctrla")   # a RUN named twice
    assert done.returncode == 0, done.stderr
    assert (hist / "ctrla-never.settings.json").read_text() == "ctrla-never@062262b"
    done = pinned_runs(main, "promote", f"hotpotqa50-{m}", "ctrla")                       # again: refused
    assert done.returncode == 1 and "was promoted" in done.stderr
    assert sorted(p.name for p in hist.iterdir()) == sorted(f"{r}{x}" for r in ("ctrla", "ctrla-never")
                                                           for x in (".jsonl", ".settings.json", ".forced.jsonl"))
    assert (hist / "ctrla.settings.json").read_text() == "ctrla@062262b"
    assert sorted(p.name for p in hot.iterdir()) == sorted(f"{r}{x}" for r in ("ctrla", "ctrla-never")
                                                          for x in (".jsonl", ".settings.json"))
    assert (hot / "ctrla.settings.json").read_text() == third and not new.exists()
    assert json.loads((res / "provenance.json").read_text())["notes"] == {
        f"hotpotqa50-{m}-062262b/ctrla.forced.jsonl": "made at main", "other": "kept"}

    wt = w3 / "results" / f"hotpotqa50-{m}"                     # a new machine: the checkouts hold the first pin's
    for checkout in (wt, tmp_path / "wt-runs2" / "results" / f"hotpotqa50-{m}"):
        put_run(checkout / "ctrla.jsonl", ["q1", "q2", "q3"], "ctrla@062262b")
        put_run(checkout / "ctrla.forced.jsonl", ["q1"])
    assert pinned_runs(main, "collect").returncode == 0      # the checkouts' first-pin files are left where they are
    assert (hot / "ctrla.settings.json").read_text() == third and not (hot / "ctrla.forced.jsonl").exists()
    assert pinned_runs(main, "copy").returncode == 0
    assert (wt / "ctrla.settings.json").read_text() == third and not (wt / "ctrla.forced.jsonl").exists()
    assert run_ids(wt / "ctrla-never.jsonl") == ["q1", "q2", "q3"]
    put_run(wt / "ctrla.jsonl", ["q1", "q2", "q3", "q4"], third)                               # grown after promotion
    assert pinned_runs(main, "collect").returncode == 0
    assert run_ids(hot / "ctrla.jsonl") == ["q1", "q2", "q3", "q4"] and not new.exists()
