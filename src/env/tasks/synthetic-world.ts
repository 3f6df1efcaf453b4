/**
 * A seeded fictional world for multi-hop QA: countries, cities, people, organisations and works, linked by
 * relations (born in, studied at, founded, headquartered in, written / directed / recorded by, published /
 * produced / released by, city in country). Each entity has one encyclopedia-style passage.
 *
 * Names are invented from syllables and registered globally, so two worlds built with one NameRegistry
 * (the train and test splits) share no name: an answer learned on one split is useless on the other.
 * `nameOverlap` lets new names reuse words of existing ones ("Varn Press" next to "Varn Records"),
 * which makes retrieval return look-alike distractors.
 *
 * Passages are written from a small set of sentence patterns. `parseEntityPassage` reads them back; the
 * oracle policy uses it on search results, which is how it reads facts without seeing the hidden world.
 */
import type { Passage } from '../retrieval/bm25.ts';
import type { Rng } from '../rng.ts';

export type WorkKind = 'novel' | 'film' | 'album';
export type OrgKind = 'publisher' | 'studio' | 'label' | 'university';

export interface Country {
  kind: 'country';
  id: string;
  name: string;
  capital: string;
}
export interface City {
  kind: 'city';
  id: string;
  name: string;
  country: string;
  founded: number;
}
export interface Person {
  kind: 'person';
  id: string;
  name: string;
  born: number;
  birthplace: string;
  occupation: string;
  almaMater: string;
}
export interface Organisation {
  kind: 'organisation';
  id: string;
  name: string;
  orgKind: OrgKind;
  founded: number;
  founder: string;
  headquarters: string;
}
export interface Work {
  kind: 'work';
  id: string;
  name: string;
  workKind: WorkKind;
  year: number;
  creator: string;
  producer: string;
}
export type Entity = Country | City | Person | Organisation | Work;

export interface World {
  /** Prefix of every entity id in this world, e.g. 'train'. */
  tag: string;
  entities: Entity[];
  byId: Map<string, Entity>;
  /** One passage per entity; passage id = entity id, title = entity name. */
  passages: Passage[];
}

/** Entity counts of a world. More entities = more distractors in the pooled corpus. */
export interface WorldSize {
  countries: number;
  cities: number;
  /** People beyond those needed as creators and founders. */
  extraPeople: number;
  /** Organisations per kind (publisher, studio, label, university). */
  orgsPerKind: number;
  /** Works per kind (novel, film, album); each has its own creator. */
  worksPerKind: number;
}

export const DEFAULT_WORLD_SIZE: Readonly<WorldSize> = Object.freeze({
  countries: 6,
  cities: 24,
  extraPeople: 30,
  orgsPerKind: 8,
  worksPerKind: 20,
});

/** Wording per work kind, shared by passages, questions and the oracle. */
export const WORK_WORDS: Record<
  WorkKind,
  {
    creatorNoun: string;
    createdBy: string;
    producerNoun: string;
    producedBy: string;
    occupation: string;
    orgKind: OrgKind;
  }
> = {
  novel: {
    creatorNoun: 'author',
    createdBy: 'written by',
    producerNoun: 'publisher',
    producedBy: 'published by',
    occupation: 'novelist',
    orgKind: 'publisher',
  },
  film: {
    creatorNoun: 'director',
    createdBy: 'directed by',
    producerNoun: 'studio',
    producedBy: 'produced by',
    occupation: 'film director',
    orgKind: 'studio',
  },
  album: {
    creatorNoun: 'artist',
    createdBy: 'recorded by',
    producerNoun: 'record label',
    producedBy: 'released by',
    occupation: 'singer',
    orgKind: 'label',
  },
};

export const ORG_PHRASE: Record<OrgKind, string> = {
  publisher: 'publishing house',
  studio: 'film studio',
  label: 'record label',
  university: 'university',
};

const OTHER_OCCUPATIONS = [
  'painter',
  'architect',
  'chemist',
  'botanist',
  'engineer',
  'diplomat',
  'sculptor',
  'economist',
];
const CITY_SIZES = ['small', 'large', 'coastal', 'mountain', 'river'];

// ---------------------------------------------------------------------------------------------------
// Names

