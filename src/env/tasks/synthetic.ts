/**
 * The synthetic multi-hop QA task: the lab's default, answerable only by searching a fictional world.
 *
 * Question templates (type, gold passages):
 *   compositional, 2  "Where was the author of the novel X born?"                       X → person → city
 *   compositional, 3  "In which country was the director of the film X born?"           X → person → city → country
 *   bridge, 2         "In which city is the publisher of the novel written by P headquartered?"
 *                     (the novel, the bridge entity, is not named: find the passage that mentions P)
 *   comparison, 2     "Who was born first, P1 or P2?"
 *   bridge_comparison, 4  "Whose director was born first, the film X or the film Y?"
 *   yesno, 2          "Were P1 and P2 born in the same city?"
 * Every template knows how to pose itself from the world graph (with the gold answer and gold passages)
 * and how to solve itself by reading passages through a FactReader. The oracle and the Naive RAG reader
 * drive `solveQuestion` with readers backed by search results, never by the world.
 *
 * Train and test splits are separate worlds whose names never overlap (one NameRegistry), so answers
 * cannot be memorised across splits.
 */

import type { Passage } from '../retrieval/bm25.ts';
import { createRng, type Rng } from '../rng.ts';
import type { QaTask } from './schema.ts';
import {
  type City,
  DEFAULT_WORLD_SIZE,
  type Entity,
  generateWorld,
  NameRegistry,
  type Organisation,
  type ParsedPassage,
  type Person,
  WORK_WORDS,
  type Work,
  type WorkKind,
  type World,
  type WorldSize,
} from './synthetic-world.ts';

export type SyntheticQuestionType = 'compositional' | 'bridge' | 'comparison' | 'bridge_comparison' | 'yesno';
export const SYNTHETIC_QUESTION_TYPES: readonly SyntheticQuestionType[] = [
  'compositional',
  'bridge',
  'comparison',
  'bridge_comparison',
  'yesno',
];

/** A passage read by a FactReader: its title plus what parseEntityPassage found in it. */
export interface ReadPassage extends ParsedPassage {
  title: string;
}

/** Thrown by a FactReader to stop solving (the reader needs a search, or cannot go on). */
export class SolveStop extends Error {
  /** The query to search next, or null when the reader gives up. */
  readonly query: string | null;
  constructor(query: string | null, reason: string) {
    super(reason);
    this.query = query;
  }
}

/** How a solver reads the world: through passages only. Implementations throw SolveStop. */
export interface FactReader {
  /** The passage about `name` itself (found by searching for the name). */
  entity(name: string): ReadPassage;
  /** A passage about another entity that mentions `name` and passes `accept` (an inverse hop). */
  mentioning(name: string, hint: string, accept: (p: ReadPassage) => boolean): ReadPassage;
  /** Records a reasoning step (becomes the oracle's `<think>` text). */
  note(text: string): void;
}

interface Posed {
  question: string;
  answer: string;
  /** Entity ids whose passages are needed (the gold supporting passages). */
  gold: string[];
}

interface QuestionTemplate {
  id: string;
  type: SyntheticQuestionType;
  /** Gold passages needed. */
  hops: number;
  /** Poses a question about random entities; null when the draw violates a constraint (retry). */
  pose(world: WorldView, rng: Rng): Posed | null;
  /** Recognises the template's questions. */
  pattern: RegExp;
  /** Answers a recognised question by reading passages. */
  solve(match: RegExpExecArray, reader: FactReader): string;
}

/** Typed access to a world's entities. */
class WorldView {
  readonly people: Person[];
  readonly works: Work[];
  readonly orgs: Organisation[];
  readonly cities: City[];
  constructor(readonly world: World) {
    this.people = world.entities.filter((e): e is Person => e.kind === 'person');
    this.works = world.entities.filter((e): e is Work => e.kind === 'work');
    this.orgs = world.entities.filter((e): e is Organisation => e.kind === 'organisation');
    this.cities = world.entities.filter((e): e is City => e.kind === 'city');
  }
  get<T extends Entity>(id: string): T {
    const e = this.world.byId.get(id);
    if (!e) throw new Error(`synthetic world: dangling reference ${id}`);
    return e as T;
  }
}

