"""Retrieval benchmarks: parity with real Lucene 8, and the on-disk index at scale.

  python benchmarks/bench_retrieval.py parity [--corpus FILE] [--out results.json]
      Indexes the corpus (default: the 1,000 DPR passages of data/raw/dpr_wiki, from make data) with
      benchmarks/lucene/LuceneRef.java (Lucene 8 EnglishAnalyzer on title + txt, StandardAnalyzer
      on text, BM25 1.2/0.75) and with our presets (in memory and the tantivy index), runs 300
      queries (100 NQ-open, 100 HotpotQA questions, 100 passage snippets) and prints top-1 / top-3
      (same 3 in order) / top-10 (same 10 in order) agreement, the largest score difference, and
      how many passages our analyzers tokenise exactly as Lucene. Needs java and Debian's
      liblucene8-java (apt-get install liblucene8-java); exits 0 with a note without them.
  python benchmarks/bench_retrieval.py vocabulary
      Every distinct word (3 characters or more) of the files under data/raw, analysed by Lucene 8 and by
      our english and standard analyzers: how many 400-word passages come out otherwise (java needed).
  python benchmarks/bench_retrieval.py scale --n 100000 [--dir DIR]
      Builds an index of N passages (the DPR sample repeated with new ids; each copy's text gets
      a copy number word so that copies are not identical) in a child process, then reports
      build time, peak memory (max RSS of the child), disk bytes per passage and query latency
      (mean and p95 over 100 queries, each preset).
"""
from __future__ import annotations

import argparse
import glob
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import retrieval  # noqa: E402
RAW = ROOT / "data/raw"    # make data
JAVA_SRC = ROOT / "benchmarks/lucene/LuceneRef.java"
JAR_GLOBS = ("/usr/share/java/lucene-core-8*.jar", "/usr/share/java/lucene-analyzers-common-8*.jar")


def lucene_jars():
    jars = [sorted(glob.glob(g)) for g in JAR_GLOBS]
    if not shutil.which("java") or not shutil.which("javac") or not all(jars):
        return None
    return [j[-1] for j in jars]


def parity_queries(corpus, n=100, seed=0):
    """100 NQ-open dev questions, 100 HotpotQA dev questions, 100 snippets (12 words from passage
    text at a random offset), deterministic."""
    nq = [json.loads(line)["question"] for line in open(RAW / "nq/NQ-open.dev.jsonl")][:n]
    hp = [json.loads(line)["question"] for line in open(RAW / "hotpotqa/hotpotqa_dev_500.jsonl")][:n]
    rng = random.Random(seed)
    snippets = []
    for p in rng.sample(corpus, n):
        words = p["text"].split()
        i = rng.randrange(max(1, len(words) - 12))
        snippets.append(" ".join(words[i:i + 12]))
    return nq + hp + snippets


def run_lucene(corpus, queries, workdir):
    jars = lucene_jars()
    cp = ":".join(jars)
    subprocess.run(["javac", "-cp", cp, "-d", str(workdir), str(JAVA_SRC)], check=True)
    clean = lambda s: s.replace("\t", " ").replace("\n", " ").replace("\r", " ")  # whitespace either way
    (workdir / "p.tsv").write_text("".join(f"{clean(p['id'])}\t{clean(p['title'])}\t{clean(p['text'])}\n"
                                           for p in corpus), encoding="utf-8")
    (workdir / "q.txt").write_text("".join(clean(q) + "\n" for q in queries), encoding="utf-8")
    subprocess.run(["java", "-cp", f"{cp}:{workdir}", "LuceneRef", str(workdir / "p.tsv"),
                    str(workdir / "q.txt"), str(workdir / "out.tsv")], check=True)
    hits, toks = {}, {}
    for line in open(workdir / "out.tsv", encoding="utf-8"):
        r = line.rstrip("\n").split("\t")
        if r[0] == "Q":
            hits.setdefault((r[1], int(r[2])), []).append((r[4], float(r[5])))
        else:
            toks[r[1]] = (r[2].split(), r[3].split())
    return hits, toks


def agreement(ref, ours, queries, preset):
    """top-1 same passage, top-3 same in order, top-10 same in order; largest |score difference|
    relative to Lucene's score over matching ranks."""
    t1 = t3 = t10 = 0
    worst = 0.0
    for qi in range(len(queries)):
        a, b = ref.get((preset, qi), []), ours[qi]
        ids_a, ids_b = [x[0] for x in a], [x["id"] for x in b]
        t1 += ids_a[:1] == ids_b[:1]
        t3 += ids_a[:3] == ids_b[:3]
        t10 += ids_a[:10] == ids_b[:10]
        for (ia, sa), h in zip(a, b):
            if ia == h["id"]:
                worst = max(worst, abs(sa - h["score"]) / max(sa, 1e-9))
    return {"top1": t1, "top3": t3, "top10": t10, "n": len(queries), "max_rel_score_diff": worst}


