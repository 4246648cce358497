"""How well a model reads: HotpotQA answers closed book and given the two gold paragraphs (oracle context).

    python benchmarks/oracle_context.py --model qwen2.5-coder-1.5b --limit 60 [--modes closed gold]

If a model cannot answer from the gold paragraphs, no retrieval method can show itself with it. For the
first N questions of a HotpotQA dev file (the distractor setting's JSON), one chat turn each, decoded
greedily (up to 32 tokens): the question alone ("closed"), or after the paragraphs that hold its
supporting facts, whole, titled, in the file's order ("gold"). The instruction asks for a few words.
Prints EM / F1 (eval.py's SQuAD-style normalisation) per mode, the seconds for all prompts, and one
JSON line; --output keeps every prediction.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import eval as metrics  # noqa: E402

HOTPOT = ROOT / "data/raw/hotpotqa/hotpot_dev_distractor_v1_100.json"   # make data
INSTRUCTION = "Answer the question with a few words."


def gold_paragraphs(item: dict) -> list[str]:
    """The context paragraphs whose titles the supporting facts name, as "Title: sentences"."""
    titles = {title for title, _ in item["supporting_facts"]}
    return [f"{title}: {''.join(sents).strip()}" for title, sents in item["context"] if title in titles]


def user_turn(item: dict, mode: str) -> str:
    if mode == "closed":
        return f"{INSTRUCTION}\nQuestion: {item['question']}"
    context = "\n\n".join(gold_paragraphs(item))
    return f"{context}\n\n{INSTRUCTION}\nQuestion: {item['question']}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=common.DEFAULT_MODEL)
    p.add_argument("--data", default=str(HOTPOT), help="HotpotQA dev JSON (distractor setting)")
    p.add_argument("--limit", type=int, default=60)
    p.add_argument("--modes", nargs="+", default=["closed", "gold"], choices=["closed", "gold"])
    p.add_argument("--batch", type=int, default=4, help="prompts decoded together")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--output", help="JSONL of every prediction")
    a = p.parse_args()
    items = json.load(open(a.data))[:a.limit]
    t = time.perf_counter()
    model, tok = common.load_model(a.model, a.dtype, a.device)
    load_s = time.perf_counter() - t
    fig = {"model": a.model, "dtype": common.precision(model), "questions": len(items),
           "load_s": round(load_s, 1)}
    rows = []
    for mode in a.modes:
        prompts = [common.chat_prompt(tok, user_turn(it, mode)) for it in items]
        preds, t = [], time.perf_counter()
        for i in range(0, len(prompts), a.batch):
            outs = common.greedy(model, tok, prompts[i:i + a.batch], max_new_tokens=32,
                                 stop=("\n",) + common.turn_stops(tok))
            preds += [o.text.strip() for o in outs]
            em = sum(metrics.exact_match(pr, [it["answer"]]) for pr, it in zip(preds, items))
            print(f"  {mode} {len(preds)}/{len(items)}: EM {100 * em / len(preds):.1f} "
                  f"({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
        secs = time.perf_counter() - t
        em = 100 * sum(metrics.exact_match(pr, [it["answer"]]) for pr, it in zip(preds, items)) / len(items)
        f1 = 100 * sum(metrics.f1_score(pr, [it["answer"]]) for pr, it in zip(preds, items)) / len(items)
        fig[mode] = {"em": round(em, 1), "f1": round(f1, 1), "seconds": round(secs, 1)}
        rows += [{"mode": mode, "qid": it["_id"], "answer": it["answer"], "prediction": pr}
                 for pr, it in zip(preds, items)]
        print(f"{a.model} {fig['dtype']} {mode:6}: EM {em:5.1f}  F1 {f1:5.1f}  ({len(items)} questions, {secs:.0f} s)",
              flush=True)
    if a.output:
        Path(a.output).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
