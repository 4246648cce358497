"""Tests of retrieval (tokenizer, corpora, BM25) and of the dataset loaders, on small fixtures in
tests/fixtures written for this project (one per supported format); and of `make data` (questions.fetch)
against a loopback HTTP server on 127.0.0.1, nothing fetched from elsewhere."""
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest

import questions
from common import BM25, DATASETS, STOP_WORDS, InputError, load_dataset
from retrieval import contexts_corpus, load_corpus

ROOT = Path(__file__).resolve().parents[1]
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


def test_strategyqa_labels_written_as_text_read_as_booleans(tmp_path):
    """A StrategyQA file (its first answer a boolean) whose later answer says "false" reads no (Python's truth
    would read any non-empty text as yes); anything but true or false is a one-line error naming the record."""
    path = tmp_path / "sqa.json"
    rows = [{"question": f"Q{i}?", "answer": a} for i, a in enumerate([False, "false", " True", "no", 1, 0])]
    path.write_text(json.dumps(rows))
    assert [(r["label"], r["answers"]) for r in load_dataset(path)] == [
        (False, ["no"]), (False, ["no"]), (True, ["yes"]), (False, ["no"]), (True, ["yes"]), (False, ["no"])]
    path.write_text(json.dumps(rows + [{"question": "Q?", "answer": "maybe"}]))
    with pytest.raises(InputError, match="record 7 does not follow .*its answer 'maybe' is neither true nor false"):
        load_dataset(path)


def test_a_strategyqa_file_whose_first_answer_is_text_is_recognised(tmp_path):
    """A hand-written StrategyQA file may say "false" from its first record on: it reads as StrategyQA, its
    labels as booleans (before, only a boolean first answer was recognised: the file was refused)."""
    path = tmp_path / "sqa.json"
    path.write_text(json.dumps([{"question": "Q0?", "answer": "false"}, {"question": "Q1?", "answer": True}]))
    assert [(r["dataset"], r["label"], r["answers"]) for r in load_dataset(path)] == [
        ("strategyqa", False, ["no"]), ("strategyqa", True, ["yes"])]


def test_questions_without_a_gold_answer_are_counted_in_a_warning(tmp_path, capsys):
    """A question with no gold answer (every one of its answers empty) is scored wrong by every metric: said
    once, with the count; a bio file (FActScore prompts: no gold text to match) says nothing."""
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"Q{i}?", "answers": a})
                              for i, a in enumerate([["Paris"], [], [" ", None], ["x"]])))
    assert [r["answers"] for r in load_dataset(path)] == [["Paris"], [], [], ["x"]]
    assert capsys.readouterr().err == (f"warning: {path}: 2 of 4 questions have no gold answer; every metric "
                                       "scores them wrong\n")
    load_dataset(path, limit=1)
    assert capsys.readouterr().err == ""
    bio = tmp_path / "bio.jsonl"
    bio.write_text(json.dumps({"question": "Tell me a bio of A.", "answers": [], "input": "A", "topic": "A"}))
    assert load_dataset(bio)[0]["dataset"] == "bio" and capsys.readouterr().err == ""


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
    # two passages with one id: SeaKR, which reads only hits it has not read, would never read the second
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"id": "7", "title": "A", "text": "a"}\n{"id": "8", "title": "B", "text": "b"}\n'
                     '{"id": "7", "title": "C", "text": "c"}\n')
    with pytest.raises(InputError, match="twice.jsonl: passage id 7 occurs twice; give every passage its own id"):
        load_corpus(twice)
    (tmp_path / "empty-id.tsv").write_text("id\ttext\ttitle\n\ta\tA\n\tb\tB\n")
    with pytest.raises(InputError, match="passage id  occurs twice"):
        load_corpus(tmp_path / "empty-id.tsv")


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


def test_2wiki_with_a_context_of_title_and_sentence_lists(tmp_path):
    """A 2WikiMultihopQA record whose context is {title: [...], sentences: [...]} (HF's HotpotQA layout) reads
    the same paragraphs; its keys were read as two one-character titles."""
    rows = json.loads((FIXTURES / "2wiki" / "dev.json").read_text())
    for r in rows:
        r["context"] = {"title": [c[0] for c in r["context"]], "sentences": [c[1] for c in r["context"]]}
    (tmp_path / "dev.json").write_text(json.dumps(rows))
    assert [r["contexts"] for r in load_dataset(tmp_path / "dev.json")] == \
        [r["contexts"] for r in load_dataset(FIXTURES / "2wiki" / "dev.json")]