def parity(args):
    if lucene_jars() is None:
        print("skipped: needs java, javac and liblucene8-java (apt-get install liblucene8-java)")
        return None
    corpus = retrieval.load_corpus(args.corpus)
    queries = parity_queries(corpus)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ref, toks = run_lucene(corpus, queries, tmp)
        retrieval.build_index(args.corpus, tmp / "index", progress=False)
        result = {"corpus": str(args.corpus), "passages": len(corpus), "queries": len(queries)}
        for preset in ("seakr", "ctrla"):
            local = retrieval.LocalBM25(corpus, preset)
            disk = retrieval.IndexBM25(tmp / "index", preset)
            result[f"{preset} in memory"] = agreement(ref, [local.search(q, 10) for q in queries], queries, preset)
            result[f"{preset} index"] = agreement(ref, [disk.search(q, 10) for q in queries], queries, preset)
    same_en = sum(retrieval.analyze(p["text"], "english") == toks[p["id"]][0] for p in corpus)
    same_std = sum(retrieval.analyze(p["text"], "standard") == toks[p["id"]][1] for p in corpus)
    result["analyzer: passages tokenised as Lucene (english, standard)"] = [same_en, same_std]
    if args.show_diffs:
        for p in corpus:
            mine, theirs = retrieval.analyze(p["text"], "english"), toks[p["id"]][0]
            if mine != theirs:
                print(p["id"], sorted(set(mine) ^ set(theirs))[:10])
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


# where Snowball's Porter and Lucene's part (tests/test_retrieval.py), and marks after a space (UAX #29 WB4)
CASES = ("trekking trekked revving maxxed ahhed trekkings psychologie anthropologie esblie psychologies établie "
         "possibly technology a \u200e b \u0301 c\u200e")


def vocabulary(args):
    """Every distinct word of 3 characters or more (our standard tokenizer, lower case) in the files under
    data/raw, 400 to a passage, and CASES, analysed by Lucene 8 and by ours: how many passages differ, and
    where."""
    if lucene_jars() is None:
        print("skipped: needs java, javac and liblucene8-java (apt-get install liblucene8-java)")
        return None
    words = set()
    for f in sorted(glob.glob(str(RAW / "**/*.json*"), recursive=True)):
        words |= {t for t in retrieval.standard_tokens(Path(f).read_text(encoding="utf-8").lower()) if len(t) > 2}
    words = sorted(words)
    corpus = [{"id": str(i), "title": "", "text": " ".join(words[i:i + 400])} for i in range(0, len(words), 400)]
    corpus.append({"id": "cases", "title": "", "text": CASES})
    with tempfile.TemporaryDirectory() as tmp:
        _, toks = run_lucene(corpus, ["x"], Path(tmp))
    result = {"words": len(words), "passages": len(corpus) - 1, "and CASES": CASES}
    for i, analyzer in enumerate(("english", "standard")):
        differ = [p for p in corpus if retrieval.analyze(p["text"], analyzer) != toks[p["id"]][i]]
        result[f"{analyzer}: passages tokenised otherwise"] = len(differ)
        for p in differ[:5]:
            print(analyzer, [(a, b) for a, b in zip(toks[p["id"]][i], retrieval.analyze(p["text"], analyzer))
                             if a != b][:5])
    print(json.dumps(result, indent=1))
    return result


def _synthetic(corpus, n, path):
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            p = corpus[i % len(corpus)]
            copy = i // len(corpus)
            f.write(json.dumps({"id": str(i), "title": p["title"],
                                "text": p["text"] + (f" copy{copy}" if copy else "")}) + "\n")


def scale(args):
    corpus = retrieval.load_corpus(args.corpus)
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench_retrieval_"))
    work.mkdir(parents=True, exist_ok=True)
    src, index = work / f"corpus_{args.n}.jsonl", work / f"index_{args.n}"
    if not src.exists():
        _synthetic(corpus, args.n, src)
    shutil.rmtree(index, ignore_errors=True)
    t0 = time.time()
    child = subprocess.run([sys.executable, str(ROOT / "retrieval.py"), "build", str(src), str(index)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    build_s = time.time() - t0
    if child.returncode:
        sys.exit(f"build failed: {child.stdout}")
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    disk = sum(f.stat().st_size for f in index.rglob("*") if f.is_file())
    queries = parity_queries(corpus)[:200:2]
    result = {"passages": args.n, "build_s": round(build_s, 1), "passages_per_s": round(args.n / build_s),
              "peak_rss_mb": round(peak_mb), "disk_bytes_per_passage": round(disk / args.n, 1)}
    for preset in ("seakr", "ctrla"):
        r = retrieval.IndexBM25(index, preset)
        r.search(queries[0], 3)
        times = []
        for q in queries:
            t = time.perf_counter()
            r.search(q, 3)
            times.append(time.perf_counter() - t)
        times.sort()
        result[f"{preset}_query_ms_mean"] = round(1000 * statistics.mean(times), 1)
        result[f"{preset}_query_ms_p95"] = round(1000 * times[int(0.95 * len(times))], 1)
    print(json.dumps(result))
    if not args.keep:
        shutil.rmtree(index, ignore_errors=True)
        src.unlink()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parity")
    p.add_argument("--corpus", default=str(RAW / "dpr_wiki/sample_data.jsonl"))
    p.add_argument("--out")
    p.add_argument("--show-diffs", action="store_true", help="list passages tokenised differently")
    sub.add_parser("vocabulary", help="every word of data/raw analysed by Lucene 8 and by ours")
    s = sub.add_parser("scale")
    s.add_argument("--n", type=int, default=100_000)
    s.add_argument("--corpus", default=str(RAW / "dpr_wiki/sample_data.jsonl"))
    s.add_argument("--dir")
    s.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    {"parity": parity, "vocabulary": vocabulary, "scale": scale}[args.cmd](args)


if __name__ == "__main__":
    main()
