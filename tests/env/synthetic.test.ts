import { describe, expect, it } from 'vitest';
import { createRng } from '../../src/env/rng.ts';
import { validateTask } from '../../src/env/tasks/schema.ts';
import {
  type FactReader,
  generateSyntheticDataset,
  matchSyntheticQuestion,
  type ReadPassage,
  SolveStop,
  solveQuestion,
} from '../../src/env/tasks/synthetic.ts';
import {
  type Entity,
  generateWorld,
  NameRegistry,
  ORG_PHRASE,
  parseEntityPassage,
  type World,
} from '../../src/env/tasks/synthetic-world.ts';

const DATA = generateSyntheticDataset({ seed: 5, trainSize: 150, testSize: 100 });

/** Reads the world's passages directly (no search), recording which passages it used. */
class WorldReader implements FactReader {
  readonly used = new Set<string>();
  constructor(private readonly world: World) {}
  private read(id: string): ReadPassage {
    const p = this.world.passages.find((x) => x.id === id)!;
    this.used.add(id);
    return { ...parseEntityPassage(p.title, p.text)!, title: p.title };
  }
  entity(name: string): ReadPassage {
    const p = this.world.passages.find((x) => x.title === name);
    if (!p) throw new SolveStop(null, `no ${name}`);
    return this.read(p.id);
  }
  mentioning(name: string, _hint: string, accept: (p: ReadPassage) => boolean): ReadPassage {
    const matches = this.world.passages.filter((p) => {
      const parsed = parseEntityPassage(p.title, p.text);
      return p.title !== name && parsed !== null && accept({ ...parsed, title: p.title });
    });
    if (matches.length !== 1) throw new SolveStop(null, `${matches.length} passages mention ${name}`);
    return this.read(matches[0].id);
  }
  note(): void {}
}

function expectedFacts(e: Entity, world: World): Record<string, string> {
  const name = (id: string) => world.byId.get(id)!.name;
  switch (e.kind) {
    case 'country':
      return { capital: name(e.capital) };
    case 'city':
      return { country: name(e.country), founded: String(e.founded) };
    case 'person':
      return {
        occupation: e.occupation,
        birthplace: name(e.birthplace),
        born: String(e.born),
        almaMater: name(e.almaMater),
      };
    case 'organisation':
      return {
        orgKind: ORG_PHRASE[e.orgKind],
        founded: String(e.founded),
        founder: name(e.founder),
        headquarters: name(e.headquarters),
      };
    case 'work':
      return {
        year: String(e.year),
        workKind: e.workKind,
        creator: name(e.creator),
        producer: name(e.producer),
      };
  }
}

describe('synthetic world', () => {
  it('is reproducible from its seed and changes with it', () => {
    const again = generateSyntheticDataset({ seed: 5, trainSize: 150, testSize: 100 });
    expect(again.test.tasks).toEqual(DATA.test.tasks);
    expect(again.train.corpus).toEqual(DATA.train.corpus);
    const other = generateSyntheticDataset({ seed: 6, trainSize: 150, testSize: 100 });
    expect(other.test.corpus.map((p) => p.title)).not.toEqual(DATA.test.corpus.map((p) => p.title));
  });

  it('gives every entity one passage whose facts read back exactly', () => {
    for (const split of [DATA.train, DATA.test]) {
      expect(split.corpus).toHaveLength(split.world.entities.length);
      for (const entity of split.world.entities) {
        const passage = split.corpus.find((p) => p.id === entity.id)!;
        expect(passage.title).toBe(entity.name);
        const parsed = parseEntityPassage(passage.title, passage.text);
        expect(parsed?.kind).toBe(entity.kind);
        expect(parsed?.facts).toMatchObject(expectedFacts(entity, split.world));
      }
    }
  });

  it('has unique names within a split and none shared between splits', () => {
    const train = DATA.train.world.entities.map((e) => e.name.toLowerCase());
    const test = DATA.test.world.entities.map((e) => e.name.toLowerCase());
    expect(new Set(train).size).toBe(train.length);
    expect(new Set(test).size).toBe(test.length);
    const trainSet = new Set(train);
    expect(test.filter((n) => trainSet.has(n))).toEqual([]);
  });

  it('name overlap creates look-alike names; without it every name word is new', () => {
    const lastNames = (overlap: number) => {
      const world = generateWorld(createRng(9), new NameRegistry(), 'w', undefined, overlap);
      const last = world.entities.filter((e) => e.kind === 'person').map((e) => e.name.split(' ')[1]);
      return 1 - new Set(last).size / last.length; // share of repeated surnames
    };
    expect(lastNames(0)).toBe(0);
    expect(lastNames(0.6)).toBeGreaterThan(0.3);
  });
});