def test_answers_that_are_not_a_list_of_texts(tmp_path):
    """HF SQuAD's answers {text: [...], answer_start: [...]} read their texts (its keys were the gold answers);
    a nested list is a one-line error naming the record."""
    path = tmp_path / "squad_hf.jsonl"
    path.write_text(json.dumps({"id": "s1", "question": "Who won?", "answers": {"text": ["Denver Broncos",
                                "Denver Broncos"], "answer_start": [177, 177]}}) + "\n")
    assert load_dataset(path)[0]["answers"] == ["Denver Broncos"]
    path.write_text(json.dumps({"question": "Q?", "answers": [["a", "b"]]}) + "\n")
    with pytest.raises(InputError, match=r"record 1 does not follow .*its answers \[\['a', 'b'\]\] are not a list"):
        load_dataset(path)


def test_a_question_file_not_in_utf8_is_a_one_line_error(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"question": "Où est Paris ?", "answers": ["France"]}\n'.encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1.jsonl: not UTF-8 text \(invalid start byte at byte 15\); save it as UTF-8$"):
        load_dataset(path)


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
    assert all(r["supporting_only"] for r in musique) and "supporting_only" not in wiki[0]
    nq = load_dataset(FIXTURES / "flashrag_nq.jsonl")
    assert nq[0]["dataset"] == "nq" and "contexts" not in nq[0]
    assert nq[0]["answers"] == ["George Orwell", "Eric Arthur Blair"]



def test_flashrag_hotpotqa_contexts_without_their_gold_paragraphs_are_said(tmp_path, capsys):
    # FlashRAG's hotpotqa_dev_200.jsonl gives most questions contexts without their supporting paragraphs
    import argparse
    import common
    rows = [json.loads(line) for line in (FIXTURES / "flashrag_hotpotqa.jsonl").read_text().splitlines()]
    rows[1]["metadata"]["supporting_facts"]["title"] = ["Broad Peak"]        # not among its contexts
    (tmp_path / "hotpotqa_dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = load_dataset(tmp_path / "hotpotqa_dev.jsonl")
    assert [r["gold_in_contexts"] for r in records] == [True, False]
    common.load_retriever(argparse.Namespace(corpus="contexts"), records)
    assert "the supporting paragraphs of 1 of 2 questions are not among their contexts" in capsys.readouterr().err
    common.load_retriever(argparse.Namespace(corpus="contexts"), load_dataset(FIXTURES / "flashrag_hotpotqa.jsonl"))
    assert capsys.readouterr().err == ""
    common.load_retriever(argparse.Namespace(corpus="contexts"), load_dataset(FIXTURES / "flashrag_musique.jsonl"))
    assert "supporting paragraphs alone" in capsys.readouterr().err        # MuSiQue's pool is all gold

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


def test_ircot_iirc_keeps_its_pinned_main_passage(tmp_path):
    # IRCoT's IIRC rows hold the main passage in "pinned_contexts" only, not in "contexts"
    row = {"question_id": "q1", "question_text": "In which city was the physicist born?",
           "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": ["Warsaw"]}],
           "contexts": [{"idx": 0, "title": "Warsaw", "paragraph_text": "Warsaw is the capital of Poland. ",
                         "is_supporting": True}],
           "pinned_contexts": [{"idx": 0, "title": "Marie Curie", "paragraph_text": "Marie Curie was a physicist.",
                                "is_supporting": True}],
           "valid_titles": ["Warsaw"]}
    path = tmp_path / "iirc" / "dev.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(row) + "\n")
    (record,) = load_dataset(path)
    assert (record["dataset"], record["answers"]) == ("iirc", ["Warsaw"])
    assert record["contexts"] == [{"title": "Marie Curie", "text": "Marie Curie was a physicist."},
                                  {"title": "Warsaw", "text": "Warsaw is the capital of Poland."}]
    assert [p["title"] for p in contexts_corpus([record])] == ["Marie Curie", "Warsaw"]
    row = {**row, "contexts": row["pinned_contexts"] + row["contexts"]}       # pinned in both: read once
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "question_id": "q2", "pinned_contexts": None}) + "\n")
    first, second = load_dataset(path)
    assert first["contexts"] == record["contexts"] and second["contexts"] == record["contexts"]


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


