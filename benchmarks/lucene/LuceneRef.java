// A small Lucene 8 reference for benchmarks/bench_retrieval.py: the SeaKR/DRAGIN and CtrlA
// Elasticsearch indexes rebuilt with plain Lucene (the engine inside Elasticsearch 7).
//
// usage: java -cp LUCENE_JARS:. LuceneRef PASSAGES.tsv QUERIES.txt OUT.tsv
//   PASSAGES.tsv: id \t title \t text per line; QUERIES.txt: one query per line.
// OUT.tsv rows:
//   Q \t preset \t query# \t rank \t passage id \t score      (top 10 per query and preset)
//   T \t passage id \t english tokens of text \t standard tokens of text   (space-joined)
// Indexes: title, txt with EnglishAnalyzer (seakr); text with StandardAnalyzer, no stop words
// (ctrla, ES 7's default `standard`). BM25 k1 = 1.2, b = 0.75. Queries: ES multi_match best_fields
// = DisjunctionMaxQuery(tie 0.5) of one match (BooleanQuery of SHOULD terms) per field; ES match.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.apache.lucene.analysis.miscellaneous.PerFieldAnalyzerWrapper;
import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.document.*;
import org.apache.lucene.index.*;
import org.apache.lucene.search.*;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.util.QueryBuilder;

public class LuceneRef {
    static String tokens(Analyzer a, String field, String text) throws IOException {
        StringBuilder sb = new StringBuilder();
        try (TokenStream ts = a.tokenStream(field, text)) {
            CharTermAttribute t = ts.addAttribute(CharTermAttribute.class);
            ts.reset();
            while (ts.incrementToken()) {
                if (sb.length() > 0) sb.append(' ');
                sb.append(t.toString());
            }
            ts.end();
        }
        return sb.toString();
    }

    public static void main(String[] args) throws Exception {
        Analyzer en = new EnglishAnalyzer();
        Analyzer std = new StandardAnalyzer(CharArraySet.EMPTY_SET);
        Map<String, Analyzer> per = new HashMap<>();
        per.put("title", en);
        per.put("txt", en);
        per.put("text", std);
        Analyzer wrapper = new PerFieldAnalyzerWrapper(std, per);
        BM25Similarity sim = new BM25Similarity(1.2f, 0.75f);
        ByteBuffersDirectory dir = new ByteBuffersDirectory();
        IndexWriterConfig cfg = new IndexWriterConfig(wrapper).setSimilarity(sim);
        List<String[]> rows = new ArrayList<>();
        try (IndexWriter w = new IndexWriter(dir, cfg)) {
            for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8)) {
                String[] r = line.split("\t", -1);
                rows.add(r);
                Document d = new Document();
                d.add(new StringField("id", r[0], Field.Store.YES));
                d.add(new TextField("title", r[1], Field.Store.NO));
                d.add(new TextField("txt", r[2], Field.Store.NO));
                d.add(new TextField("text", r[2], Field.Store.NO));
                w.addDocument(d);
            }
            w.forceMerge(1);
        }
        IndexSearcher s = new IndexSearcher(DirectoryReader.open(dir));
        s.setSimilarity(sim);
        QueryBuilder enq = new QueryBuilder(en), stdq = new QueryBuilder(std);
        try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Paths.get(args[2]), StandardCharsets.UTF_8))) {
            List<String> queries = Files.readAllLines(Paths.get(args[1]), StandardCharsets.UTF_8);
            for (int qi = 0; qi < queries.size(); qi++) {
                String q = queries.get(qi);
                List<Query> fields = new ArrayList<>();
                for (String f : new String[]{"title", "txt"}) {
                    Query fq = enq.createBooleanQuery(f, q);
                    if (fq != null) fields.add(fq);
                }
                Query seakr = fields.isEmpty() ? null : new DisjunctionMaxQuery(fields, 0.5f);
                Query ctrla = stdq.createBooleanQuery("text", q);
                Object[][] presets = {{"seakr", seakr}, {"ctrla", ctrla}};
                for (Object[] p : presets) {
                    if (p[1] == null) continue;
                    ScoreDoc[] hits = s.search((Query) p[1], 10).scoreDocs;
                    for (int r = 0; r < hits.length; r++) {
                        String id = s.doc(hits[r].doc).get("id");
                        out.println("Q\t" + p[0] + "\t" + qi + "\t" + r + "\t" + id + "\t" + hits[r].score);
                    }
                }
            }
            for (String[] r : rows) {
                out.println("T\t" + r[0] + "\t" + tokens(en, "txt", r[2]) + "\t" + tokens(std, "text", r[2]));
            }
        }
    }
}
