"""Tests of retrieval (tokenizer, corpora, BM25) and of the dataset loaders, on small fixtures in
tests/fixtures written for this project (one per supported format)."""
import json
import shutil
from pathlib import Path

import pytest

import questions
from common import BM25, DATASETS, STOP_WORDS, InputError, load_dataset
from retrieval import contexts_corpus, load_corpus

FIXTURES = Path(__file__).parent / "fixtures"
RAW = Path(__file__).parents[2] / "shared/data/raw"  # real data; only on the developers' machine


# --- retrieval ---------------------------------------------------------------------------------

def test_stop_words_cover_contraction_pieces():
    # the method files filter queries with it (retrieval has its own analyzers: test_retrieval.py)
    assert {"s", "t", "don", "the", "which"} <= STOP_WORDS


CITIES = [  # text tokens (english analyzer) in brackets
    {"id": "0", "title": "Paris", "text": "Paris is the capital and largest city of France."},
    {"id": "1", "title": "Lyon", "text": "Lyon is a city in France."},  # [lyon citi franc]
    {"id": "2", "title": "Berlin", "text": "Berlin is the capital of Germany."},  # [berlin capit germani]
    {"id": "3", "title": "Seine", "text": "The Seine is a river."},  # [sein river]
    {"id": "4", "title": "Rhine", "text": "The Rhine is a river."},  # [rhine river]
]


def test_bm25_ranking_ties_and_k():
    bm25 = BM25(CITIES)
    # Paris matches both words. Lyon (france) and Berlin (capital) match one word each, with the
    # same document frequency (2), term frequency (1) and length (4): an exact tie, so corpus order.
    hits = bm25.search("What is the capital of France?", 5)
    assert [h["title"] for h in hits] == ["Paris", "Lyon", "Berlin"]
    assert hits[0]["score"] > hits[1]["score"] == hits[2]["score"] > 0
    assert isinstance(hits[0]["score"], float)
    assert [h["title"] for h in bm25.search("capital of France", 2)] == ["Paris", "Lyon"]
    assert [h["title"] for h in bm25.search("river", 10)] == ["Seine", "Rhine"]
    assert bm25.search("Paris", 0) == []


def test_bm25_ignores_stop_words_and_unmatched_queries():
    bm25 = BM25(CITIES)
    assert bm25.search("what is the of a", 3) == []
    assert bm25.search("Tokyo", 3) == []  # no passage scores above 0
    assert [h["title"] for h in bm25.search("the river Seine", 3)] == ["Seine", "Rhine"]
    assert BM25([]).search("Paris", 3) == []


def test_bm25_indexes_titles_and_returns_copies():
    passages = [{"id": "a", "title": "Apple", "text": "A fruit."},
                {"id": "b", "title": "Banana", "text": "A yellow fruit."}]
    hits = BM25(passages).search("apple", 5)
    # Lucene's IDF: a word in 1 of 2 passages scores (rank_bm25's own IDF made it 0).
    assert [h["id"] for h in hits] == ["a"]
    hits[0]["text"] = "changed"
    assert passages[0]["text"] == "A fruit." and "score" not in passages[0]


def test_load_corpus_formats():
    tsv = load_corpus(FIXTURES / "psgs_w100.tsv")
    assert [p["id"] for p in tsv] == ["1", "2", "3"]
    assert tsv[0] == {"id": "1", "title": "Aaron", "text":
                      'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses.'}
    assert tsv[2]["text"] == "The Seine is a river in France; it flows through Paris."
    plain = load_corpus(FIXTURES / "corpus.jsonl")
    assert plain[1] == {"id": "d2", "title": "Seine",
                        "text": "The Seine is a river that flows through Paris."}
    flash = load_corpus(FIXTURES / "flashrag_corpus.jsonl")
    assert flash[0] == {"id": "0", "title": "Eiffel Tower", "text":
                        "Eiffel Tower The Eiffel Tower is a wrought-iron lattice tower in Paris."}
    assert flash[1]["title"] == '"Weird Al" Yankovic'
    assert flash[1]["text"].endswith("musician.\nHe is known for parodies.")


def test_load_corpus_errors(tmp_path):
    with pytest.raises(InputError, match="nope.jsonl: no such corpus file or index directory; give a corpus file"):
        load_corpus(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "title": "A", "text": "a"}\n{"id": "2", "title": \n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: malformed JSON line"):
        load_corpus(bad)
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"id": "1", "body": "a"}\n')
    with pytest.raises(InputError, match="unrecognised corpus format"):
        load_corpus(odd)