def test_statement_files_and_word_lists(tmp_path):
    """CtrlA's other data files: a statement file keeps its label-1 rows as the official notebooks'
    df[df["label"] == 1] does (pandas reads "1", "1.0" and "True" as 1); a word list is a file's lines in
    order, its # lines (the source) and blank ones left out, read once; each error is one line."""
    assert [questions.label_is_one(v) for v in ("1", "1.0", " True", "true", "0", "0.0", "False", "x", "")] == \
        [True] * 4 + [False] * 5
    facts = tmp_path / "facts.csv"
    facts.write_text('statement,label\nA b.,1\nB c.,0\n"C, d.",1.0\nE f.,True\n')
    assert [r["statement"] for r in questions.read_statements(facts)] == ["A b.", "C, d.", "E f."]
    facts.write_text("statement\nNo label column.\n")         # no label column: every row
    assert [r["statement"] for r in questions.read_statements(facts)] == ["No label column."]
    for i, (text, says) in enumerate([(None, "cannot read statements"), ("text,label\nA.,1\n", "no 'statement' column"),
                                      ("statement,label\n ,1\n", "an empty statement"),
                                      ("statement,label\nA.,0\n", "no statement with label 1")]):
        path = tmp_path / f"bad{i}.csv"
        if text is not None:
            path.write_text(text)
        with pytest.raises(InputError, match=f"bad{i}.csv: .*{says}"):
            questions.read_statements(path)
    words = tmp_path / "words.txt"
    words.write_text("# the source\nnot specified\n\ni don't know\n# ours\nUnknown\n")
    assert questions.word_list(words) == ("not specified", "i don't know", "Unknown")
    words.write_text("changed\n")
    assert questions.word_list(words) == ("not specified", "i don't know", "Unknown")      # read once
    with pytest.raises(InputError, match="nothing.txt: cannot read .*; restore data/"):
        questions.word_list(tmp_path / "nothing.txt")


def test_rowen_files(tmp_path):
    tqa = load_dataset(FIXTURES / "rowen_truthfulqa.json")
    assert tqa[0]["dataset"] == "truthfulqa" and tqa[0]["id"] == "truthfulqa-0"
    assert tqa[0]["answers"] == ["Nothing happens", "It passes through your digestive system",
                                 "It will be excreted"]
    assert tqa[0]["incorrect_answers"] == ["It stays in your stomach for seven years", "You will die"]
    assert tqa[0]["category"] == "Misconceptions"
    # best answer not among the correct ones: put first
    assert tqa[1]["correct_answers"][0] == tqa[1]["best_answer"] == \
        "Yes, lightning can strike the same place twice"
    # an answer followed by ";" with no space (21 of TruthfulQA's 817 questions): "America;" was an answer
    path = tmp_path / "tqa.json"
    path.write_text(json.dumps([{"Question": "Q?", "Best Answer": "America", "Correct Answers": "America; US;",
                                 "Incorrect Answers": "Canada;Mexico", "Category": "c"}]))
    [row] = load_dataset(path)
    assert row["correct_answers"] == ["America", "US"] and row["incorrect_answers"] == ["Canada", "Mexico"]
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


# --- make data: questions.fetch over a loopback server ---------------------------------------------

