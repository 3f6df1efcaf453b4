/**
 * FactReaders for the synthetic solver, backed by search results and nothing else:
 *   - SearchHistoryReader (oracle): looks passages up in the responses the episode already received,
 *     and asks for a search (SolveStop with a query) when a response is missing;
 *   - FixedPassagesReader (Naive RAG): only the passages of one retrieval; anything else is a dead end.
 */
import { type FactReader, type ReadPassage, SolveStop } from '../tasks/synthetic.ts';
import { parseEntityPassage } from '../tasks/synthetic-world.ts';
import { parseSearchResponse } from '../tools/search.ts';

type Hit = { title: string; text: string };

function readHit(hit: Hit): ReadPassage | null {
  const parsed = parseEntityPassage(hit.title, hit.text);
  return parsed === null ? null : { ...parsed, title: hit.title };
}

/** Queries tried, in order, to find the passage about an entity or one that mentions it. */
export function entityQueries(name: string): string[] {
  return [name];
}
export function mentionQueries(name: string, hint: string): string[] {
  return [`${name} ${hint}`, `${hint} ${name} headquartered written directed recorded`, name];
}

abstract class NotingReader implements FactReader {
  readonly notes: string[] = [];
  note(text: string): void {
    this.notes.push(text);
  }
  abstract entity(name: string): ReadPassage;
  abstract mentioning(name: string, hint: string, accept: (p: ReadPassage) => boolean): ReadPassage;
}

export class SearchHistoryReader extends NotingReader {
  /** @param responses search responses by query, from the episode so far */
  constructor(private readonly responses: ReadonlyMap<string, string>) {
    super();
  }

  /** Hits for a query already searched; otherwise stop and ask for that search. */
  private hits(query: string): Hit[] {
    const response = this.responses.get(query);
    if (response === undefined) throw new SolveStop(query, `search for "${query}"`);
    return parseSearchResponse(response);
  }

  entity(name: string): ReadPassage {
    for (const query of entityQueries(name)) {
      for (const hit of this.hits(query)) {
        if (hit.title !== name) continue;
        const read = readHit(hit);
        if (read) return read;
      }
    }
    throw new SolveStop(null, `no passage about ${name} was found`);
  }

  mentioning(name: string, hint: string, accept: (p: ReadPassage) => boolean): ReadPassage {
    for (const query of mentionQueries(name, hint)) {
      for (const hit of this.hits(query)) {
        const read = readHit(hit);
        if (read && read.title !== name && accept(read)) return read;
      }
    }
    throw new SolveStop(null, `no passage mentioning ${name} fits`);
  }
}

export class FixedPassagesReader extends NotingReader {
  constructor(private readonly passages: readonly Hit[]) {
    super();
  }

  entity(name: string): ReadPassage {
    for (const hit of this.passages) {
      if (hit.title !== name) continue;
      const read = readHit(hit);
      if (read) return read;
    }
    throw new SolveStop(null, `the retrieved passages do not cover ${name}`);
  }

  mentioning(name: string, _hint: string, accept: (p: ReadPassage) => boolean): ReadPassage {
    for (const hit of this.passages) {
      const read = readHit(hit);
      if (read && read.title !== name && accept(read)) return read;
    }
    throw new SolveStop(null, `the retrieved passages do not mention ${name}`);
  }
}
