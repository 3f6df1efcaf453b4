/**
 * Lexical passage retrieval: BM25+ over title and text, via minisearch (maintained, dependency-free,
 * runs in the browser, workers and Node). Terms are lower-cased, stripped of diacritics and of English
 * stop words, and lightly stemmed, so a question can be used as a query as it is.
 */
import MiniSearch from 'minisearch';

/** A retrievable unit of text. `id` is unique within a corpus. */
export interface Passage {
  id: string;
  title: string;
  text: string;
}

export interface SearchHit {
  passage: Passage;
  /** BM25+ score (higher is better); comparable only within one query. */
  score: number;
  /** 1-based rank. */
  rank: number;
}

export interface PassageIndexOptions {
  /** Weight of a title match relative to a text match. Default 2. */
  titleBoost?: number;
  /** BM25 parameters; minisearch's defaults (k 1.2, b 0.7, d 0.5) when omitted. */
  bm25?: { k: number; b: number; d: number };
  /** Drop English stop words. Default true. */
  stopWords?: boolean;
  /** Apply a light suffix stemmer. Default true. */
  stem?: boolean;
}

// Function words that carry no retrieval signal; questions are full of them.
const STOP_WORDS = new Set(
  (
    'a an and are as at be been being but by did do does for from had has have he her his how i if in into is ' +
    'it its of on or s she so than that the their them then there these they this those to was were what when ' +
    'where which while who whom whose why will with which would you your also can could may might'
  ).split(' '),
);

/** minisearch's own tokenizer regex: split on white space and punctuation. */
const SPLIT = /[\n\r\p{Z}\p{P}]+/u;

/** Lower-cases, removes diacritics ("Alû" → "alu"), so queries need not reproduce accents. */
export function foldTerm(term: string): string {
  return term.normalize('NFKD').replace(/\p{M}/gu, '').toLowerCase();
}

/**
 * A deliberately light stemmer (plural and a few verb endings). Porter-style stemming conflates too many
 * proper names, and names are what multi-hop questions turn on.
 */
export function lightStem(term: string): string {
  if (term.length <= 4 || /\d/.test(term)) return term;
  if (term.endsWith('ies') && term.length > 5) return `${term.slice(0, -3)}y`;
  if (term.endsWith('sses')) return term.slice(0, -2);
  if (term.endsWith('s') && !term.endsWith('ss') && !term.endsWith('us') && !term.endsWith('is')) {
    return term.slice(0, -1);
  }
  if (term.endsWith('ing') && term.length > 6) return term.slice(0, -3);
  if (term.endsWith('ed') && term.length > 5) return term.slice(0, -2);
  return term;
}

/** An in-memory BM25 index over passages. Build once, query many times. */
export class PassageIndex {
  private readonly search_: MiniSearch<Passage>;
  private readonly byId: Map<string, Passage>;

  private constructor(search: MiniSearch<Passage>, byId: Map<string, Passage>) {
    this.search_ = search;
    this.byId = byId;
  }

  /** Builds an index; throws on duplicate or empty ids (a corpus bug that would corrupt retrieval). */
  static build(passages: readonly Passage[], options: PassageIndexOptions = {}): PassageIndex {
    const byId = new Map<string, Passage>();
    for (const p of passages) {
      if (typeof p.id !== 'string' || p.id === '') throw new Error('passage without an id');
      if (byId.has(p.id)) throw new Error(`duplicate passage id ${JSON.stringify(p.id)}`);
      if (typeof p.title !== 'string' || typeof p.text !== 'string') {
        throw new Error(`passage ${JSON.stringify(p.id)} needs a string title and text`);
      }
      byId.set(p.id, p);
    }
    const processTerm = makeTermProcessor(options.stopWords ?? true, options.stem ?? true);
    const search = new MiniSearch<Passage>({
      fields: ['title', 'text'],
      storeFields: [],
      idField: 'id',
      tokenize: (text) => text.split(SPLIT),
      processTerm,
      searchOptions: {
        boost: { title: options.titleBoost ?? 2 },
        combineWith: 'OR',
        ...(options.bm25 ? { bm25: options.bm25 } : {}),
      },
    });
    search.addAll(passages as Passage[]);
    return new PassageIndex(search, byId);
  }

  get size(): number {
    return this.byId.size;
  }

  get(id: string): Passage | undefined {
    return this.byId.get(id);
  }

  /** Top-k passages for a free-text query; empty for a query with no usable terms. */
  search(query: string, k = 5): SearchHit[] {
    if (typeof query !== 'string' || query.trim() === '' || k <= 0) return [];
    const results = this.search_.search(query);
    const hits: SearchHit[] = [];
    for (const r of results) {
      if (hits.length >= k) break;
      const passage = this.byId.get(String(r.id));
      if (passage) hits.push({ passage, score: r.score, rank: hits.length + 1 });
    }
    return hits;
  }
}

function makeTermProcessor(stopWords: boolean, stem: boolean) {
  return (term: string): string | null => {
    const folded = foldTerm(term);
    if (folded === '' || (stopWords && STOP_WORDS.has(folded))) return null;
    return stem ? lightStem(folded) : folded;
  };
}