// Syllables kept simple so names stay pronounceable ("Talrin", "Moravel"), yet unlike English words.
const ONSETS = [
  'b',
  'br',
  'c',
  'd',
  'dr',
  'f',
  'g',
  'h',
  'j',
  'k',
  'l',
  'm',
  'n',
  'p',
  'r',
  's',
  't',
  'v',
  'w',
  'z',
];
const ONSETS_2 = ['st', 'tr', 'th', 'sh', 'gr', 'kr', 'fl'];
const VOWELS = ['a', 'e', 'i', 'o', 'u', 'a', 'e', 'o', 'ai', 'ei', 'ou', 'ia'];
const CODAS = ['', '', '', '', 'n', 'r', 'l', 's', 'th', 'nd', 'rn', 'm', 'x', 'v'];
const ALL_ONSETS = [...ONSETS, ...ONSETS, ...ONSETS_2];

/** Names and name words already used, across every world built with this registry. */
export class NameRegistry {
  private readonly names = new Set<string>();
  private readonly words = new Set<string>();

  /** Reserves a full name; false when it (case-insensitively) exists. */
  claim(name: string): boolean {
    const key = name.toLowerCase();
    if (this.names.has(key)) return false;
    this.names.add(key);
    for (const w of key.split(' ')) this.words.add(w);
    return true;
  }

  has(name: string): boolean {
    return this.names.has(name.toLowerCase());
  }

  /** A new invented word, never used before in any name. */
  freshWord(rng: Rng, syllables: number): string {
    for (let attempt = 0; attempt < 1000; attempt++) {
      let word = '';
      for (let s = 0; s < syllables; s++) word += rng.pick(ALL_ONSETS) + rng.pick(VOWELS) + rng.pick(CODAS);
      if (word.length < 4 || word.length > 9 || /(.)\1/.test(word)) continue;
      if (this.words.has(word)) continue;
      this.words.add(word);
      return word[0].toUpperCase() + word.slice(1);
    }
    throw new Error('NameRegistry: could not invent a fresh word');
  }
}

/** Invents a unique name from parts; reuses earlier words with probability `overlap`. */
function uniqueName(
  rng: Rng,
  registry: NameRegistry,
  build: (word: (pool: string[], syllables: number) => string) => string,
  overlap: number,
): string {
  for (let attempt = 0; attempt < 200; attempt++) {
    const used: { pool: string[]; word: string }[] = [];
    const word = (pool: string[], syllables: number): string => {
      const w = pool.length > 0 && rng.chance(overlap) ? rng.pick(pool) : registry.freshWord(rng, syllables);
      used.push({ pool, word: w });
      return w;
    };
    const name = build(word);
    if (registry.claim(name)) {
      for (const u of used) if (!u.pool.includes(u.word)) u.pool.push(u.word);
      return name;
    }
  }
  throw new Error('could not find a unique name; lower nameOverlap');
}

// ---------------------------------------------------------------------------------------------------
// World generation