const CREATOR_NOUNS = '(author|director|artist)';
const WORK_KINDS = '(novel|film|album)';
const PRODUCER_NOUNS = '(publisher|studio|record label)';

function words(kind: WorkKind) {
  return WORK_WORDS[kind];
}

/** Reads a field the solver depends on; a missing field means the passage was not what it seemed. */
function field(p: ReadPassage, name: string): string {
  const value = p.facts[name];
  if (value === undefined)
    throw new SolveStop(null, `the passage about ${p.title} does not state its ${name}`);
  return value;
}

/** Follows "the <creator> of the <kind> W": reads W, then its creator. */
function creatorOf(reader: FactReader, kind: string, title: string): ReadPassage {
  const work = reader.entity(title);
  const creator = field(work, 'creator');
  reader.note(`The ${kind} ${title} was ${field(work, 'createdBy')} ${creator}.`);
  return reader.entity(creator);
}

function producerOf(reader: FactReader, kind: string, title: string): ReadPassage {
  const work = reader.entity(title);
  const producer = field(work, 'producer');
  reader.note(`The ${kind} ${title} was ${field(work, 'producedBy')} ${producer}.`);
  return reader.entity(producer);
}

function earlier(a: [string, number], b: [string, number]): string {
  return a[1] <= b[1] ? a[0] : b[0];
}

/** Searches each named entity's year field (noting "<name> <verb> in <year>.") and returns the earlier. */
function earlierByYear(r: FactReader, names: [string, string], key: string, verb: string): string {
  const [a, b] = names.map((name) => {
    const year = Number(field(r.entity(name), key));
    r.note(`${name} ${verb} in ${year}.`);
    return [name, year] as [string, number];
  });
  return earlier(a, b);
}