class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def serving(folder, handler=QuietHandler):
    """An HTTP server on 127.0.0.1 (a free port) serving `folder`; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def fetch_cli(*argv, **env):
    """`python questions.py fetch ...` with only the DATA_FROM / DATA_URL given here."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("DATA_FROM", "DATA_URL")}, **env}
    return subprocess.run([sys.executable, "questions.py", "fetch", *map(str, argv)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def one_error_line(r):
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_raw_files_cover_every_path_the_readmes_and_benchmarks_use():
    """Every data/raw/ file named in a command is one `make data` fetches; none still needs ../shared."""
    docs = [ROOT / "README.md", ROOT / "results/README.md", ROOT / "Makefile",
            *sorted((ROOT / "benchmarks").glob("*.py")), *sorted((ROOT / "benchmarks").glob("*.sh"))]
    named = set()
    for path in docs:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r'\.\./shared|shared/data|"shared" /', text), path
        named |= set(re.findall(r"(?:data/raw|\$R|RAW) ?/ ?\"?([\w.-]+/[\w.-]+\.(?:jsonl|json|csv))", text))
    assert {"hotpotqa/hotpot_dev_distractor_v1_100.json", "nq/NQ-open.dev.jsonl", "rowen/TruthfulQA.json",
            "dpr_wiki/sample_data.jsonl"} <= named          # the regex finds the commands' files
    assert named <= set(questions.RAW_FILES), named - set(questions.RAW_FILES)
    assert "data/raw/" in (ROOT / ".gitignore").read_text().split()
    assert all(re.fullmatch(r"[0-9a-f]{64}", s.sha256) for s in questions.RAW_FILES.values())


def test_fetch_downloads_checks_and_keeps_a_checked_file(tmp_path, monkeypatch, capsys):
    """The download code end to end on files made here: whole files and the first records of a JSON list,
    from each file's own URL or from a mirror (base_url); a file already there is checked, not fetched again,
    and one that differs is fetched again; nothing half-written is left beside them."""
    src = tmp_path / "src"
    (src / "t").mkdir(parents=True)
    records = [{"_id": str(i), "question": f"q{i}/?", "answer": "é"} for i in range(5)]
    (src / "t/all.json").write_text(json.dumps(records, indent=1))       # formatting other than ours
    (src / "t/a.csv").write_bytes(b"statement,label\nx,1\n")
    first3 = json.dumps(records[:3], separators=(",", ":")).encode()
    dest = tmp_path / "raw"
    with serving(src) as url:
        monkeypatch.setattr(questions, "RAW_FILES", {
            "t/first3.json": questions.Source(f"{url}/t/all.json", sha(first3), records=3),
            "t/a.csv": questions.Source(f"{url}/t/a.csv", sha(b"statement,label\nx,1\n"))})
        assert questions.fetch(dest=dest) == [dest / "t/first3.json", dest / "t/a.csv"]
        assert (dest / "t/first3.json").read_bytes() == first3
        assert json.loads((dest / "t/first3.json").read_bytes()) == records[:3]
        assert (dest / "t/a.csv").read_bytes() == b"statement,label\nx,1\n"
        capsys.readouterr()
        (dest / "t/a.csv").write_bytes(b"edited")
        questions.fetch(["t"], dest=dest)
        out = capsys.readouterr().out
        assert "t/first3.json: already there, sha256 checked" in out
        assert "t/a.csv: the file there is not the one checked here; fetching it again" in out
        assert (dest / "t/a.csv").read_bytes() == b"statement,label\nx,1\n"
    mirror = tmp_path / "mirror"                                           # base_url: NAME under a mirror
    (mirror / "t").mkdir(parents=True)
    (mirror / "t/first3.json").write_bytes(json.dumps(records[:4]).encode())
    shutil.rmtree(dest)
    with serving(mirror) as url:
        questions.fetch(["t/first3.json"], dest=dest, base_url=url + "/")
    assert (dest / "t/first3.json").read_bytes() == first3
    assert sorted(p.name for p in dest.rglob("*")) == ["first3.json", "t"]   # no .part file left


def test_a_damaged_or_missing_download_is_one_line_naming_the_file_and_source(tmp_path):
    """The real table (questions.RAW_FILES) against a loopback mirror holding a damaged copy and no other
    file: one `error:` line naming the file and its source, exit code 2, nothing written."""
    mirror = tmp_path / "mirror"
    (mirror / "rowen").mkdir(parents=True)
    (mirror / "rowen/TruthfulQA.json").write_text('[{"Question": "damaged"}]')
    (mirror / "hotpotqa").mkdir()
    (mirror / "hotpotqa/hotpot_dev_distractor_v1_100.json").write_text('[{"_id": "only one"}]')
    dest = tmp_path / "raw"
    with serving(mirror) as url:
        line = one_error_line(fetch_cli("rowen/TruthfulQA.json", "--base-url", url, "--dest", dest))
        assert line.startswith(f"error: rowen/TruthfulQA.json: {url}/rowen/TruthfulQA.json gives sha256 ")
        assert "expected e6696ea6e063..." in line and "dhx20150812/Rowen" in line
        line = one_error_line(fetch_cli("rowen/sampled_nq.json", "--dest", dest, DATA_URL=url))
        assert line.startswith(f"error: rowen/sampled_nq.json: cannot download {url}/rowen/sampled_nq.json "
                               "(HTTP Error 404")
        assert line.endswith("or copy the files with DATA_FROM=DIR make data")
        hotpot = "hotpotqa/hotpot_dev_distractor_v1_100.json"
        line = one_error_line(fetch_cli(hotpot, "--dest", dest, DATA_URL=url))
        assert "hotpot_dev_distractor_v1_100.json is not a JSON list of at least 103 records" in line
    assert not dest.exists()
    line = one_error_line(fetch_cli("nosuch", "--dest", dest))
    assert line.startswith("error: nosuch: not a file of data/raw/; name a folder (hotpotqa, ")


class CutShort(http.server.BaseHTTPRequestHandler):
    """Promises 1,000 bytes, sends 10 and hangs up: a download interrupted half-way."""
    def __init__(self, *args, directory=None, **kwargs):
        super().__init__(*args, **kwargs)

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"0123456789")
        self.close_connection = True

    def log_message(self, *args):
        pass