/** Builds a world. Entity ids are `${tag}:${kind}:${n}`. */
export function generateWorld(
  rng: Rng,
  registry: NameRegistry,
  tag: string,
  size: WorldSize = DEFAULT_WORLD_SIZE,
  nameOverlap = 0.3,
): World {
  if (
    size.countries < 1 ||
    size.cities < Math.max(2, size.countries) ||
    size.orgsPerKind < 2 ||
    size.worksPerKind < 2
  ) {
    throw new Error(
      'world size too small: need ≥1 country, ≥2 cities and at least one per country (its capital), ' +
        '≥2 organisations and works per kind',
    );
  }
  const pools = {
    first: [] as string[],
    last: [] as string[],
    place: [] as string[],
    org: [] as string[],
    title: [] as string[],
  };
  const entities: Entity[] = [];
  let counter = 0;
  const nextId = (kind: string) => `${tag}:${kind}:${counter++}`;

  const countries: Country[] = [];
  for (let i = 0; i < size.countries; i++) {
    const name = uniqueName(
      rng,
      registry,
      (w) => w(pools.place, 2) + rng.pick(['ia', 'land', 'ora', 'eth', 'mar']),
      0,
    );
    countries.push({ kind: 'country', id: nextId('country'), name, capital: '' });
  }

  const cities: City[] = [];
  for (let i = 0; i < size.cities; i++) {
    const name = uniqueName(
      rng,
      registry,
      (w) => {
        const root = w(pools.place, 2);
        return rng.pick([root, root, `Port ${root}`, `${root}ford`, `${root} Falls`, `${root}haven`]);
      },
      nameOverlap,
    );
    // The first cities cover every country once so that each country has a capital.
    const country = i < countries.length ? countries[i] : rng.pick(countries);
    cities.push({ kind: 'city', id: nextId('city'), name, country: country.id, founded: rng.int(900, 1850) });
    if (country.capital === '') country.capital = cities[cities.length - 1].id;
  }

  const newPerson = (born: number, occupation: string): Person => {
    const name = uniqueName(
      rng,
      registry,
      (w) => `${w(pools.first, 2)} ${w(pools.last, rng.int(2, 3))}`,
      nameOverlap,
    );
    return {
      kind: 'person',
      id: nextId('person'),
      name,
      born,
      birthplace: rng.pick(cities).id,
      occupation,
      almaMater: '',
    };
  };
  const people: Person[] = [];

  // Organisations, each with a founder born 25–55 years before the founding.
  const orgs: Organisation[] = [];
  const orgKinds: OrgKind[] = ['university', 'publisher', 'studio', 'label'];
  for (const orgKind of orgKinds) {
    for (let i = 0; i < size.orgsPerKind; i++) {
      const founded = orgKind === 'university' ? rng.int(1650, 1900) : rng.int(1860, 1990);
      const founder = newPerson(founded - rng.int(25, 55), rng.pick(OTHER_OCCUPATIONS));
      people.push(founder);
      const name = uniqueName(rng, registry, (w) => orgName(rng, orgKind, w(pools.org, 2)), nameOverlap);
      orgs.push({
        kind: 'organisation',
        id: nextId(orgKind),
        name,
        orgKind,
        founded,
        founder: founder.id,
        headquarters: rng.pick(cities).id,
      });
    }
  }
  const universities = orgs.filter((o) => o.orgKind === 'university');

  // Works, each with its own creator (so "the novel written by X" names one work).
  const works: Work[] = [];
  for (const workKind of ['novel', 'film', 'album'] as WorkKind[]) {
    const words = WORK_WORDS[workKind];
    const producers = orgs.filter((o) => o.orgKind === words.orgKind);
    for (let i = 0; i < size.worksPerKind; i++) {
      const producer = rng.pick(producers);
      const year = rng.int(Math.max(producer.founded + 1, 1900), 2023);
      const creator = newPerson(year - rng.int(22, 60), words.occupation);
      people.push(creator);
      const name = uniqueName(rng, registry, (w) => workTitle(rng, workKind, w(pools.title, 2)), nameOverlap);
      works.push({
        kind: 'work',
        id: nextId(workKind),
        name,
        workKind,
        year,
        creator: creator.id,
        producer: producer.id,
      });
    }
  }
  for (let i = 0; i < size.extraPeople; i++)
    people.push(newPerson(rng.int(1800, 2000), rng.pick(OTHER_OCCUPATIONS)));

  // Alma maters: a university founded before the person turned 18 when one exists, else the oldest.
  const byAge = universities.slice().sort((a, b) => a.founded - b.founded);
  for (const p of people) {
    const open = byAge.filter((u) => u.founded <= p.born + 18 && u.founder !== p.id);
    p.almaMater = (open.length > 0 ? rng.pick(open) : (byAge.find((u) => u.founder !== p.id) ?? byAge[0])).id;
  }

  entities.push(...countries, ...cities, ...people, ...orgs, ...works);
  const byId = new Map<string, Entity>(entities.map((e) => [e.id, e]));
  const passages = entities.map((e) => ({ id: e.id, title: e.name, text: writePassage(rng, e, byId) }));
  return { tag, entities, byId, passages };
}

function orgName(rng: Rng, kind: OrgKind, root: string): string {
  switch (kind) {
    case 'publisher':
      return `${root} ${rng.pick(['Press', 'Books', 'House'])}`;
    case 'studio':
      return `${root} ${rng.pick(['Pictures', 'Studios', 'Films'])}`;
    case 'label':
      return `${root} ${rng.pick(['Records', 'Music', 'Sound'])}`;
    case 'university':
      return `${root} ${rng.pick(['University', 'College', 'Institute'])}`;
  }
}

const TITLE_NOUNS = [
  'Letters',
  'Harbour',
  'Garden',
  'Winter',
  'Machine',
  'Lantern',
  'Orchard',
  'Tide',
  'Mirror',
  'Crossing',
];