const TEMPLATES: QuestionTemplate[] = [
  {
    id: 'creator_birthplace',
    type: 'compositional',
    hops: 2,
    pose(w, rng) {
      const work = rng.pick(w.works);
      const creator = w.get<Person>(work.creator);
      return {
        question: `Where was the ${words(work.workKind).creatorNoun} of the ${work.workKind} ${work.name} born?`,
        answer: w.get<City>(creator.birthplace).name,
        gold: [work.id, creator.id],
      };
    },
    pattern: new RegExp(`^Where was the ${CREATOR_NOUNS} of the ${WORK_KINDS} (.+) born\\?$`),
    solve(m, r) {
      const person = creatorOf(r, m[2], m[3]);
      const city = field(person, 'birthplace');
      r.note(`${person.title} was born in ${city}.`);
      return city;
    },
  },
  {
    id: 'creator_birth_year',
    type: 'compositional',
    hops: 2,
    pose(w, rng) {
      const work = rng.pick(w.works);
      const creator = w.get<Person>(work.creator);
      return {
        question: `In what year was the ${words(work.workKind).creatorNoun} of the ${work.workKind} ${work.name} born?`,
        answer: String(creator.born),
        gold: [work.id, creator.id],
      };
    },
    pattern: new RegExp(`^In what year was the ${CREATOR_NOUNS} of the ${WORK_KINDS} (.+) born\\?$`),
    solve(m, r) {
      const person = creatorOf(r, m[2], m[3]);
      const year = field(person, 'born');
      r.note(`${person.title} was born in ${year}.`);
      return year;
    },
  },
  {
    id: 'producer_founder',
    type: 'compositional',
    hops: 2,
    pose(w, rng) {
      const work = rng.pick(w.works);
      const org = w.get<Organisation>(work.producer);
      const ww = words(work.workKind);
      return {
        question: `Who founded the ${ww.producerNoun} that ${ww.producedBy.split(' ')[0]} the ${work.workKind} ${work.name}?`,
        answer: w.get<Person>(org.founder).name,
        gold: [work.id, org.id],
      };
    },
    pattern: new RegExp(
      `^Who founded the ${PRODUCER_NOUNS} that (published|produced|released) the ${WORK_KINDS} (.+)\\?$`,
    ),
    solve(m, r) {
      const org = producerOf(r, m[3], m[4]);
      const founder = field(org, 'founder');
      r.note(`${org.title} was founded by ${founder}.`);
      return founder;
    },
  },
  {
    id: 'founder_alma_mater',
    type: 'compositional',
    hops: 2,
    pose(w, rng) {
      const org = rng.pick(w.orgs.filter((o) => o.orgKind !== 'university'));
      const founder = w.get<Person>(org.founder);
      return {
        question: `Which university did the founder of ${org.name} attend?`,
        answer: w.get<Organisation>(founder.almaMater).name,
        gold: [org.id, founder.id],
      };
    },
    pattern: /^Which university did the founder of (.+) attend\?$/,
    solve(m, r) {
      const org = r.entity(m[1]);
      const founder = field(org, 'founder');
      r.note(`${m[1]} was founded by ${founder}.`);
      const person = r.entity(founder);
      const school = field(person, 'almaMater');
      r.note(`${founder} studied at ${school}.`);
      return school;
    },
  },
  {
    id: 'org_country',
    type: 'compositional',
    hops: 2,
    pose(w, rng) {
      const org = rng.pick(w.orgs);
      const city = w.get<City>(org.headquarters);
      return {
        question: `In which country is ${org.name} headquartered?`,
        answer: w.get<Entity>(city.country).name,
        gold: [org.id, city.id],
      };
    },
    pattern: /^In which country is (.+) headquartered\?$/,
    solve(m, r) {
      const org = r.entity(m[1]);
      const cityName = field(org, 'headquarters');
      r.note(`${m[1]} is headquartered in ${cityName}.`);
      const country = field(r.entity(cityName), 'country');
      r.note(`${cityName} is a city in ${country}.`);
      return country;
    },
  },
  {
    id: 'creator_birth_country',
    type: 'compositional',
    hops: 3,
    pose(w, rng) {
      const work = rng.pick(w.works);
      const creator = w.get<Person>(work.creator);
      const city = w.get<City>(creator.birthplace);
      return {
        question: `In which country was the ${words(work.workKind).creatorNoun} of the ${work.workKind} ${work.name} born?`,
        answer: w.get<Entity>(city.country).name,
        gold: [work.id, creator.id, city.id],
      };
    },
    pattern: new RegExp(`^In which country was the ${CREATOR_NOUNS} of the ${WORK_KINDS} (.+) born\\?$`),
    solve(m, r) {
      const person = creatorOf(r, m[2], m[3]);
      const cityName = field(person, 'birthplace');
      r.note(`${person.title} was born in ${cityName}.`);
      const country = field(r.entity(cityName), 'country');
      r.note(`${cityName} is a city in ${country}.`);
      return country;
    },
  },
  {
    id: 'producer_founder_birthplace',
    type: 'compositional',
    hops: 3,
    pose(w, rng) {
      const work = rng.pick(w.works);
      const org = w.get<Organisation>(work.producer);
      const founder = w.get<Person>(org.founder);
      return {
        question: `Where was the founder of the ${words(work.workKind).producerNoun} of the ${work.workKind} ${work.name} born?`,
        answer: w.get<City>(founder.birthplace).name,
        gold: [work.id, org.id, founder.id],
      };
    },
    pattern: new RegExp(`^Where was the founder of the ${PRODUCER_NOUNS} of the ${WORK_KINDS} (.+) born\\?$`),
    solve(m, r) {
      const org = producerOf(r, m[2], m[3]);
      const founder = field(org, 'founder');
      r.note(`${org.title} was founded by ${founder}.`);
      const city = field(r.entity(founder), 'birthplace');
      r.note(`${founder} was born in ${city}.`);
      return city;
    },
  },
  {
    id: 'creator_school_city',
    type: 'compositional',
    hops: 3,
    pose(w, rng) {
      const work = rng.pick(w.works);
      const creator = w.get<Person>(work.creator);
      const school = w.get<Organisation>(creator.almaMater);
      return {
        question: `In which city is the university attended by the ${words(work.workKind).creatorNoun} of the ${work.workKind} ${work.name} headquartered?`,
        answer: w.get<City>(school.headquarters).name,
        gold: [work.id, creator.id, school.id],
      };
    },
    pattern: new RegExp(
      `^In which city is the university attended by the ${CREATOR_NOUNS} of the ${WORK_KINDS} (.+) headquartered\\?$`,
    ),
    solve(m, r) {
      const person = creatorOf(r, m[2], m[3]);
      const school = field(person, 'almaMater');
      r.note(`${person.title} studied at ${school}.`);
      const city = field(r.entity(school), 'headquarters');
      r.note(`${school} is headquartered in ${city}.`);
      return city;
    },
  },
  {
    id: 'creator_work_producer_city',
    type: 'bridge',
    hops: 2,
    pose(w, rng) {
      const work = rng.pick(w.works);
      const creator = w.get<Person>(work.creator);
      // The bridge must be unique: the creator made exactly one work of this kind.
      if (w.works.filter((x) => x.creator === creator.id && x.workKind === work.workKind).length !== 1)
        return null;
      const org = w.get<Organisation>(work.producer);
      const ww = words(work.workKind);
      return {
        question: `In which city is the ${ww.producerNoun} of the ${work.workKind} ${ww.createdBy} ${creator.name} headquartered?`,
        answer: w.get<City>(org.headquarters).name,
        gold: [work.id, org.id],
      };
    },
    pattern: new RegExp(
      `^In which city is the ${PRODUCER_NOUNS} of the ${WORK_KINDS} (written by|directed by|recorded by) (.+) headquartered\\?$`,
    ),
    solve(m, r) {
      const [, , kind, createdBy, person] = m;
      const work = r.mentioning(
        person,
        kind,
        (p) => p.kind === 'work' && p.facts.creator === person && p.facts.workKind === kind,
      );
      const producer = field(work, 'producer');
      r.note(
        `The ${kind} ${createdBy} ${person} is ${work.title}, ${field(work, 'producedBy')} ${producer}.`,
      );
      const city = field(r.entity(producer), 'headquarters');
      r.note(`${producer} is headquartered in ${city}.`);
      return city;
    },
  },
  {
    id: 'city_university_founder_born',
    type: 'bridge',
    hops: 2,
    pose(w, rng) {
      const city = rng.pick(w.cities);
      const schools = w.orgs.filter((o) => o.orgKind === 'university' && o.headquarters === city.id);
      if (schools.length !== 1) return null;
      const founder = w.get<Person>(schools[0].founder);
      return {
        question: `In what year was the founder of the university headquartered in ${city.name} born?`,
        answer: String(founder.born),
        gold: [schools[0].id, founder.id],
      };
    },
    pattern: /^In what year was the founder of the university headquartered in (.+) born\?$/,
    solve(m, r) {
      const city = m[1];
      const school = r.mentioning(
        city,
        'university',
        (p) => p.kind === 'organisation' && p.facts.orgKind === 'university' && p.facts.headquarters === city,
      );
      const founder = field(school, 'founder');
      r.note(`The university headquartered in ${city} is ${school.title}, founded by ${founder}.`);
      const year = field(r.entity(founder), 'born');
      r.note(`${founder} was born in ${year}.`);
      return year;
    },
  },
  {
    id: 'compare_born',
    type: 'comparison',
    hops: 2,
    pose(w, rng) {
      const [a, b] = rng.shuffle(w.people).slice(0, 2);
      if (a.born === b.born) return null;
      return {
        question: `Who was born first, ${a.name} or ${b.name}?`,
        answer: a.born < b.born ? a.name : b.name,
        gold: [a.id, b.id],
      };
    },
    pattern: /^Who was born first, (.+?) or (.+)\?$/,
    solve(m, r) {
      return earlierByYear(r, [m[1], m[2]], 'born', 'was born');
    },
  },
  {
    id: 'compare_founded',
    type: 'comparison',
    hops: 2,
    pose(w, rng) {
      const [a, b] = rng.shuffle(w.orgs).slice(0, 2);
      if (a.founded === b.founded) return null;
      return {
        question: `Which was founded first, ${a.name} or ${b.name}?`,
        answer: a.founded < b.founded ? a.name : b.name,
        gold: [a.id, b.id],
      };
    },
    pattern: /^Which was founded first, (.+?) or (.+)\?$/,
    solve(m, r) {
      return earlierByYear(r, [m[1], m[2]], 'founded', 'was founded');
    },
  },
  {
    id: 'compare_released',
    type: 'comparison',
    hops: 2,
    pose(w, rng) {
      const [a, b] = rng.shuffle(w.works).slice(0, 2);
      if (a.year === b.year) return null;
      return {
        question: `Which came out first, the ${a.workKind} ${a.name} or the ${b.workKind} ${b.name}?`,
        answer: a.year < b.year ? a.name : b.name,
        gold: [a.id, b.id],
      };
    },
    pattern: new RegExp(`^Which came out first, the ${WORK_KINDS} (.+?) or the ${WORK_KINDS} (.+)\\?$`),
    solve(m, r) {
      return earlierByYear(r, [m[2], m[4]], 'year', 'came out');
    },
  },
  {
    id: 'compare_creator_born',
    type: 'bridge_comparison',
    hops: 4,
    pose(w, rng) {
      const kind = rng.pick(['novel', 'film', 'album'] as WorkKind[]);
      const [a, b] = rng.shuffle(w.works.filter((x) => x.workKind === kind)).slice(0, 2);
      const ca = w.get<Person>(a.creator);
      const cb = w.get<Person>(b.creator);
      if (ca.born === cb.born) return null;
      return {
        question: `Whose ${words(kind).creatorNoun} was born first, the ${kind} ${a.name} or the ${kind} ${b.name}?`,
        answer: ca.born < cb.born ? a.name : b.name,
        gold: [a.id, ca.id, b.id, cb.id],
      };
    },
    pattern: new RegExp(
      `^Whose ${CREATOR_NOUNS} was born first, the ${WORK_KINDS} (.+?) or the ${WORK_KINDS} (.+)\\?$`,
    ),
    solve(m, r) {
      const years = [
        [m[2], m[3]],
        [m[4], m[5]],
      ].map(([kind, title]) => {
        const person = creatorOf(r, kind, title);
        const year = Number(field(person, 'born'));
        r.note(`${person.title} was born in ${year}.`);
        return [title, year] as [string, number];
      });
      return earlier(years[0], years[1]);
    },
  },
  {
    id: 'same_birthplace',
    type: 'yesno',
    hops: 2,
    pose(w, rng) {
      const a = rng.pick(w.people);
      // Half the questions are "yes": draw the second person from the same city when asked to.
      const wantSame = rng.chance(0.5);
      const pool = w.people.filter((p) => p.id !== a.id && (p.birthplace === a.birthplace) === wantSame);
      if (pool.length === 0) return null;
      const b = rng.pick(pool);
      return {
        question: `Were ${a.name} and ${b.name} born in the same city?`,
        answer: wantSame ? 'yes' : 'no',
        gold: [a.id, b.id],
      };
    },
    pattern: /^Were (.+?) and (.+) born in the same city\?$/,
    solve(m, r) {
      const cities = [m[1], m[2]].map((name) => {
        const city = field(r.entity(name), 'birthplace');
        r.note(`${name} was born in ${city}.`);
        return city;
      });
      return cities[0] === cities[1] ? 'yes' : 'no';
    },
  },
  {
    id: 'creator_born_in',
    type: 'yesno',
    hops: 2,
    pose(w, rng) {
      const work = rng.pick(w.works);
      const creator = w.get<Person>(work.creator);
      const wantYes = rng.chance(0.5);
      const city = wantYes
        ? w.get<City>(creator.birthplace)
        : rng.pick(w.cities.filter((c) => c.id !== creator.birthplace));
      return {
        question: `Was the ${words(work.workKind).creatorNoun} of the ${work.workKind} ${work.name} born in ${city.name}?`,
        answer: wantYes ? 'yes' : 'no',
        gold: [work.id, creator.id],
      };
    },
    pattern: new RegExp(`^Was the ${CREATOR_NOUNS} of the ${WORK_KINDS} (.+) born in (.+)\\?$`),
    solve(m, r) {
      const person = creatorOf(r, m[2], m[3]);
      const city = field(person, 'birthplace');
      r.note(`${person.title} was born in ${city}.`);
      return city === m[4] ? 'yes' : 'no';
    },
  },
  {
    id: 'same_headquarters',
    type: 'yesno',
    hops: 2,
    pose(w, rng) {
      const a = rng.pick(w.orgs);
      const wantSame = rng.chance(0.5);
      const pool = w.orgs.filter((o) => o.id !== a.id && (o.headquarters === a.headquarters) === wantSame);
      if (pool.length === 0) return null;
      const b = rng.pick(pool);
      return {
        question: `Are ${a.name} and ${b.name} headquartered in the same city?`,
        answer: wantSame ? 'yes' : 'no',
        gold: [a.id, b.id],
      };
    },
    pattern: /^Are (.+?) and (.+) headquartered in the same city\?$/,
    solve(m, r) {
      const cities = [m[1], m[2]].map((name) => {
        const city = field(r.entity(name), 'headquarters');
        r.note(`${name} is headquartered in ${city}.`);
        return city;
      });
      return cities[0] === cities[1] ? 'yes' : 'no';
    },
  },
];

