"""Tests of retrieval.py: Lucene's length encoding, IDF and BM25 scores against hand-computed values,
the analyzers, the presets, the on-disk index (equal to the in-memory one, resumable), the
Elasticsearch client against a real HTTP server on 127.0.0.1, and the one-line errors."""
import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

import common
import retrieval
from common import InputError
from retrieval import (ElasticRetriever, IndexBM25, LocalBM25, analyze, best_fields, build_index,
                       byte4_to_int, field_score, idf, int_to_byte4, porter_measure, porter_stem,
                       standard_tokens, term_score)


# --- Lucene's arithmetic, by hand ----------------------------------------------------------------

def test_smallfloat_length_byte():
    # exact below 24; 100 - 24 = 76 = 0b1001100: 4 top bits 1001, shift 3 -> byte 24 + (1 | 4 << 3) = 57
    assert [int_to_byte4(n) for n in (0, 1, 23, 24, 30, 40, 41, 100)] == [0, 1, 23, 24, 30, 40, 40, 57]
    assert byte4_to_int(57) == 24 + (0b1001 << 3) == 96  # 100 tokens are scored as 96
    assert byte4_to_int(40) == 40 and byte4_to_int(255) == 24 + (0b1111 << 27)  # the largest length
    for n in (0, 5, 23, 24, 25, 77, 100, 1000, 123456):
        assert byte4_to_int(int_to_byte4(n)) <= n < byte4_to_int(int_to_byte4(n) + 1)


def test_idf_is_lucene_s():
    assert idf(1, 4) == pytest.approx(math.log(1 + 3.5 / 1.5))  # 1.2040
    assert idf(2, 4) == pytest.approx(math.log(2))              # rank_bm25's own IDF: 0
    assert idf(4, 4) == pytest.approx(math.log(1 + 0.5 / 4.5)) and idf(4, 4) > 0
    assert isinstance(idf(1, 4), np.float32)


def test_term_and_field_score_use_the_encoded_length():
    # average length: tf 1 -> w / (1 + 1.2) for k1 = 1.2
    assert float(term_score(math.log(2), 1, 1 / 1.2)) == pytest.approx(math.log(2) / 2.2, rel=1e-6)
    # a 100-token field in a collection of average 96: Lucene scores it as 96 tokens, i.e. average
    w = math.log(1 + 1.5 / 1.5)  # df 1 of N 2
    got = field_score([1], 100, [1], 2, 192)
    assert float(got) == pytest.approx(w / 2.2, rel=1e-6)
    unencoded = w / (1 + 1.2 * (0.25 + 0.75 * 100 / 96))
    assert abs(float(got) - unencoded) > 1e-3
    # two query tokens: the sum; a token absent from the passage adds nothing
    two = field_score([1, 0, 2], 3, [1, 1, 2], 2, 6)
    ni = 1 / 1.2  # length 3 = average
    hand = math.log(2) * ni / (1 + ni) + math.log(1.2) * 2 * ni / (1 + 2 * ni)
    assert float(two) == pytest.approx(hand, rel=1e-6)


def test_best_fields_tie_breaker():
    assert float(best_fields([2.0, 1.0])) == 2.5
    assert float(best_fields([1.0, 3.0])) == 3.5
    assert float(best_fields([1.0, 3.0], tie_breaker=0.0)) == 3.0
    assert float(best_fields([0.0, 0.75])) == 0.75


# --- analyzers ----------------------------------------------------------------------------------

def test_standard_tokenizer_word_breaks():
    assert standard_tokens("John's U.S.A. trip: 3.14, 1,000 a,b foo_bar ___ km² 東京 well-known x:y") == [
        "John's", "U.S.A", "trip", "3.14", "1,000", "a", "b", "foo_bar", "km", "東", "京", "well", "known", "x:y"]
    assert standard_tokens("café naïve भाकरखाडी") == ["café", "naïve", "भाकरखाडी"]  # marks stay in words
    assert standard_tokens("a" * 300) == ["a" * 255, "a" * 45]
    # UAX #29 WB4: a format or combining character joins what precedes it; after a space that is no word
    # (a left-to-right mark between spaces, as in HotpotQA's Arabic titles, was a token of its own)
    assert standard_tokens("a \u200e b \u0301 c\u200e") == ["a", "b", "c\u200e"]