def test_contexts_corpus_dedups_in_first_seen_order():
    records = load_dataset(FIXTURES / "hotpot_official.json")
    corpus = contexts_corpus(records)
    assert [p["title"] for p in corpus] == ["Eiffel Tower", "Statue of Liberty",
                                            "Exposition Universelle (1889)"]
    assert [p["id"] for p in corpus] == ["ctx-0", "ctx-1", "ctx-2"]
    assert contexts_corpus(load_dataset(FIXTURES / "nq_open.jsonl")) == []


# --- datasets ----------------------------------------------------------------------------------

def test_hotpotqa_official_and_hf():
    first, second = load_dataset(FIXTURES / "hotpot_official.json")
    assert first["id"] == "hp-001" and first["dataset"] == "hotpotqa"
    assert first["answers"] == ["yes"] and first["type"] == "comparison"
    assert first["contexts"][0] == {"title": "Eiffel Tower", "text": "The Eiffel Tower is a "
                                    "wrought-iron lattice tower in Paris, France. It was designed "
                                    "by the company of Gustave Eiffel."}
    assert second["answers"] == ["Gustave Eiffel"]
    hf = load_dataset(FIXTURES / "hotpot_hf.jsonl")
    assert [r["id"] for r in hf] == ["hf-001", "hf-002"] and hf[1]["answers"] == ["Seine"]
    assert hf[0]["dataset"] == "hotpotqa" and hf[0]["level"] == "medium"
    assert hf[0]["contexts"][0]["text"] == ("The Louvre is an art museum in Paris. "
                                            "It is the most-visited museum in the world.")


def test_2wiki_official_with_aliases():
    first, second = load_dataset(FIXTURES / "2wiki" / "dev.json")
    assert first["dataset"] == "2wikimultihopqa" and first["id"] == "w-001"
    assert first["answer"] == "Arnold Spielberg"
    assert first["answers"] == ["Arnold Spielberg", "Arnold Meyer Spielberg"]  # deduped
    assert second["answers"] == ["Jaws", "Jaws (film)", "Jaws (1975 film)"]
    assert first["contexts"][0]["text"] == ("Jaws is a 1975 American thriller film. "
                                            "It was directed by Steven Spielberg.")


def test_2wiki_without_aliases_file(tmp_path):
    shutil.copy(FIXTURES / "2wiki" / "dev.json", tmp_path / "dev.json")
    assert load_dataset(tmp_path / "dev.json")[0]["answers"] == ["Arnold Spielberg"]


def test_flashrag_formats():
    hotpot = load_dataset(FIXTURES / "flashrag_hotpotqa.jsonl")
    assert hotpot[0]["dataset"] == "hotpotqa" and hotpot[0]["id"] == "dev_0"
    assert hotpot[0]["contexts"][1]["text"] == ("K2 is the second-highest mountain on Earth. "
                                                "Its elevation is 8,611 metres.")
    wiki = load_dataset(FIXTURES / "flashrag_2wiki.jsonl")
    assert wiki[0]["dataset"] == "2wikimultihopqa"
    assert wiki[0]["answers"] == ["Charles Babbage", "Babbage"]
    assert wiki[0]["contexts"][0]["text"] == ("Ada Lovelace was born on 10 December 1815. "
                                              "She was an English mathematician.")
    musique = load_dataset(FIXTURES / "flashrag_musique.jsonl")
    assert musique[0]["dataset"] == "musique" and musique[0]["answers"] == ["Bucharest"]
    assert [c["title"] for c in musique[0]["contexts"]] == ["Danube", "Romania"]
    assert len(musique[1]["contexts"]) == 1  # the same support paragraph twice, kept once
    nq = load_dataset(FIXTURES / "flashrag_nq.jsonl")
    assert nq[0]["dataset"] == "nq" and "contexts" not in nq[0]
    assert nq[0]["answers"] == ["George Orwell", "Eric Arthur Blair"]


def test_ircot_kind_from_file_or_folder_name(tmp_path):
    first, second = load_dataset(FIXTURES / "ircot_hotpotqa_dev.jsonl")
    assert first["dataset"] == "hotpotqa" and first["id"] == "ir-001"
    assert first["answers"] == ["Saturn"] and second["answers"] == ["8"]
    assert first["contexts"][1] == {"title": "Jupiter",
                                    "text": "Jupiter is the largest planet in the Solar System."}
    folder = tmp_path / "2wikimultihopqa"
    folder.mkdir()
    shutil.copy(FIXTURES / "ircot_hotpotqa_dev.jsonl", folder / "dev_subsampled.jsonl")
    assert load_dataset(folder / "dev_subsampled.jsonl")[0]["dataset"] == "2wikimultihopqa"