/** Template ids, for filtering and reports. */
export const SYNTHETIC_TEMPLATE_IDS: readonly string[] = TEMPLATES.map((t) => t.id);

/** Describes the templates (id, type, gold passages), e.g. for the UI. */
export function describeSyntheticTemplates(): { id: string; type: SyntheticQuestionType; hops: number }[] {
  return TEMPLATES.map(({ id, type, hops }) => ({ id, type, hops }));
}

/** The template a question was posed from, found from the question text alone. */
export function matchSyntheticQuestion(
  question: string,
): { templateId: string; match: RegExpExecArray } | null {
  for (const t of TEMPLATES) {
    const match = t.pattern.exec(question.trim());
    if (match) return { templateId: t.id, match };
  }
  return null;
}

/**
 * Solves a synthetic question by reading passages through `reader`. Returns the answer, or throws
 * SolveStop: the reader's signal to search, or to give up (also for a question no template recognises).
 */
export function solveQuestion(question: string, reader: FactReader): string {
  const found = matchSyntheticQuestion(question);
  if (!found) throw new SolveStop(null, 'the question matches no known question form');
  const template = TEMPLATES.find((t) => t.id === found.templateId)!;
  return template.solve(found.match, reader);
}

// ---------------------------------------------------------------------------------------------------
// Task sets and splits