describe('synthetic questions', () => {
  it('are valid tasks whose gold passages are exactly those a correct solver reads', () => {
    for (const split of [DATA.train, DATA.test]) {
      for (const task of split.tasks) {
        expect(validateTask(task)).toEqual([]);
        expect(matchSyntheticQuestion(task.question)?.templateId).toBe(task.meta?.template);
        const reader = new WorldReader(split.world);
        expect(solveQuestion(task.question, reader)).toBe(task.answers[0]);
        expect([...reader.used].sort()).toEqual([...task.supportingIds].sort());
        expect(task.supportingIds).toHaveLength(task.meta?.hops as number);
        expect(task.passages).toHaveLength(task.supportingIds.length + 8);
      }
    }
  });

  it('mix all kinds: 2- and 3-hop compositional, bridge, comparison, bridge comparison, yes/no', () => {
    const byType = new Map<string, number>();
    for (const t of DATA.test.tasks) byType.set(t.type!, (byType.get(t.type!) ?? 0) + 1);
    for (const type of ['compositional', 'bridge', 'comparison', 'bridge_comparison', 'yesno']) {
      expect(byType.get(type) ?? 0).toBeGreaterThanOrEqual(10);
    }
    const hops = new Set(DATA.test.tasks.map((t) => t.meta?.hops));
    expect([...hops].sort()).toEqual([2, 3, 4]);
    expect(new Set(DATA.test.tasks.map((t) => t.question)).size).toBe(DATA.test.tasks.length);
  });

  it('cannot be answered from the other split: entity answers of test are unknown to train', () => {
    const trainNames = new Set(DATA.train.world.entities.map((e) => e.name));
    const testNames = new Set(DATA.test.world.entities.map((e) => e.name));
    const entityAnswers = DATA.test.tasks.map((t) => t.answers[0]).filter((a) => testNames.has(a));
    expect(entityAnswers.length).toBeGreaterThan(40);
    expect(entityAnswers.filter((a) => trainNames.has(a))).toEqual([]);
    const trainQuestions = new Set(DATA.train.tasks.map((t) => t.question));
    expect(DATA.test.tasks.filter((t) => trainQuestions.has(t.question))).toEqual([]);
  });

  it('difficulty knobs: hops, types, distractors', () => {
    const deep = generateSyntheticDataset({ seed: 2, trainSize: 5, testSize: 30, hops: [3] });
    expect(deep.test.tasks.every((t) => t.meta?.hops === 3 && t.type === 'compositional')).toBe(true);
    const yesno = generateSyntheticDataset({
      seed: 2,
      trainSize: 5,
      testSize: 60,
      types: ['yesno'],
      distractorsPerQuestion: 0,
    });
    expect(
      yesno.test.tasks.every((t) => t.type === 'yesno' && t.passages.length === t.supportingIds.length),
    ).toBe(true);
    const yes = yesno.test.tasks.filter((t) => t.answers[0] === 'yes').length;
    expect(yes).toBeGreaterThan(15);
    expect(yes).toBeLessThan(45);
    const crowded = generateSyntheticDataset({
      seed: 2,
      trainSize: 5,
      testSize: 5,
      distractorsPerQuestion: 30,
    });
    expect(crowded.test.tasks.every((t) => t.passages.length === t.supportingIds.length + 30)).toBe(true);
  });

  it('a larger split keeps the smaller one as its first questions (a bigger held-out evaluation)', () => {
    const small = generateSyntheticDataset({ seed: 1, trainSize: 10, testSize: 100, hops: [2] });
    const large = generateSyntheticDataset({ seed: 1, trainSize: 10, testSize: 400, hops: [2] });
    expect(large.test.tasks.slice(0, 100).map((t) => [t.id, t.question, t.answers])).toEqual(
      small.test.tasks.map((t) => [t.id, t.question, t.answers]),
    );
    expect(large.test.corpus).toEqual(small.test.corpus);
    expect(large.train.tasks).toEqual(small.train.tasks);
  });

  it('rejects impossible configurations clearly', () => {
    expect(() =>
      generateSyntheticDataset({ trainSize: 1, testSize: 1, types: ['comparison'], hops: [3] }),
    ).toThrow(/no question template/);
    expect(() => generateSyntheticDataset({ nameOverlap: 1 })).toThrow(/nameOverlap/);
    expect(() => generateSyntheticDataset({ distractorsPerQuestion: -1 })).toThrow(/distractorsPerQuestion/);
    expect(() => generateSyntheticDataset({ testSize: 2.5 })).toThrow(/testSize/);
    expect(() =>
      generateSyntheticDataset({
        trainSize: 1,
        testSize: 500,
        types: ['bridge'],
        worldSize: { countries: 1, cities: 2, extraPeople: 0, orgsPerKind: 2, worksPerKind: 2 },
      }),
    ).toThrow(/distinct questions/);
  });

  it('passages of other corpora are not mistaken for synthetic facts', () => {
    expect(parseEntityPassage('Paris', 'Paris is the capital of France.')).toBeNull();
    expect(parseEntityPassage('X', 'Y is a city in Z.')).toBeNull(); // about another entity
  });
});
