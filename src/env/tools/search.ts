/**
 * The retrieval search tool: BM25 over a passage corpus, top-k (default 5), returned as numbered
 * `title: text` lines that together fit a character budget.
 */
import { type Passage, PassageIndex, type SearchHit } from '../retrieval/bm25.ts';
import { defineTool, type Tool } from '../tool.ts';

export interface SearchToolOptions {
  /** Passages returned per query. Default 5 (as in Agent-R1). */
  topK?: number;
  /** Character budget of the whole response; passages are shortened to share it fairly. Default 3000. */
  maxChars?: number;
  /** Tool name the model calls. Default 'search'. */
  name?: string;
  description?: string;
}

export const DEFAULT_SEARCH_TOP_K = 5;
export const DEFAULT_SEARCH_MAX_CHARS = 3000;
export const NO_RESULTS = 'No results found.';
export const DEFAULT_SEARCH_DESCRIPTION =
  'Search the knowledge base for passages relevant to a query. Returns the top passages as numbered "title: text" lines.';

type SearchArgs = { query: string };

/** Creates a search tool over a corpus (an index, or passages to index). */
export function createSearchTool(
  corpus: PassageIndex | readonly Passage[],
  options: SearchToolOptions = {},
): Tool {
  const index = corpus instanceof PassageIndex ? corpus : PassageIndex.build(corpus);
  const topK = options.topK ?? DEFAULT_SEARCH_TOP_K;
  const maxChars = options.maxChars ?? DEFAULT_SEARCH_MAX_CHARS;
  if (!Number.isInteger(topK) || topK < 1) throw new Error('search tool: topK must be a positive integer');
  if (!Number.isInteger(maxChars) || maxChars < 40)
    throw new Error('search tool: maxChars must be at least 40');

  const tool = defineTool<SearchArgs>({
    name: options.name ?? 'search',
    description: options.description ?? DEFAULT_SEARCH_DESCRIPTION,
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string', description: 'Keywords or a natural-language query.', minLength: 1 },
      },
      required: ['query'],
      additionalProperties: false,
    },
    execute({ query }) {
      if (query.trim() === '') return { content: 'Error: the query is empty.', success: false };
      const hits = index.search(query, topK);
      if (hits.length === 0) return { content: NO_RESULTS, success: true, retrievedIds: [] };
      return {
        content: formatHits(hits, maxChars),
        success: true,
        retrievedIds: hits.map((h) => h.passage.id),
        metadata: { scores: hits.map((h) => h.score) },
      };
    },
  });
  return tool as unknown as Tool;
}

/**
 * Formats hits as `1. title: text` lines within `maxChars` in total. Each passage gets an equal share
 * of what is left, so short passages leave room for long ones and no passage is dropped.
 */
export function formatHits(hits: readonly SearchHit[], maxChars: number): string {
  const lines: string[] = [];
  let remaining = maxChars - Math.max(0, hits.length - 1); // newline separators
  hits.forEach((hit, i) => {
    const prefix = `${i + 1}. ${oneLine(hit.passage.title)}: `;
    const body = oneLine(hit.passage.text);
    const share = Math.floor(remaining / (hits.length - i));
    const line = fitLine(prefix, body, share);
    lines.push(line);
    remaining -= line.length;
  });
  return lines.join('\n');
}

/** Keeps each passage on one line so numbering stays unambiguous. */
function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

function fitLine(prefix: string, body: string, budget: number): string {
  const full = prefix + body;
  if (full.length <= budget) return full;
  if (budget <= 1) return '…'.slice(0, Math.max(0, budget));
  if (prefix.length >= budget) return `${prefix.slice(0, budget - 1)}…`;
  return `${prefix}${body.slice(0, budget - prefix.length - 1)}…`;
}

/** Parses the tool's response back into `{rank, title, text}` (used by the scripted policies). */
export function parseSearchResponse(content: string): { rank: number; title: string; text: string }[] {
  const out: { rank: number; title: string; text: string }[] = [];
  for (const line of content.split('\n')) {
    const m = /^(\d+)\. (.*?): (.*)$/.exec(line);
    if (m) out.push({ rank: Number(m[1]), title: m[2], text: m[3] });
  }
  return out;
}

/** What evaluate() and the rollout need: the tools for one task. */
export type TaskTools = (task: { id: string; passages: readonly Passage[] }) => Tool[];

/** One search tool over one shared corpus for every task (the pooled / open-corpus setting). */
export function pooledSearchTools(
  corpus: PassageIndex | readonly Passage[],
  options: SearchToolOptions = {},
): TaskTools {
  const tool = createSearchTool(corpus, options);
  return () => [tool];
}

/** A search tool over each task's own passages (the distractor setting); indexes are built once per task. */
export function perQuestionSearchTools(options: SearchToolOptions = {}): TaskTools {
  const cache = new Map<string, Tool>();
  return (task) => {
    let tool = cache.get(task.id);
    if (!tool) {
      tool = createSearchTool(task.passages, options);
      cache.set(task.id, tool);
    }
    return [tool];
  };
}

/**
 * The search tools of one split under a task's corpus setting: 'pooled' searches every question over
 * the split's passages together (open corpus), 'question' each over its own (distractor setting).
 */
export function corpusSearchTools(
  corpus: 'pooled' | 'question',
  passages: PassageIndex | readonly Passage[],
  options: SearchToolOptions = {},
): TaskTools {
  return corpus === 'pooled' ? pooledSearchTools(passages, options) : perQuestionSearchTools(options);
}