export interface SyntheticConfig {
  seed: number;
  trainSize: number;
  testSize: number;
  /** Allowed numbers of gold passages per question (2, 3 or 4). */
  hops: readonly number[];
  types: readonly SyntheticQuestionType[];
  /** Probability that a new name reuses a word of an existing one (look-alike distractors). */
  nameOverlap: number;
  worldSize: WorldSize;
  /** Non-gold passages in each task's own corpus (distractor setting). */
  distractorsPerQuestion: number;
}

export const DEFAULT_SYNTHETIC_CONFIG: Readonly<SyntheticConfig> = Object.freeze({
  seed: 1,
  trainSize: 200,
  testSize: 100,
  hops: [2, 3, 4],
  types: SYNTHETIC_QUESTION_TYPES,
  nameOverlap: 0.3,
  worldSize: DEFAULT_WORLD_SIZE,
  distractorsPerQuestion: 8,
});

export interface SyntheticSplit {
  name: 'train' | 'test';
  world: World;
  /** The split's pooled corpus: every passage of its world. Search over this by default. */
  corpus: Passage[];
  tasks: QaTask[];
}

export interface SyntheticDataset {
  config: SyntheticConfig;
  train: SyntheticSplit;
  test: SyntheticSplit;
}

/** Generates train and test splits from one seed: two worlds with disjoint names. */
export function generateSyntheticDataset(options: Partial<SyntheticConfig> = {}): SyntheticDataset {
  const config: SyntheticConfig = { ...DEFAULT_SYNTHETIC_CONFIG, ...options };
  if (!(config.nameOverlap >= 0 && config.nameOverlap <= 0.9))
    throw new Error('nameOverlap must be in [0, 0.9]');
  for (const key of ['trainSize', 'testSize'] as const) {
    if (!Number.isInteger(config[key]) || config[key] < 0)
      throw new Error(`${key} must be a non-negative integer`);
  }
  if (!Number.isInteger(config.distractorsPerQuestion) || config.distractorsPerQuestion < 0) {
    throw new Error('distractorsPerQuestion must be a non-negative integer');
  }
  const rng = createRng(config.seed);
  const registry = new NameRegistry();
  const makeSplit = (name: 'train' | 'test', size: number): SyntheticSplit => {
    const world = generateWorld(
      rng.fork(`${name}-world`),
      registry,
      name,
      config.worldSize,
      config.nameOverlap,
    );
    const tasks = generateTasks(world, size, config, rng.fork(`${name}-questions`));
    return { name, world, corpus: world.passages, tasks };
  };
  return { config, train: makeSplit('train', config.trainSize), test: makeSplit('test', config.testSize) };
}