function workTitle(rng: Rng, kind: WorkKind, root: string): string {
  const noun = rng.pick(TITLE_NOUNS);
  if (kind === 'novel') return rng.pick([`The ${root} ${noun}`, `${noun} of ${root}`]);
  if (kind === 'film') return rng.pick([`${root} ${noun}`, `The ${noun} at ${root}`]);
  return rng.pick([`${root}`, `${noun}s of ${root}`, `${root} ${noun}`]);
}

// ---------------------------------------------------------------------------------------------------
// Passages: written from sentence patterns, read back by parseEntityPassage.

/** Fields a passage states, by name (entity references are names, not ids). */
export type Facts = Record<string, string>;

/**
 * Sentence patterns, grouped: a passage uses one pattern of every group of its kind. `{N}` is the
 * entity's own name; the other `{slot}`s are fields. The `identity` group names the entity and so tells
 * a reader what kind of passage it is. Every pattern is one sentence ending in '.', and no name contains
 * '.', so passages split into sentences unambiguously.
 */
interface PatternGroup {
  kind: Entity['kind'];
  identity: boolean;
  templates: string[];
}

const PATTERN_GROUPS: PatternGroup[] = [
  {
    kind: 'country',
    identity: true,
    templates: ['{N} is a country whose capital is {capital}.', 'The capital of {N} is {capital}.'],
  },
  {
    kind: 'city',
    identity: true,
    templates: ['{N} is a city in {country}.', '{N} is a {size} city in {country}.'],
  },
  {
    kind: 'city',
    identity: false,
    templates: ['It was founded in {founded}.', 'The city was founded in {founded}.'],
  },
  {
    kind: 'person',
    identity: true,
    templates: [
      '{N} is a {occupation} born in {birthplace} in {born}.',
      '{N} (born {born} in {birthplace}) is a {occupation}.',
      'Born in {birthplace} in {born}, {N} worked as a {occupation}.',
    ],
  },
  {
    kind: 'person',
    identity: true,
    templates: [
      '{N} studied at {almaMater}.',
      '{N} is a graduate of {almaMater}.',
      '{N} was educated at {almaMater}.',
    ],
  },
  {
    kind: 'organisation',
    identity: true,
    templates: [
      '{N} is a {orgKind} founded in {founded} by {founder}.',
      'Founded by {founder} in {founded}, {N} is a {orgKind}.',
    ],
  },
  {
    kind: 'organisation',
    identity: false,
    templates: ['It is headquartered in {headquarters}.', 'Its headquarters are in {headquarters}.'],
  },
  {
    kind: 'work',
    identity: true,
    templates: [
      '{N} is a {year} {workKind} {createdBy} {creator}.',
      '{N} is a {workKind} {createdBy} {creator} that appeared in {year}.',
      '{CreatedBy} {creator}, the {workKind} {N} appeared in {year}.',
    ],
  },
  {
    kind: 'work',
    identity: false,
    templates: ['It was {producedBy} {producer}.', 'The work was {producedBy} {producer}.'],
  },
];

// Sentences that state nothing checkable; they make passages less uniform and BM25 less trivial.
const FILLERS: Record<Entity['kind'], string[]> = {
  country: ['Its economy rests on fishing and trade.', 'It has a long tradition of choral music.'],
  city: ['The city is known for its covered markets.', 'A tram line links the old town to the harbour.'],
  person: ['Critics describe the work as quietly ambitious.', 'Several biographies have been written since.'],
  organisation: ['Its archives are open to researchers.', 'It employs several hundred people.'],
  work: ['It received mixed reviews on release.', 'It was later translated into several languages.'],
};

// Slots with a closed vocabulary match only that vocabulary, so one kind's sentence can never be read
// as another kind's ("It was founded in 1900." is not "It was {producedBy} {producer}.").
const SLOT_VOCABULARY: Record<string, readonly string[]> = {
  size: CITY_SIZES,
  occupation: [...OTHER_OCCUPATIONS, ...Object.values(WORK_WORDS).map((w) => w.occupation)],
  orgKind: Object.values(ORG_PHRASE),
  workKind: Object.keys(WORK_WORDS),
  createdBy: Object.values(WORK_WORDS).map((w) => w.createdBy),
  CreatedBy: Object.values(WORK_WORDS).map((w) => capitalise(w.createdBy)),
  producedBy: Object.values(WORK_WORDS).map((w) => w.producedBy),
};
const YEAR_SLOTS = new Set(['year', 'born', 'founded']);