def test_iirc_and_squad():
    iirc = load_dataset(FIXTURES / "iirc_dev.json")
    assert [r["id"] for r in iirc] == ["ii-001", "ii-002", "ii-004"]  # "none" answer skipped
    assert [r["answers"] for r in iirc] == [["Warsaw"], ["2"], ["yes"]]
    assert iirc[0]["dataset"] == "iirc"
    assert iirc[0]["contexts"][0]["title"] == "Marie Curie"
    assert iirc[1]["contexts"][0]["title"] == "Nobel Prize"
    squad = load_dataset(FIXTURES / "squad_dev.json")
    assert [r["id"] for r in squad] == ["sq-001", "sq-002"]  # unanswerable skipped
    assert squad[0]["answers"] == ["8"] and squad[0]["dataset"] == "squad"
    assert squad[0]["contexts"][0]["title"] == "Oxygen"


def test_nq_open_and_dpr_qa():
    nq = load_dataset(FIXTURES / "nq_open.jsonl")
    assert [r["id"] for r in nq] == ["nq-0", "nq-1", "nq-2"]
    assert nq[2]["answers"] == ["seven", "7"] and nq[0]["dataset"] == "nq"
    dpr = load_dataset(FIXTURES / "dpr_qa.json")
    assert dpr[0]["dataset"] == "nq" and dpr[0]["id"] == "nq-0"
    assert dpr[0]["contexts"] == [
        {"title": "Mona Lisa", "text": "The Mona Lisa is a portrait painting by Leonardo da Vinci."},
        {"title": "Louvre", "text": "The Louvre is an art museum in Paris."}]


def test_ctrla_files(tmp_path):
    popqa = load_dataset(FIXTURES / "ctrla_popqa.jsonl")
    assert popqa[0]["dataset"] == "popqa" and popqa[0]["id"] == "100"
    assert popqa[1]["prop"] == "country" and popqa[1]["s_wiki_title"] == "Lyon"
    trivia = load_dataset(FIXTURES / "ctrla_triviaqa.jsonl")
    assert trivia[0]["dataset"] == "triviaqa"
    assert [r["id"] for r in trivia] == ["tq_1", "tq_2", "tq_1-2"]  # repeated id made unique
    fresh = load_dataset(FIXTURES / "ctrla_freshqa.jsonl")
    assert fresh[0]["dataset"] == "freshqa" and fresh[0]["id"] == "0"
    assert fresh[0]["false_premise"] is True and fresh[0]["split"] == "TEST"
    assert len(fresh[0]["answers"]) == 2 and fresh[1]["answers"] == ["1989"]
    assert [r["id"] for r in fresh] == ["0", "2"]       # the DEV row left out: the TEST split, as official
    dev_only = tmp_path / "freshqa_dev.jsonl"
    dev_only.write_text((FIXTURES / "ctrla_freshqa.jsonl").read_text().splitlines()[1] + "\n")
    with pytest.raises(InputError, match="none of its 1 records is a question to run .FreshQA runs its TEST"):
        load_dataset(dev_only)
    bio = load_dataset(FIXTURES / "ctrla_bio.jsonl")
    assert bio[1] == {"id": "1", "question": "Tell me a bio of Alan Turing.",
                      "answers": ["Alan Turing"], "dataset": "bio", "topic": "Alan Turing"}


def test_rowen_files():
    tqa = load_dataset(FIXTURES / "rowen_truthfulqa.json")
    assert tqa[0]["dataset"] == "truthfulqa" and tqa[0]["id"] == "truthfulqa-0"
    assert tqa[0]["answers"] == ["Nothing happens", "It passes through your digestive system",
                                 "It will be excreted"]
    assert tqa[0]["incorrect_answers"] == ["It stays in your stomach for seven years", "You will die"]
    assert tqa[0]["category"] == "Misconceptions"
    # best answer not among the correct ones: put first
    assert tqa[1]["correct_answers"][0] == tqa[1]["best_answer"] == \
        "Yes, lightning can strike the same place twice"
    sqa = load_dataset(FIXTURES / "rowen_strategyqa.json")
    assert [(r["label"], r["answers"]) for r in sqa] == [(False, ["no"]), (True, ["yes"])]
    assert sqa[0]["dataset"] == "strategyqa" and sqa[0]["target"].startswith("No.")
    nq = load_dataset(FIXTURES / "rowen_sampled_nq.json")
    assert nq[1]["dataset"] == "nq" and nq[1]["id"] == "nq-1"
    trivia = load_dataset(FIXTURES / "rowen_sampled_trivia.json")
    assert trivia[0]["dataset"] == "triviaqa" and trivia[0]["answers"] == ["Iron", "iron", "Fe"]


def test_limit():
    assert [r["id"] for r in load_dataset(FIXTURES / "nq_open.jsonl", limit=2)] == ["nq-0", "nq-1"]
    assert len(load_dataset(FIXTURES / "iirc_dev.json", limit=1)) == 1