def test_english_and_standard_analyzers():
    text = "John's cats are running in the U.S.A. Is it THE technology?"
    # possessive gone, lower case, the 33 stop words (are, in, the, is, it) gone, Porter stems
    assert analyze(text, "english") == ["john", "cat", "run", "u.s.a", "technolog"]
    assert analyze(text, "standard") == ["john's", "cats", "are", "running", "in", "the", "u.s.a", "is",
                                         "it", "the", "technology"]
    # Lucene's 33 stop words have "was" but not "what" (common.STOP_WORDS has both)
    assert analyze("What was thus", "english") == ["what", "thu"]


def test_porter_departures_of_lucene():
    assert porter_stem(["possibly", "technology", "assembly", "is", "us", "biology", "caresses", "ponies",
                        "relational", "generalizations"]) == [
        "possibl", "technolog", "assembl", "is", "us", "biologi", "caress", "poni", "relat", "gener"]
    # a word in -ie keeps -logi / -bli: step 2 saw "-logie" (no rule), step 5 then dropped the e
    assert porter_stem(["psychologie", "anthropologie", "esblie", "psychologies"]) == [
        "psychologi", "anthropologi", "esbli", "psycholog"]     # -ies: step 1a made it -logi before step 2
    # step 1b after -ed / -ing undoubles any double consonant but l, s, z (Snowball: bb dd ff gg mm nn pp
    # rr tt only), then steps 2-5 run on the rest
    assert porter_stem(["trekking", "trekked", "revving", "maxxed", "ahhed", "trekkings", "hopping",
                        "falling", "missing", "buzzing", "trekk"]) == [
        "trek", "trek", "rev", "max", "ah", "trek", "hop", "fall", "miss", "buzz", "trekk"]
    # Porter's m: [C](VC)^m[V] (the paper's examples)
    assert [porter_measure(w) for w in ("tr", "ee", "tree", "by", "trouble", "oats", "ivy", "troubles",
                                        "private", "orrery")] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


# --- presets, in memory ----------------------------------------------------------------------------

CITIES = [
    {"id": "0", "title": "Paris", "text": "Paris is the capital of France."},  # title [pari] txt [pari capit franc]
    {"id": "1", "title": "Lyon", "text": "Lyon is a city in France."},         # title [lyon] txt [lyon citi franc]
]


def test_seakr_preset_scores_by_hand():
    r = LocalBM25(CITIES, "seakr")
    # txt: N 2, lengths 3 and 3 (average): each term w x (1 / 1.2) / (1 + 1 / 1.2) = w / 2.2
    hits = r.search("capital of France", 5)
    assert [h["id"] for h in hits] == ["0", "1"]
    assert hits[0]["score"] == pytest.approx((math.log(2) + math.log(1.2)) * (1 / 2.2), rel=1e-6)
    assert hits[1]["score"] == pytest.approx(math.log(1.2) * (1 / 2.2), rel=1e-6)
    # "paris" in title and txt: best_fields = best + 0.5 x the other (a one-field sum would be 2x)
    one = math.log(2) * (1 / 2.2)
    assert r.search("Paris", 5)[0]["score"] == pytest.approx(1.5 * one, rel=1e-6)
    assert common.BM25(CITIES).search("Paris", 5)[0]["score"] == pytest.approx(1.5 * one, rel=1e-6)
    assert r.search("the of a is", 3) == [] and r.search("Tokyo", 3) == [] and r.search("Paris", 0) == []


def test_ctrla_preset_is_standard_on_text_only():
    r = LocalBM25(CITIES, "ctrla")
    # text only: title "Paris" is not searched; no stop words: "is" (in both) scores; no stemming
    # text lengths 6 and 6 tokens; "is": df 2 of 2, average length: w / 2.2 each, a tie -> corpus order
    hits = r.search("is", 5)
    assert [h["id"] for h in hits] == ["0", "1"] and hits[0]["score"] == hits[1]["score"]
    assert hits[0]["score"] == pytest.approx(math.log(1 + 0.5 / 2.5) * (1 / 2.2), rel=1e-6)
    assert r.search("capitals", 5) == []              # no stemming
    assert [h["id"] for h in r.search("lyon", 5)] == ["1"]