function capitalise(text: string): string {
  return text[0].toUpperCase() + text.slice(1);
}

function fill(template: string, name: string, values: Facts): string {
  return template.replace(/\{(\w+)\}/g, (_, slot: string) => (slot === 'N' ? name : values[slot]));
}

function writePassage(rng: Rng, e: Entity, byId: Map<string, Entity>): string {
  const name = (id: string) => byId.get(id)?.name ?? '';
  let values: Facts;
  switch (e.kind) {
    case 'country':
      values = { capital: name(e.capital) };
      break;
    case 'city':
      values = { country: name(e.country), founded: String(e.founded), size: rng.pick(CITY_SIZES) };
      break;
    case 'person':
      values = {
        occupation: e.occupation,
        birthplace: name(e.birthplace),
        born: String(e.born),
        almaMater: name(e.almaMater),
      };
      break;
    case 'organisation':
      values = {
        orgKind: ORG_PHRASE[e.orgKind],
        founded: String(e.founded),
        founder: name(e.founder),
        headquarters: name(e.headquarters),
      };
      break;
    case 'work': {
      const words = WORK_WORDS[e.workKind];
      values = {
        year: String(e.year),
        workKind: e.workKind,
        createdBy: words.createdBy,
        CreatedBy: capitalise(words.createdBy),
        creator: name(e.creator),
        producedBy: words.producedBy,
        producer: name(e.producer),
      };
      break;
    }
  }
  const sentences = PATTERN_GROUPS.filter((g) => g.kind === e.kind).map((g) =>
    fill(rng.pick(g.templates), e.name, values),
  );
  if (rng.chance(0.7)) sentences.splice(rng.int(1, sentences.length), 0, rng.pick(FILLERS[e.kind]));
  return sentences.join(' ');
}

interface CompiledPattern {
  kind: Entity['kind'];
  identity: boolean;
  regex: RegExp;
  /** Slot name of each capture group, 'N' included. */
  slots: string[];
}

const COMPILED: CompiledPattern[] = PATTERN_GROUPS.flatMap((g) =>
  g.templates.map((template) => {
    const slots: string[] = [];
    const source = template
      .split(/(\{\w+\})/)
      .map((part) => {
        const slot = /^\{(\w+)\}$/.exec(part)?.[1];
        if (slot === undefined) return escapeRegExp(part);
        slots.push(slot);
        if (YEAR_SLOTS.has(slot)) return '(\\d{3,4})';
        const vocabulary = SLOT_VOCABULARY[slot];
        return vocabulary ? `(${vocabulary.map(escapeRegExp).join('|')})` : '(.+?)';
      })
      .join('');
    return { kind: g.kind, identity: g.identity, regex: new RegExp(`^${source}$`), slots };
  }),
);

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export interface ParsedPassage {
  kind: Entity['kind'];
  facts: Facts;
}

/**
 * Reads the facts of a synthetic passage given its title (the entity's name). The kind comes from an
 * identity sentence naming the title; facts from that kind's sentences. Returns null when no identity
 * sentence matches (a passage from another corpus, or one cut short by truncation).
 */
export function parseEntityPassage(title: string, text: string): ParsedPassage | null {
  const sentences = text
    .replace(/…$/, '')
    .split(/(?<=\.)\s+/)
    .map((s) => s.trim());
  let kind: Entity['kind'] | null = null;
  const factsByKind = new Map<Entity['kind'], Facts>();
  for (const sentence of sentences) {
    for (const pattern of COMPILED) {
      const m = pattern.regex.exec(sentence);
      if (!m) continue;
      const values: Facts = {};
      pattern.slots.forEach((slot, i) => {
        values[slot] = m[i + 1];
      });
      if (values.N !== undefined && values.N !== title) continue; // a sentence about another entity
      if (pattern.identity && kind === null) kind = pattern.kind;
      delete values.N;
      if (values.CreatedBy !== undefined) {
        values.createdBy = values.CreatedBy.toLowerCase();
        delete values.CreatedBy;
      }
      factsByKind.set(pattern.kind, { ...factsByKind.get(pattern.kind), ...values });
    }
  }
  return kind === null ? null : { kind, facts: factsByKind.get(kind) ?? {} };
}