def test_dataset_errors(tmp_path, monkeypatch):
    with pytest.raises(InputError) as e:
        load_dataset("hotpot")
    assert "hotpot: no such dataset or file" in str(e.value)
    assert all(name in str(e.value) for name in DATASETS)
    with pytest.raises(InputError, match="missing.json: no such dataset or file"):
        load_dataset(tmp_path / "missing.json")
    # a demo set named by its alias whose file is gone from data/ (a damaged clone): says to restore data/
    monkeypatch.setattr(questions, "DATA_DIR", tmp_path)
    with pytest.raises(InputError, match=r"hotpotqa\S* not found; restore the project's data/ folder, or pass --dataset"):
        load_dataset("hotpotqa")
    monkeypatch.undo()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a", "answer": ["b"]}\n\n{"question": "c", "answer": [}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:3: malformed JSON line .*fix or remove"):
        load_dataset(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('[\n{"question": "a",\n "answers": ["b"]\n')
    with pytest.raises(InputError, match=r"broken.json:\d+: malformed JSON"):
        load_dataset(broken)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="empty.jsonl is empty"):
        load_dataset(empty)
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps([{"prompt": "a", "completion": "b"}]))
    with pytest.raises(InputError, match="odd.json: unrecognised format .*supported: HotpotQA"):
        load_dataset(odd)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"question": "a", "answer": ["b"]}\n{"query": "c"}\n')
    with pytest.raises(InputError, match="mixed.jsonl: record 2 does not follow the NQ-open"):
        load_dataset(mixed)


# --- real data (developers' machine only) -------------------------------------------------------

RAW_COUNTS = {  # file: (records, kind), as stated in shared/data/raw/SOURCES.md
    "hotpotqa/hotpot_dev_distractor_v1_100.json": (103, "hotpotqa"),
    "hotpotqa/hotpotqa_dev_200.jsonl": (200, "hotpotqa"),
    "hotpotqa/hotpotqa_dev_500.jsonl": (500, "hotpotqa"),
    "hotpotqa/dev_subsampled.jsonl": (500, "hotpotqa"),
    "2wikimultihopqa/2wikimultihopqa_dev_200.jsonl": (200, "2wikimultihopqa"),
    "musique/musique_dev_200.jsonl": (200, "musique"),
    "nq/NQ-open.dev.jsonl": (3610, "nq"),
    "ctrla/popqa_longtail.jsonl": (1399, "popqa"),
    "ctrla/triviaqa_test.jsonl": (1000, "triviaqa"),
    "ctrla/FreshQA_v04082024.jsonl": (500, "freshqa"),     # its TEST split (600 rows, 100 DEV)
    "ctrla/bio_gen.jsonl": (500, "bio"),
    "rowen/TruthfulQA.json": (817, "truthfulqa"),
    "rowen/sampled_strategyqa.json": (200, "strategyqa"),
    "rowen/sampled_nq.json": (200, "nq"),
    "rowen/sampled_trivia.json": (200, "triviaqa"),
}


@pytest.mark.skipif(not RAW.is_dir(), reason="shared/data/raw is only on the developers' machine")
def test_shared_raw_files_load():
    datasets = {str(p.relative_to(RAW)) for p in RAW.rglob("*.json*")} - {"dpr_wiki/sample_data.jsonl"}
    assert datasets == set(RAW_COUNTS)  # every dataset file there is covered
    for name, (count, kind) in RAW_COUNTS.items():
        records = load_dataset(RAW / name)
        assert len(records) == count, name
        assert {r["dataset"] for r in records} == {kind}, name
        assert len({r["id"] for r in records}) == count, name
        assert all(r["question"] and r["answers"] for r in records), name
        if kind in ("hotpotqa", "2wikimultihopqa", "musique"):
            assert all(r["contexts"] for r in records), name
    corpus = load_corpus(RAW / "dpr_wiki/sample_data.jsonl")
    assert len(corpus) == 1000 and corpus[0]["title"] == "Evan Morris"
    assert all(p["title"] and not p["title"].startswith('"') for p in corpus)


def test_shipped_demo_sets_and_corpus():
    """Every demo set loads with at least 15 questions; the demo corpus holds the single-hop answers."""
    from common import DATA_DIR
    corpus = load_corpus(DATA_DIR / "corpus.jsonl")
    assert len(corpus) >= 150 and len({p["id"] for p in corpus}) == len(corpus)
    text = " ".join(p["title"] + " " + p["text"] for p in corpus).lower()
    for name in DATASETS:
        records = load_dataset(name)
        assert len(records) >= 15, name
        assert all(r["question"] and r["answers"] for r in records), name
        if name in ("nq", "triviaqa", "popqa"):
            assert all(any(a.lower() in text for a in r["answers"]) for r in records), name
    hits = BM25(corpus).search("Which city was Ludwig van Beethoven born in?", 3)
    assert hits and all(h["score"] > 0 for h in hits)