def test_load_retriever_passes_the_preset():
    args = SimpleNamespace(corpus="contexts")
    recs = [{"contexts": CITIES}]
    assert common.load_retriever(args, recs, preset="ctrla").preset is retrieval.PRESETS["ctrla"]
    assert common.load_retriever(SimpleNamespace(corpus="demo"), [], "seakr").preset is retrieval.PRESETS["seakr"]
    with pytest.raises(InputError, match="unknown retrieval preset 'bm42'; use one of seakr, ctrla"):
        common.open_retriever(CITIES, "bm42")


# --- on-disk index ---------------------------------------------------------------------------------

def _corpus(tmp_path, n=40):
    words = "river city capital france germany music film war king queen paris berlin team game".split()
    rng = np.random.default_rng(0)
    ps = [{"id": f"p{i}", "title": " ".join(rng.choice(words, 2)),
           "text": " ".join(rng.choice(words, int(rng.integers(3, 60))))} for i in range(n)]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in ps))
    return ps, path


QUERIES = ["capital of France", "river king", "the war film music", "paris paris team", "queens games"]


def test_index_equals_memory_and_candidates_grow(tmp_path):
    ps, path = _corpus(tmp_path)
    build_index(path, tmp_path / "idx", progress=False, commit_every=7)
    for preset in ("seakr", "ctrla"):
        local, disk = LocalBM25(ps, preset), common.open_retriever(str(tmp_path / "idx"), preset)
        rounds, real = [], disk._candidates
        disk._candidates = lambda t, m: rounds.append(m) or real(t, m)
        for q in QUERIES:
            a, b = local.search(q, 5), disk.search(q, 5)
            assert [h["id"] for h in a] == [h["id"] for h in b], (preset, q)
            assert [h["score"] for h in a] == pytest.approx([h["score"] for h in b], rel=1e-6)
            assert all(h["text"] == next(p["text"] for p in ps if p["id"] == h["id"]) for h in b)
        assert min(rounds) == 5  # k first (then doubled only when tantivy's order is not Lucene's)
        # stemmed on seakr, so "queens games" matches there only
        assert (disk.search("queens games", 5) != []) == (preset == "seakr")

        # Where tantivy's order is not Lucene's, M doubles until nothing left out can beat the k-th. Here
        # tantivy ranks by its score raised by 0 to 49% per passage (still an upper bound on what Lucene
        # gives, as the threshold needs), so its first 5 are not the true top 5: stopping there, or
        # growing M otherwise than by doubling, shows.
        def raised(t, m):
            hits = [(score * (1 + (addr.doc * 7919 % 50) / 100), addr) for score, addr in real(t, 10_000)]
            return sorted(hits, key=lambda h: -h[0])[:m]
        rounds.clear()
        disk._candidates = lambda t, m: rounds.append(m) or raised(t, m)
        for q in QUERIES:
            assert [h["id"] for h in disk.search(q, 5)] == [h["id"] for h in local.search(q, 5)], (preset, q)
        assert max(rounds) > 5 and all(m in (5, 10, 20, 40, 80) for m in rounds), rounds
        # and the first round alone would have been wrong for some query (so the doubling mattered)
        ident = lambda addr: json.loads(bytes(disk.searcher.doc(addr)["src"][0]).decode())["id"]
        assert any({h["id"] for h in local.search(q, 5)} != {ident(a) for _, a in raised(
            retrieval.analyze(q, disk.preset.analyzer), 5)} for q in QUERIES)


