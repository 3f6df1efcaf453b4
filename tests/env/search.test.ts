import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { foldTerm, lightStem, type Passage, PassageIndex } from '../../src/env/retrieval/bm25.ts';
import {
  corpusSearchTools,
  createSearchTool,
  formatHits,
  NO_RESULTS,
  parseSearchResponse,
  perQuestionSearchTools,
  pooledSearchTools,
} from '../../src/env/tools/search.ts';

const CORPUS: Passage[] = [
  { id: 'a', title: 'Alû', text: 'Alû is a demon of Akkadian mythology who hides in dark corners.' },
  {
    id: 'b',
    title: 'Lilu (mythology)',
    text: 'A lilu is a masculine Akkadian word for a spirit related to demons.',
  },
  {
    id: 'c',
    title: 'Gallu',
    text: 'In Mesopotamian mythology, gallu demons were residents of the underworld.',
  },
  { id: 'd', title: 'Paris', text: 'Paris is the capital of France, on the Seine.' },
  { id: 'e', title: 'Seine', text: 'The Seine is a river flowing through Paris. Rivers run to seas.' },
];

describe('PassageIndex (BM25 via minisearch)', () => {
  const index = PassageIndex.build(CORPUS);

  it('ranks the passage that matches title and text first', () => {
    const hits = index.search('Gallu demon', 3);
    expect(hits[0].passage.id).toBe('c');
    expect(hits.map((h) => h.rank)).toEqual([1, 2, 3]);
    expect(hits[0].score).toBeGreaterThan(hits[1].score);
  });

  it('folds diacritics, drops stop words and stems plurals', () => {
    expect(foldTerm('Alû')).toBe('alu');
    expect(index.search('alu', 1)[0].passage.id).toBe('a');
    expect(lightStem('rivers')).toBe('river');
    expect(lightStem('cities')).toBe('city');
    expect(lightStem('paris')).toBe('paris'); // -is is not a plural
    expect(lightStem('1990s')).toBe('1990s');
    expect(index.search('river', 1)[0].passage.id).toBe('e');
    expect(index.search('the of is a', 5)).toEqual([]); // only stop words
  });

  it('honours k and handles empty queries and k ≤ 0', () => {
    expect(index.search('mythology', 2)).toHaveLength(2);
    expect(index.search('', 5)).toEqual([]);
    expect(index.search('   ', 5)).toEqual([]);
    expect(index.search('paris', 0)).toEqual([]);
    expect(index.size).toBe(5);
    expect(index.get('d')?.title).toBe('Paris');
  });

  it('rejects duplicate and empty ids', () => {
    expect(() => PassageIndex.build([CORPUS[0], CORPUS[0]])).toThrow(/duplicate passage id "a"/);
    expect(() => PassageIndex.build([{ id: '', title: 't', text: 'x' }])).toThrow(/without an id/);
    const noText = { id: 'z', title: 't' } as unknown as Passage;
    expect(() => PassageIndex.build([noText])).toThrow(/string title and text/);
  });
});

describe('search tool', () => {
  it('returns numbered "title: text" passages and their ids', async () => {
    const tool = createSearchTool(CORPUS, { topK: 2 });
    const result = await tool.execute({ query: 'Seine river Paris' });
    expect(result.success).toBe(true);
    expect(result.retrievedIds).toEqual(['e', 'd']);
    expect(result.content).toBe(
      '1. Seine: The Seine is a river flowing through Paris. Rivers run to seas.\n2. Paris: Paris is the capital of France, on the Seine.',
    );
    expect(parseSearchResponse(result.content)).toEqual([
      { rank: 1, title: 'Seine', text: 'The Seine is a river flowing through Paris. Rivers run to seas.' },
      { rank: 2, title: 'Paris', text: 'Paris is the capital of France, on the Seine.' },
    ]);
  });

  it('defaults to top 5 and says so when nothing matches', async () => {
    const tool = createSearchTool(CORPUS);
    expect((await tool.execute({ query: 'mythology demon paris seine river' })).retrievedIds).toHaveLength(5);
    expect(await tool.execute({ query: 'zzz' })).toEqual({
      content: NO_RESULTS,
      success: true,
      retrievedIds: [],
    });
    expect(tool.parameters.required).toEqual(['query']);
  });

  it('keeps the whole response within the character budget, every passage present', () => {
    const passage = fc.record({
      title: fc.string({ minLength: 1, maxLength: 30 }),
      text: fc.string({ maxLength: 400 }),
    });
    fc.assert(
      fc.property(
        fc.array(passage, { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 40, max: 1500 }),
        (ps, budget) => {
          const hits = ps.map((p, i) => ({ passage: { id: String(i), ...p }, score: 1, rank: i + 1 }));
          const text = formatHits(hits, budget);
          expect(text.length).toBeLessThanOrEqual(budget);
          expect(text.split('\n')).toHaveLength(hits.length);
        },
      ),
      { numRuns: 300 },
    );
    const long = [{ passage: { id: 'x', title: 'T', text: 'y'.repeat(100) }, score: 1, rank: 1 }];
    expect(formatHits(long, 20)).toBe(`1. T: ${'y'.repeat(13)}…`); // 20 characters exactly
  });

  it('validates its options', () => {
    expect(() => createSearchTool(CORPUS, { topK: 0 })).toThrow(/topK/);
    expect(() => createSearchTool(CORPUS, { maxChars: 10 })).toThrow(/maxChars/);
  });

  it('provides tools per question (cached) or over a pooled corpus', () => {
    const per = perQuestionSearchTools();
    const task = { id: 'q', passages: CORPUS.slice(0, 2) };
    expect(per(task)[0]).toBe(per(task)[0]);
    const pooled = pooledSearchTools(CORPUS);
    expect(pooled(task)[0]).toBe(pooled({ id: 'other', passages: [] })[0]);
  });

  it("corpusSearchTools follows the task's corpus setting", async () => {
    // A question whose own passages lack the Seine: only the pooled search finds it.
    const task = { id: 'q', passages: CORPUS.slice(0, 3) };
    const run = (corpus: 'pooled' | 'question') =>
      corpusSearchTools(corpus, CORPUS, { topK: 1 })(task)[0].execute({ query: 'Seine river' });
    expect((await run('pooled')).retrievedIds).toEqual(['e']);
    expect((await run('question')).retrievedIds).not.toContain('e');
  });
});
