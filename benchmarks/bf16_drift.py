"""How far bfloat16 moves SeaKR's eigen score U and CtrlA's directions from float32's.

    python benchmarks/bf16_drift.py [--model ALIAS] [--limit N]
    python benchmarks/bf16_drift.py --method ctrla [--model ALIAS] [--pairs N]

SeaKR's first step on each of the first N HotpotQA demo questions (seakr.call, as a run makes it: the
greedy step and k samples, drawn in float32), then each sample's tokens fed again through the same
model loaded in bfloat16, in one teacher-forced pass after the prompt's prefill, reading the state U
reads (layer L/2 - 1's MLP output at the sample's last token replaced by EOS: common.reference).
Prints, per question, U in both precisions and whether SeaKR's decision at the model's delta differs;
then a JSON line. The same feeding through the float32 model must give back the states the run
recorded (`float32_refeed_max_diff`), which checks that the feeding reads the state U reads.

--method ctrla: CtrlA's honesty and confidence features (ctrla.features, --pairs contrast pairs each, as
a run computes them) in both precisions: per layer of the ranges CtrlA uses (steering for honesty,
monitoring for confidence), the cosine between the two signed directions (1: the same direction), and
tau as each precision calibrates it (ctrla.threshold over the monitored layers).

Why held fixed: a bfloat16 run draws other samples (its logits round differently), so two runs' U differ by
sampling as well; this measures the precision alone. On a CPU without AMX or AVX512-BF16, torch
emulates bfloat16 (slow: `--method ctrla` on SmolLM2 took about 20 minutes on a 2-core Zen 3 EPYC, most
of it the bfloat16 features), with float32 sums as AMX's, so the rounding measured is the precision's,
not the CPU's.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import ctrla  # noqa: E402
import models  # noqa: E402
import seakr  # noqa: E402


@torch.inference_mode()
def refeed_states(model, tok, prompt: str, gens, module) -> torch.Tensor:
    """[len(gens), hidden] the output of `module` at each generation's EOS-substituted last position
    (prompt + tokens[:-1] + [EOS], or prompt + tokens + [EOS] for a row that ended at EOS), fed
    through `model` after one prefill of the prompt: the state common.reference records as `hidden`."""
    ids = common.encode(tok, prompt)
    prefix = model(input_ids=torch.tensor([ids[:-1]]), use_cache=True).past_key_values
    states = []
    with common.record_output(module) as out:
        for g in gens:
            tail = ids[-1:] + (g.token_ids if g.finish == "eos" else g.token_ids[:-1]) + [tok.eos_token_id]
            model(input_ids=torch.tensor([tail]), past_key_values=copy.deepcopy(prefix), use_cache=True)
            states.append(out[-1][0, -1].float())
    return torch.stack(states)


def first_steps(model, tok, records, s: seakr.Settings):
    """(id, prompt, greedy text, [non-empty samples], U) of SeaKR's first call on each record, as its loop
    makes it (the samples as common.sample_many returned them, hidden states included)."""
    prefix = seakr.load_exemplars("hotpotqa")
    recorded = []
    original = common.sample_many

    def recording(*args, **kw):
        out = original(*args, **kw)
        recorded.append(out)
        return out

    common.sample_many = recording
    try:
        for rec in records:
            prompt = seakr.build_prompt(prefix, seakr.edit_question(rec["question"], True))
            budget = seakr.Budget(common.question_seed(s.seed, rec["id"]))
            c = seakr.call(model, tok, prompt, seakr.stop_strings(False, final=False), s, budget)
            gens = recorded.pop()[0]
            yield rec["id"], prompt, c.text, [g for g in gens[1:] if g.text.strip()], c.score
    finally:
        common.sample_many = original


def direction_agreement(a: dict, b: dict, keys) -> list[float]:
    """Per layer key, the cosine between two feature sets' signed directions (sign_l * d_l: the way a
    score reads, ctrla.layer_scores); the directions are unit vectors."""
    return [float((a["sign"][k] * a["direction"][k]).double() @ (b["sign"][k] * b["direction"][k]).double())
            for k in keys]


def ctrla_drift(full, half, tok, a) -> dict:
    keys = {"honesty": common.layer_keys(ctrla.STEER_LAYERS), "confidence": common.layer_keys(ctrla.MONITOR_LAYERS)}
    out = {"model": a.model, "cpu": models.cpu_name(), "method": "ctrla", "pairs": a.pairs}
    feats = {}
    for name, model in (("float32", full), ("bfloat16", half)):
        feats[name] = {kind: ctrla.features(model, tok, kind, a.pairs) for kind in keys}
        out[f"tau_{name}"] = round(ctrla.threshold(ctrla.Settings(tau=None), feats[name], keys["confidence"]), 4)
    for kind, ks in keys.items():
        cos = direction_agreement(feats["float32"][kind], feats["bfloat16"][kind], ks)
        out[f"{kind}_cosine"] = {"min": round(min(cos), 5), "median": round(sorted(cos)[len(cos) // 2], 5),
                                 "per_layer": {str(k): round(c, 5) for k, c in zip(ks, cos)}}
        print(f"{kind} directions, layers {ks[0]}..{ks[-1]}: cosine float32 / bfloat16 min {min(cos):.5f}, "
              f"median {out[f'{kind}_cosine']['median']:.5f}", file=sys.stderr)
    print(f"tau: float32 {out['tau_float32']}, bfloat16 {out['tau_bfloat16']}", file=sys.stderr)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--method", choices=["seakr", "ctrla"], default="seakr")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--limit", type=int, default=4, help="SeaKR: the first N HotpotQA demo questions")
    p.add_argument("--pairs", type=int, default=ctrla.N_PAIRS, help="CtrlA: contrast pairs per feature")
    a = p.parse_args(argv)
    if a.method == "ctrla":
        full, tok = common.load_model(a.model, "float32", "cpu", "plain")
        half, _ = common.load_model(a.model, "bfloat16", "cpu", "plain")
        print(json.dumps(ctrla_drift(full, half, tok, a)))
        return
    records = common.load_dataset("hotpotqa", limit=a.limit)
    full, _ = common.load_model(a.model, "float32", "cpu", "plain")
    half, tok = common.load_model(a.model, "bfloat16", "cpu", "plain")
    layer = seakr.default_layer(full)
    delta = seakr.THRESHOLDS.get(a.model, seakr.PAPER_THRESHOLD)
    s = seakr.Settings(delta=delta, layer=layer)
    print(f"{a.model}: layer {layer}, delta {delta}; CPU {models.cpu_name()}", file=sys.stderr)
    rows = []
    for qid, prompt, text, samples, u32 in first_steps(full, tok, records, s):
        if len(samples) < 2:
            continue
        recorded = torch.stack([g.hidden for g in samples])
        again = refeed_states(full, tok, prompt, samples, common.decoder_layers(full)[layer].mlp)
        u16 = seakr.eigen_score(refeed_states(half, tok, prompt, samples, common.decoder_layers(half)[layer].mlp))
        row = dict(id=qid, samples=len(samples), u_float32=round(u32, 4), u_bfloat16=round(u16, 4),
                   diff=round(u16 - u32, 4), float32_refeed_max_diff=float((again - recorded).abs().max()),
                   retrieve_float32=seakr.should_retrieve(u32, text, delta),
                   retrieve_bfloat16=seakr.should_retrieve(u16, text, delta))
        rows.append(row)
        print(f"{qid}: U float32 {u32:.4f}, bfloat16 {u16:.4f} ({u16 - u32:+.4f}); retrieve "
              f"{row['retrieve_float32']} / {row['retrieve_bfloat16']}; float32 fed again: max diff "
              f"{row['float32_refeed_max_diff']:.1e}")
    diffs = [abs(r["diff"]) for r in rows]
    spread = [r["u_float32"] for r in rows]
    print(json.dumps({"model": a.model, "cpu": models.cpu_name(), "delta": delta, "layer": layer,
                      "questions": len(rows), "max_abs_diff": max(diffs, default=None),
                      "float32_range": [min(spread, default=None), max(spread, default=None)],
                      "decisions_differ": sum(r["retrieve_float32"] != r["retrieve_bfloat16"] for r in rows),
                      "rows": rows}))


if __name__ == "__main__":
    main()