def test_index_ties_go_by_corpus_order_across_segments(tmp_path):
    # every third of 3,000 passages holds "paris" once, all of them 31 tokens long: their scores tie
    # exactly, and Lucene (and LocalBM25) return the first ones in corpus order. Committed every 50
    # passages, tantivy's segments merge and its document order is no longer corpus order: stopping
    # once the k-th score merely reached the bound returned p102, p105, ... instead of p0, p3, ...
    rng = np.random.default_rng(0)
    ps = [{"id": f"p{i}", "title": f"t{i}", "text": ("paris " if i % 3 == 0 else "w ")
           + " ".join(f"w{int(x)}" for x in rng.integers(0, 1000, 30))} for i in range(3000)]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in ps))
    build_index(path, tmp_path / "idx", progress=False, commit_every=50)
    for preset in ("seakr", "ctrla"):
        disk = common.open_retriever(str(tmp_path / "idx"), preset)
        want = [h["id"] for h in LocalBM25(ps, preset).search("paris", 5)]
        assert want == ["p0", "p3", "p6", "p9", "p12"] and [h["id"] for h in disk.search("paris", 5)] == want


def test_index_build_resumes_after_interruption(tmp_path, monkeypatch):
    ps, path = _corpus(tmp_path, 30)
    real = retrieval.iter_passages

    def dies_after_10(p):
        for i, x in enumerate(real(p)):
            if i == 10:
                raise KeyboardInterrupt
            yield x
    monkeypatch.setattr(retrieval, "iter_passages", dies_after_10)
    monkeypatch.setattr(retrieval, "BATCH", 3)  # 9 passages reach the writer, 8 are committed
    with pytest.raises(KeyboardInterrupt):
        build_index(path, tmp_path / "idx", progress=False, commit_every=4)
    with pytest.raises(InputError, match="the build did not finish; run the same"):
        IndexBM25(tmp_path / "idx")
    assert retrieval._read_meta(tmp_path / "idx")["done"]["passages"] == 8
    monkeypatch.setattr(retrieval, "iter_passages", real)
    meta = build_index(path, tmp_path / "idx", progress=False, commit_every=4)
    assert meta["done"]["passages"] == 30 and meta["complete"]
    disk = IndexBM25(tmp_path / "idx")
    assert disk.searcher.num_docs == 30  # the 8 committed ones were not indexed twice
    local = LocalBM25(ps)
    assert [h["id"] for h in disk.search("river king", 10)] == [h["id"] for h in local.search("river king", 10)]


# --- Elasticsearch over HTTP --------------------------------------------------------------------------