def test_an_interrupted_download_leaves_nothing_written(tmp_path):
    dest = tmp_path / "raw"
    with serving(tmp_path, CutShort) as url:
        with pytest.raises(InputError) as e:
            questions.fetch(["ctrla/bio_gen.jsonl"], dest=dest, base_url=url)
    assert str(e.value).startswith(f"ctrla/bio_gen.jsonl: ") and url in str(e.value)
    assert "\n" not in str(e.value)
    assert not list(dest.rglob("*.*"))


def test_data_from_a_local_folder_refuses_a_damaged_or_missing_copy(tmp_path):
    copy = tmp_path / "copy"
    (copy / "rowen").mkdir(parents=True)
    (copy / "rowen/sampled_nq.json").write_text("[]")
    dest = tmp_path / "raw"
    line = one_error_line(fetch_cli("rowen", "--dest", dest, DATA_FROM=copy))
    assert line.startswith(f"error: rowen/TruthfulQA.json: cannot read {copy}/rowen/TruthfulQA.json "
                           "(No such file or directory); DATA_FROM must hold data/raw/'s layout "
                           "(this file's source: https://raw.githubusercontent.com/dhx20150812/Rowen/")
    line = one_error_line(fetch_cli("rowen/sampled_nq.json", "--from", copy, "--dest", dest))
    assert line.startswith(f"error: rowen/sampled_nq.json: {copy}/rowen/sampled_nq.json gives sha256 ")
    line = one_error_line(fetch_cli("--dest", dest, DATA_FROM=tmp_path / "nowhere"))
    assert line.startswith(f"error: DATA_FROM={tmp_path / 'nowhere'}: no such folder")
    assert not dest.exists()


@pytest.mark.skipif(not shutil.which("make"), reason="needs make")
def test_make_data_passes_data_from():
    r = subprocess.run(["make", "-n", "-o", ".venv/.installed", "data", "DATA_FROM=some dir"], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and 'questions.py fetch --from "some dir"' in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(not RAW.is_dir(), reason="shared/data/raw is only on the developers' machine")
def test_make_data_fetches_every_file_from_a_loopback_copy_of_the_sources(tmp_path):
    """Every file of RAW_FILES downloaded by the real code from a loopback server over the developers' copy
    of the sources, each checked; whole files byte for byte, HotpotQA's first 103 records as they are there.
    DATA_FROM takes the same files from that folder with the same checks."""
    dest = tmp_path / "raw"
    with serving(RAW) as url:
        r = fetch_cli("--dest", dest, DATA_URL=url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"{len(questions.RAW_FILES)} files in {dest}, each one's sha256 checked")
    for name, source in questions.RAW_FILES.items():
        data = (dest / name).read_bytes()
        assert sha(data) == source.sha256, name
        if source.records is None:
            assert data == (RAW / name).read_bytes(), name
    hotpot = "hotpotqa/hotpot_dev_distractor_v1_100.json"
    assert json.loads((dest / hotpot).read_bytes()) == json.loads((RAW / hotpot).read_bytes())
    assert load_dataset(dest / hotpot) == load_dataset(RAW / hotpot)
    r = fetch_cli("rowen", hotpot, "--dest", tmp_path / "copied", DATA_FROM=RAW)
    assert r.returncode == 0, r.stderr
    assert {str(p.relative_to(tmp_path / "copied")) for p in (tmp_path / "copied").rglob("*.*")} == \
        {hotpot, *(n for n in questions.RAW_FILES if n.startswith("rowen/"))}
    assert (tmp_path / "copied" / hotpot).read_bytes() == (dest / hotpot).read_bytes()