/** Poses `count` distinct questions about a world. */
export function generateTasks(world: World, count: number, config: SyntheticConfig, rng: Rng): QaTask[] {
  const view = new WorldView(world);
  const templates = TEMPLATES.filter((t) => config.types.includes(t.type) && config.hops.includes(t.hops));
  if (templates.length === 0) throw new Error('no question template matches the chosen types and hops');
  const types = [...new Set(templates.map((t) => t.type))];
  const tasks: QaTask[] = [];
  const seen = new Set<string>();
  let attempts = 0;
  while (tasks.length < count) {
    if (++attempts > count * 50 + 100) {
      throw new Error(`could only pose ${tasks.length} of ${count} distinct questions; enlarge the world`);
    }
    // Type first, then template: keeps the mix balanced across types whatever each type's template
    // count. A draw that violates a constraint is retried within the type, so constrained types (the
    // unique-bridge ones) are not crowded out.
    const type = rng.pick(types);
    const ofType = templates.filter((t) => t.type === type);
    let posed: Posed | null = null;
    let template = ofType[0];
    for (let retry = 0; retry < 20 && posed === null; retry++) {
      template = rng.pick(ofType);
      const candidate = template.pose(view, rng);
      if (candidate !== null && !seen.has(candidate.question)) posed = candidate;
    }
    if (posed === null) continue;
    seen.add(posed.question);
    const gold = posed.gold.map((id) => world.passages.find((p) => p.id === id)!);
    const distractors = pickDistractors(world, posed.gold, config.distractorsPerQuestion, rng);
    tasks.push({
      id: `${world.tag}-${tasks.length}`,
      source: 'synthetic',
      question: posed.question,
      answers: [posed.answer],
      passages: rng.shuffle([...gold, ...distractors]),
      supportingIds: [...new Set(posed.gold)],
      type: template.type,
      meta: { template: template.id, hops: template.hops, world: world.tag },
    });
  }
  return tasks;
}

/** Distractors for a question: passages whose titles share words with the gold titles first, then random. */
function pickDistractors(world: World, gold: readonly string[], n: number, rng: Rng): Passage[] {
  const goldSet = new Set(gold);
  const goldWords = new Set(
    world.passages.filter((p) => goldSet.has(p.id)).flatMap((p) => titleWords(p.title)),
  );
  const scored = rng
    .shuffle(world.passages.filter((p) => !goldSet.has(p.id)))
    .map((p) => ({ p, shared: titleWords(p.title).filter((w) => goldWords.has(w)).length }));
  scored.sort((a, b) => b.shared - a.shared); // stable: ties keep the shuffled order
  return scored.slice(0, n).map((s) => s.p);
}

// Words every other title has ("The", "of") would make any passage look like a near-miss.
const GENERIC_TITLE_WORDS = new Set(['the', 'of', 'at', 'port', 'falls']);

function titleWords(title: string): string[] {
  return title
    .toLowerCase()
    .split(' ')
    .filter((w) => !GENERIC_TITLE_WORDS.has(w));
}