class _FakeES:
    """A real HTTP server on 127.0.0.1 that checks requests against the official bodies and answers
    from the in-memory backend."""

    def __init__(self, passages, preset, fields, fail_first=0, auth=None, fail_code=503):
        self.local, self.preset, self.seen = LocalBM25(passages, preset), preset, []
        self.fail_left, outer = fail_first, self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if auth and self.headers.get("Authorization") != auth:
                    return self._send(401, {"error": "auth"})
                if urlparse(self.path).path != "/wiki/_mapping":
                    return self._send(404, {"error": {"type": "index_not_found_exception"}})
                self._send(200, {"wiki": {"mappings": {"properties": {
                    f: {"type": "text", **({"analyzer": "english"} if preset == "seakr" else {})}
                    for f in fields}}}})

            def do_POST(self):
                if outer.fail_left:
                    outer.fail_left -= 1
                    return self._send(fail_code, {"error": "busy"})
                u = urlparse(self.path)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((u.path, parse_qs(u.query), body))
                q = body["query"]
                text = (q["multi_match"]["query"] if "multi_match" in q else q["match"]["text"]["query"])
                hits = outer.local.search(text, body["size"])
                shown = "txt" if outer.preset == "seakr" else "text"
                self._send(200, {"hits": {"hits": [
                    {"_id": h["id"], "_score": h["score"], "_source": {"title": h["title"], shown: h["text"]}}
                    for h in hits]}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("preset,fields", [("seakr", ["title", "txt"]), ("ctrla", ["title", "text"])])
def test_elasticsearch_sends_the_official_query_and_matches_local(preset, fields, monkeypatch, capsys):
    monkeypatch.setenv("ES_USERNAME", "elastic")
    monkeypatch.setenv("ES_PASSWORD", "pw")
    monkeypatch.delenv("ES_API_KEY", raising=False)
    es = _FakeES(CITIES, preset, fields, fail_first=1, auth="Basic ZWxhc3RpYzpwdw==")
    try:
        r = common.open_retriever(f"es://127.0.0.1:{es.port}/wiki", preset)
        r.retries = 2
        assert "warning" not in capsys.readouterr().err  # the official analyzers
        got = r.search("capital of France", 3)
        assert got == LocalBM25(CITIES, preset).search("capital of France", 3)
        path, query, body = es.seen[-1]
        assert path == "/wiki/_search"
        if preset == "seakr":
            assert query == {"search_type": ["dfs_query_then_fetch"]}
            assert body == {"_source": True, "size": 3, "query": {"multi_match": {
                "query": "capital of France", "type": "best_fields", "fields": ["title", "txt"],
                "tie_breaker": 0.5}}}
        else:
            assert query == {} and body == {"query": {"match": {"text": {"query": "capital of France"}}},
                                            "size": 3}
    finally:
        es.close()


def test_elasticsearch_errors_are_one_line():
    es = _FakeES(CITIES, "seakr", ["title", "body"])
    try:
        with pytest.raises(InputError, match=r"lacks text field\(s\) \['txt'\] that preset 'seakr' queries"):
            ElasticRetriever(f"es://127.0.0.1:{es.port}/wiki", "seakr")
        with pytest.raises(InputError, match="no index 'nowiki' on http://127.0.0.1:.*fix the index name"):
            ElasticRetriever(f"es://127.0.0.1:{es.port}/nowiki", "seakr")
    finally:
        es.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(InputError, match=f"cannot reach Elasticsearch at http://127.0.0.1:{port} .*start it"):
        ElasticRetriever(f"es://127.0.0.1:{port}/wiki", "seakr", timeout=2, retries=1)
    with pytest.raises(InputError, match="expected es://HOST:PORT/INDEX"):
        ElasticRetriever("es://127.0.0.1:9200", "seakr")


def test_elasticsearch_down_mid_run_stops_the_run_with_its_rows_and_the_rerun_resumes(tmp_path, monkeypatch):
    """A busy Elasticsearch (429 Too Many Requests, 408) is retried as a 5xx is; one that stops answering
    stops the run there, every finished row kept, where each later question became a failed row ("") that
    no resume retries; the same command, once it answers again, goes on."""
    es = _FakeES(CITIES, "seakr", ["title", "txt"], fail_first=2, fail_code=429)
    r = common.open_retriever(f"es://127.0.0.1:{es.port}/wiki", "seakr")
    r.retries = 2
    assert r.search("capital of France", 1) == LocalBM25(CITIES, "seakr").search("capital of France", 1)
    r.retries = 0
    p = common.argparse.ArgumentParser()
    common.add_common_args(p)
    args = p.parse_args(["--dataset", "nq", "--limit", "3", "--output", str(tmp_path / "out.jsonl")])
    asked = []

    def solve(rec):
        if len(asked) == 1:
            es.close()                                  # Elasticsearch goes down after the first question
        asked.append(rec["id"])
        return {"prediction": str(len(r.search(rec["question"], 1)))}
    with pytest.raises(retrieval.Unavailable, match="cannot reach Elasticsearch at .*start it \\(then the same "
                                                    "command resumes\\)"):
        common.run(args, "fake", solve)
    rows = common.metrics.read_rows(tmp_path / "out.jsonl")
    assert [row["id"] for row in rows] == asked[:1] and not any("error" in row for row in rows)
    es = _FakeES(CITIES, "seakr", ["title", "txt"])
    r = common.open_retriever(f"es://127.0.0.1:{es.port}/wiki", "seakr")
    try:
        common.run(args, "fake", lambda rec: {"prediction": str(len(r.search(rec["question"], 1)))})
    finally:
        es.close()
    assert len(common.metrics.read_rows(tmp_path / "out.jsonl")) == 3


# --- bad input -------------------------------------------------------------------------------------

def test_bad_specs_are_one_line_errors(tmp_path):
    with pytest.raises(InputError, match="no such corpus file or index directory; .*retrieval.py build"):
        common.open_retriever(str(tmp_path / "missing_index"))
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(InputError, match="not an index .*build it with `python retrieval.py build CORPUS"):
        common.open_retriever(str(tmp_path / "empty_dir"))
    csv = tmp_path / "corpus.csv"
    csv.write_text("id,title,text\n1,A,b\n")
    with pytest.raises(InputError, match="unrecognised corpus format .*expected DPR psgs_w100.tsv"):
        common.open_retriever(str(csv))
    null_title = tmp_path / "null.jsonl"      # it failed inside the analyzer: 'NoneType' has no isascii
    null_title.write_text('{"id": "1", "title": "A", "text": "b"}\n{"id": "2", "title": null, "text": "c"}\n')
    with pytest.raises(InputError, match=r"null.jsonl:2: a passage's title and text must be strings \(title NoneType"):
        common.open_retriever(str(null_title)).search("b", 1)
    _, path = _corpus(tmp_path, 5)
    build_index(path, tmp_path / "idx", presets=["seakr"], progress=False)
    with pytest.raises(InputError, match=r"has no fields for preset 'ctrla' .*rebuild it with --presets seakr,ctrla"):
        common.open_retriever(str(tmp_path / "idx"), "ctrla")


def test_build_command_line(tmp_path, capsys):
    ps, path = _corpus(tmp_path, 12)
    retrieval.main(["build", str(path), str(tmp_path / "idx"), "--presets", "ctrla"])
    assert "12 passages indexed" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:                  # one line on stderr, exit code 2
        retrieval.main(["build", str(tmp_path / "nope.tsv"), str(tmp_path / "idx2")])
    err = capsys.readouterr().err
    line = err.split("\r")[-1]                  # after the progress bar, if it started
    assert e.value.code == 2 and line.startswith("error: ") and "no such corpus file" in line and line.count("\n") == 1
    # search takes the corpus as its first argument: the error must not tell the user to pass --corpus
    with pytest.raises(SystemExit) as e:
        retrieval.main(["search", str(tmp_path / "nope.jsonl"), "Paris"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "no such corpus file" in err and "pass --corpus" not in err
    # `demo` is the demo corpus, as the methods' --corpus demo
    retrieval.main(["search", "demo", "Eiffel Tower", "-k", "1"])
    hit = capsys.readouterr().out.split("\t")
    assert len(hit) == 4 and float(hit[0]) > 0


# --- parity with real Lucene (java + liblucene8-java only) ----------------------------------------------

@pytest.mark.slow
def test_parity_with_lucene_on_the_dpr_sample():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import bench_retrieval as b
    if b.lucene_jars() is None or not (b.RAW / "dpr_wiki/sample_data.jsonl").exists():
        pytest.skip("needs java, liblucene8-java and the DPR sample")
    res = b.parity(SimpleNamespace(corpus=str(b.RAW / "dpr_wiki/sample_data.jsonl"), out=None, show_diffs=False))
    # measured: the same top 10 in the same order for all 300 queries, scores within float rounding
    for key in ("seakr in memory", "seakr index", "ctrla in memory", "ctrla index"):
        assert res[key]["top10"] == res[key]["n"] == 300, (key, res[key])
        assert res[key]["max_rel_score_diff"] < 1e-5, (key, res[key])
    assert res["analyzer: passages tokenised as Lucene (english, standard)"] == [1000, 1000]


def test_index_built_by_worker_processes_is_the_same(tmp_path):
    ps, path = _corpus(tmp_path, 25)
    build_index(path, tmp_path / "one", progress=False)
    build_index(path, tmp_path / "two", progress=False, workers=2)
    one, two = IndexBM25(tmp_path / "one"), IndexBM25(tmp_path / "two")
    for q in QUERIES:
        assert one.search(q, 8) == two.search(q, 8)
    assert retrieval._read_meta(tmp_path / "one")["done"] == retrieval._read_meta(tmp_path / "two")["done"]
