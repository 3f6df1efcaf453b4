// npm run -s compare -- BASE.json OTHER.json [MORE.json ...]
// npm run -s compare -- --pairs BASE1.json OTHER1.json [BASE2.json OTHER2.json ...]
// npm run -s compare -- --differences D1 D2 [D3 ...]
// npm run -s compare -- --evidence BASE.json [OTHER.json ...]
// npm run -s compare -- --without-type yesno [any of the file modes above]
// Compares checkpoints evaluated on the same questions (`npm run train -- --evaluate-only --json F`,
// which lists each question's id, type, EM and F1): for each file after the first, its EM against the
// first's, the difference with its paired standard error, the questions only it / only the base gets
// right, and the exact sign test's p (src/rl/paired-eval.ts); then the same difference per question
// type. Prints a markdown table. docs/results.md quotes it where two runs' EM are compared.
// With --pairs, the files are pairs of one ablation (say with and without a mask, one pair per seed):
// each pair's row, then the pairs pooled question by question (the checkpoints' noise) and pair by
// pair (Student's t over the pairs' differences, which counts the seeds' spread; src/rl/paired-eval.ts).
// Each pair must share its questions; pairs on different question sets (one test world each) are
// averaged per question within their set and the sets put side by side, each question once. The
// pooled rows follow per question type (a pair whose questions have none of a type sits it out).
// With --differences, numbers instead of files: pairs' recorded EM differences in points (say −2.5
// −1.0 −1.3, from sessions whose replays are gone), read pair by pair as --pairs does (Student's t).
// With --evidence, what each episode's searches had found when it answered (src/rl/evidence.ts): per
// file the share of questions right (and right with every supporting passage found), unanswered, and
// answered wrongly with none, some (then stopped, or searched again in vain) or all of them found,
// overall and per type; what the fruitless last searches named and where the answers' words came from
// (where the files record them); then, for each file after the first, where the base's questions went
// (a table of counts, base outcome × other outcome).
// --without-type T (with any file mode, repeatable) leaves out the questions of type T before
// comparing, say the yes/no questions, whose answers an RL run can shift wholesale toward one word.
// --power-for E1,E2 (with --pairs or --differences) plans the next run: at the spread the pairs
// measured, how many pairs a paired t test (α 0.05) needs for 80 % power to find a difference of E1,
// E2, … EM points, the power these pairs have for each, and the difference they find with 80 % power.
// Bad input (a missing file, no per-question list, different questions) is one line and exit 2.
import { readFileSync } from 'node:fs';
import {
  ANSWER_SOURCES,
  type AnswerSource,
  EPISODE_OUTCOMES,
  type EpisodeOutcome,
  VAIN_SEARCH_KINDS,
  type VainSearchKind,
} from '../src/rl/evidence.ts';
import {
  detectableEffect,
  oneSampleT,
  pairedComparison,
  pairedTPower,
  pairsForPower,
  pooledPairedComparison,
} from '../src/rl/paired-eval.ts';
import { keepWorkingWhenStdoutCloses } from './closed-stdout.ts';

keepWorkingWhenStdoutCloses();

interface QuestionScore {
  id: string;
  type: string;
  em: number;
  f1: number;
  /** Present in files written since the thirty-ninth session (--evidence needs them). */
  evidence?: {
    outcome: EpisodeOutcome;
    supportingPassages: number;
    supportingRetrieved: number;
    /** What its last fruitless search asked for (src/rl/evidence.ts), when it had one. */
    vainSearch?: VainSearchKind;
    /** Where its answer's words came from (src/rl/evidence.ts); in files written since the forty-first session. */
    answerSource?: AnswerSource;
  };
}

const isOutcome = (x: unknown): x is EpisodeOutcome =>
  typeof x === 'string' && (EPISODE_OUTCOMES as readonly string[]).includes(x);

function fail(message: string): never {
  console.error(`compare: ${message}`);
  process.exit(2);
}

function readEval(file: string): { model: string; questions: QuestionScore[] } {
  let parsed: { model?: unknown; questions?: unknown };
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    fail(`cannot read ${file}: ${(e as Error).message}`);
  }
  const qs = parsed.questions;
  if (!Array.isArray(qs) || qs.length === 0)
    fail(
      `${file} has no per-question list ("questions"): write it with npm run train -- --evaluate-only --json`,
    );
  qs.forEach((q, i) => {
    if (typeof q?.id !== 'string' || typeof q?.em !== 'number' || typeof q?.f1 !== 'number')
      fail(`${file}: question ${i} lacks an id, em or f1`);
  });
  return {
    model: typeof parsed.model === 'string' ? parsed.model : file,
    questions: qs.map((q) => ({
      id: q.id,
      type: typeof q.type === 'string' ? q.type : 'untyped',
      em: q.em,
      f1: q.f1,
      ...(isOutcome(q.outcome) &&
      Number.isInteger(q.supportingPassages) &&
      Number.isInteger(q.supportingRetrieved)
        ? {
            evidence: {
              outcome: q.outcome,
              supportingPassages: q.supportingPassages,
              supportingRetrieved: q.supportingRetrieved,
              ...((VAIN_SEARCH_KINDS as readonly unknown[]).includes(q.vainSearch)
                ? { vainSearch: q.vainSearch as VainSearchKind }
                : {}),
              ...((ANSWER_SOURCES as readonly unknown[]).includes(q.answerSource)
                ? { answerSource: q.answerSource as AnswerSource }
                : {}),
            },
          }
        : {}),
    })),
  };
}

type Evaluation = { file: string } & ReturnType<typeof readEval>;
const pct = (x: number) => (100 * x).toFixed(1);
const sign = (x: number) => `${x >= 0 ? '+' : '−'}${pct(Math.abs(x))}`;
const OUTCOME_HEADERS: Record<EpisodeOutcome, string> = {
  right: 'right',
  no_answer: 'no answer',
  wrong_no_evidence: 'wrong, none found',
  wrong_stopped_short: 'wrong, some found, stopped',
  wrong_missed_hop: 'wrong, some found, searched again',
  wrong_all_evidence: 'wrong, all found',
  wrong_unknown: 'wrong, none named',
};

const NO_SPREAD_FOR_POWER = '--power-for needs at least two pairs that differ, to measure their spread';

const [args, powerFor] = takePowerFor(process.argv.slice(2));
// --differences reads numbers, the other modes read files.
if (args[0] === '--differences') printDifferences(args.slice(1), powerFor);
else {
  const [files, withoutTypes] = takeWithoutTypes(args);
  if (files[0] === '--differences')
    fail('--without-type leaves out questions of files, not of --differences');
  if (powerFor && files[0] !== '--pairs')
    fail('--power-for reads the spread between pairs: use it with --pairs or --differences');
  compareFiles(files, withoutTypes, powerFor);
}

/** Splits `--power-for E1,E2,…` (EM points, once, anywhere) off the other arguments. */
function takePowerFor(words: string[]): [string[], number[] | undefined] {
  const i = words.indexOf('--power-for');
  if (i < 0) return [words, undefined];
  const list = words[i + 1];
  const usage = '--power-for takes differences in EM points, comma-separated, say --power-for 1,1.5,2';
  if (list === undefined || list.startsWith('--')) fail(usage);
  const effects = list.split(',').map((w) => Number(w.trim().replace(/^\u2212/, '-')));
  if (effects.some((e) => !Number.isFinite(e) || e === 0) || list.trim() === '') fail(usage);
  const rest = [...words.slice(0, i), ...words.slice(i + 2)];
  if (rest.includes('--power-for')) fail('--power-for is given once, with a comma-separated list');
  return [rest, effects.map(Math.abs)];
}

/** The planning table of --power-for: pairs needed at this spread (sd, EM points) for each effect. */
function printPower(k: number, sd: number, effects: number[]): void {
  const pts = (x: number) => x.toFixed(2);
  console.log(
    `\nplanning (paired t, α 0.05, 80 % power, at these ${k} pairs' spread, sd ${pts(sd)} points; the spread is itself an estimate):\n`,
  );
  console.log(`| difference (EM points) | pairs for 80 % power | power of these ${k} pairs |`);
  console.log('|---|---|---|');
  for (const e of effects)
    console.log(`| ${pts(e)} | ${pairsForPower(e, sd)} | ${pairedTPower(k, e, sd).toFixed(2)} |`);
  console.log(
    `\nthese ${k} pairs find a difference of ${pts(detectableEffect(k, sd))} points with 80 % power`,
  );
}

/** Splits `--without-type T` (any number, anywhere) off the other arguments. */
function takeWithoutTypes(words: string[]): [string[], string[]] {
  const rest: string[] = [];
  const without: string[] = [];
  for (let i = 0; i < words.length; i++) {
    if (words[i] !== '--without-type') rest.push(words[i]);
    else if (i + 1 >= words.length || words[i + 1].startsWith('--'))
      fail('--without-type takes a question type, say --without-type yesno');
    else without.push(words[++i]);
  }
  return [rest, without];
}

/**
 * Fails unless b was played on a's questions: the same ids and the same type at every index. Ids alone
 * ("test-0", …) do not tell one test world from another; the types, drawn per question, almost always do.
 */
function checkSameQuestions(a: Evaluation, b: Evaluation): void {
  if (b.questions.length !== a.questions.length)
    fail(
      `${b.file} has ${b.questions.length} questions, ${a.file} ${a.questions.length}: evaluate both on the same ones`,
    );
  b.questions.forEach((q, i) => {
    const qa = a.questions[i];
    if (q.id !== qa.id || q.type !== qa.type)
      fail(
        `${b.file}: question ${i} is ${q.id} (${q.type}), in ${a.file} ${qa.id} (${qa.type}): not the same questions`,
      );
  });
}

/** Files with the same key were played on one question set (say one test world): ids and types in order. */
function questionSetKey(e: Evaluation): string {
  return e.questions.map((q) => `${q.id}:${q.type}`).join('\n');
}

function compareFiles(args: string[], withoutTypes: string[] = [], powerFor?: number[]): void {
  const pairsMode = args[0] === '--pairs';
  const evidenceMode = args[0] === '--evidence';
  const files = pairsMode || evidenceMode ? args.slice(1) : args;
  if (evidenceMode && files.length < 1) fail('--evidence takes one evaluation file or more');
  if (pairsMode ? files.length < 2 || files.length % 2 !== 0 : !evidenceMode && files.length < 2)
    fail(
      pairsMode
        ? `--pairs takes BASE OTHER files two by two, got ${files.length}`
        : 'usage: npm run -s compare -- BASE.json OTHER.json [MORE.json ...] (or --pairs B1 O1 [B2 O2 ...], --evidence F1 [F2 ...], or --differences D1 D2 [...]; --without-type T leaves out a question type)',
    );
  const all = files.map((f) => ({ file: f, ...readEval(f) }));
  const [base, ...others] = all;
  // Every file is checked before anything is printed: a bad one gives one line, not half a table.
  // With --pairs each pair is checked within itself: pairs may be played on different question sets
  // (say one test world each), which the pooling below then treats as distinct questions.
  const pairs = pairsMode
    ? Array.from({ length: all.length / 2 }, (_, j) => ({ a: all[2 * j], b: all[2 * j + 1] }))
    : others.map((o) => ({ a: base, b: o }));
  for (const { a, b } of pairs) checkSameQuestions(a, b);
  if (withoutTypes.length > 0) {
    // A lone file (--evidence F) is its own base.
    const bases = pairs.length > 0 ? [...new Set(pairs.map((p) => p.a))] : [base];
    const known = new Set(bases.flatMap((e) => e.questions.map((q) => q.type)));
    for (const t of withoutTypes)
      if (!known.has(t))
        fail(
          `--without-type ${t}: ${bases.map((e) => e.file).join(', ')} ${bases.length > 1 ? 'have' : 'has'} no question of that type (types: ${[...known].join(', ')})`,
        );
    // Each file keeps the questions its own base keeps (the same indices within a pair).
    const keptBy = new Map(
      bases.map((e) => [e, e.questions.flatMap((q, i) => (withoutTypes.includes(q.type) ? [] : [i]))]),
    );
    if ([...keptBy.values()].some((kept) => kept.length === 0))
      fail(`--without-type ${withoutTypes.join(', ')} leaves no question to compare`);
    const filtered = new Map(
      all.map((e) => {
        const kept = keptBy.get(pairs.find((p) => p.a === e || p.b === e)?.a ?? base) ?? [];
        return [e, kept.map((i) => e.questions[i])];
      }),
    );
    for (const e of all) e.questions = filtered.get(e) ?? e.questions;
    // Distinct questions: bases on one question set (the same file given for every pair) count once.
    const sets = new Map(bases.map((e) => [questionSetKey(e), e]));
    const left = [...sets.values()].reduce((s, e) => s + e.questions.length, 0);
    console.log(`without the questions of type ${withoutTypes.join(', ')}: ${left} questions left\n`);
  }
  if (pairsMode) {
    printPairs([base, ...others], powerFor);
    return;
  }
  if (evidenceMode) {
    printEvidence([base, ...others]);
    return;
  }
  const types = [...new Set(base.questions.map((q) => q.type))];
  console.log(`base: ${base.model} (${base.questions.length} questions)\n`);
  console.log(
    `| model | EM | Δ EM ± paired SE | only it right / only base right | sign test p | ${types.map((t) => `Δ ${t}`).join(' | ')} |`,
  );
  console.log(`|---|---|---|---|---|${types.map(() => '---|').join('')}`);
  const baseEm = base.questions.reduce((sum, q) => sum + q.em, 0) / base.questions.length;
  console.log(`| ${base.model} | ${pct(baseEm)} | – | – | – | ${types.map(() => '–').join(' | ')} |`);
  for (const o of others) {
    const c = pairedComparison(
      base.questions.map((q) => q.em),
      o.questions.map((q) => q.em),
    );
    const byType = types.map((t) => {
      const idx = base.questions.flatMap((q, i) => (q.type === t ? [i] : []));
      const d = pairedComparison(
        idx.map((i) => base.questions[i].em),
        idx.map((i) => o.questions[i].em),
      );
      return `${sign(d.difference)} ± ${pct(d.pairedSe)}`;
    });
    console.log(
      `| ${o.model} | ${pct(c.otherMean)} | ${sign(c.difference)} ± ${pct(c.pairedSe)} | ${c.better} / ${c.worse} | ${c.signTestP.toPrecision(2)} | ${byType.join(' | ')} |`,
    );
  }
}

function printPairs(all: Evaluation[], powerFor?: number[]): void {
  const pairs = Array.from({ length: all.length / 2 }, (_, j) => ({ a: all[2 * j], b: all[2 * j + 1] }));
  // Pairs whose bases list the same ids and types share a question set (say one test world).
  const setKeys = pairs.map(({ a }) => questionSetKey(a));
  const questionSets = setKeys.map((key) => setKeys.indexOf(key));
  const sameQuestions = questionSets.every((set) => set === 0);
  const c = pooledPairedComparison(
    pairs.map(({ a, b }) => ({ base: a.questions.map((q) => q.em), other: b.questions.map((q) => q.em) })),
    { questionSets },
  );
  // Checked before anything is printed, like every other bad input.
  if (powerFor && (!c.pairLevel || c.pairLevel.se === 0)) fail(NO_SPREAD_FOR_POWER);
  console.log(
    sameQuestions
      ? `${c.k} pairs on the same ${c.n} questions; Δ = the second of each pair − the first\n`
      : `${c.k} pairs on ${new Set(questionSets).size} different question sets, ${c.n} questions in all (pairs on one set averaged per question); Δ = the second of each pair − the first\n`,
  );
  console.log('| pair | EM | Δ EM ± paired SE | only second right / only first right | sign test p |');
  console.log('|---|---|---|---|---|');
  c.pairs.forEach((p, j) => {
    console.log(
      `| ${pairs[j].b.model} vs ${pairs[j].a.model} | ${pct(p.otherMean)} vs ${pct(p.baseMean)} | ${sign(p.difference)} ± ${pct(p.pairedSe)} | ${p.better} / ${p.worse} | ${p.signTestP.toPrecision(2)} |`,
    );
  });
  const q = c.questionLevel;
  console.log(
    `| pooled, question by question (checkpoint noise) | | ${sign(q.difference)} ± ${pct(q.se)} | ${q.better} / ${q.worse} (net per question) | ${q.signTestP.toPrecision(2)} |`,
  );
  const pl = c.pairLevel;
  console.log(
    pl && pl.se === 0
      ? `| pooled, pair by pair | | ${sign(pl.mean)} in every pair | – (no spread between the pairs: no t test) | |`
      : pl
        ? `| pooled, pair by pair (seed noise: t ${pl.t < 0 ? '−' : ''}${Math.abs(pl.t).toFixed(2)}, ${pl.df} df) | | ${sign(pl.mean)} ± ${pct(pl.se)} | ${c.pairs.filter((p) => p.difference > 0).length} up / ${c.pairs.filter((p) => p.difference < 0).length} down of ${c.k} pairs | ${pl.p.toPrecision(2)} (t test) |`
        : '| pooled, pair by pair | | – (one pair: no spread between pairs) | | |',
  );
  printPairsByType(pairs, questionSets);
  if (powerFor && pl) printPower(c.k, 100 * pl.se * Math.sqrt(c.k), powerFor);
}

/**
 * The pooled rows of --pairs again for each question type: every pair on its own questions of that type
 * (a pair whose set has none sits that type out), question by question and pair by pair.
 */
function printPairsByType(
  pairs: ReadonlyArray<{ a: Evaluation; b: Evaluation }>,
  questionSets: readonly number[],
): void {
  const types = [...new Set(pairs.flatMap(({ a }) => a.questions.map((q) => q.type)))];
  if (types.length < 2) return;
  console.log('\nby question type, pooled as above over the pairs that have questions of the type\n');
  console.log(
    '| type | questions | pairs | Δ EM ± SE, question by question | better / worse | sign test p | Δ EM ± SE, pair by pair | t test p |',
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const t of types) {
    const members = pairs.flatMap(({ a, b }, j) => {
      const idx = a.questions.flatMap((q, i) => (q.type === t ? [i] : []));
      if (idx.length === 0) return [];
      const em = (e: Evaluation) => idx.map((i) => e.questions[i].em);
      return [{ set: questionSets[j], base: em(a), other: em(b) }];
    });
    const c = pooledPairedComparison(members, { questionSets: members.map((m) => m.set) });
    const q = c.questionLevel;
    const pl = c.pairLevel;
    const pairCells = !pl
      ? '– (one pair) | |'
      : pl.se === 0
        ? `${sign(pl.mean)} in every pair | – |`
        : `${sign(pl.mean)} ± ${pct(pl.se)} | ${pl.p.toPrecision(2)} |`;
    console.log(
      `| ${t} | ${c.n} | ${c.k} | ${sign(q.difference)} ± ${pct(q.se)} | ${q.better} / ${q.worse} | ${q.signTestP.toPrecision(2)} | ${pairCells}`,
    );
  }
}

function printEvidence(all: Evaluation[]): void {
  for (const e of all) {
    const i = e.questions.findIndex((q) => q.evidence === undefined);
    if (i >= 0)
      fail(
        `${e.file}: question ${i} has no outcome or supporting-passage counts: write the file again with npm run train -- --evaluate-only --json`,
      );
  }
  const evidence = (q: QuestionScore) => q.evidence as NonNullable<QuestionScore['evidence']>;
  // 'wrong_unknown' only where some task names no supporting passage (not the synthetic task).
  const outcomes = EPISODE_OUTCOMES.filter(
    (o) => o !== 'wrong_unknown' || all.some((e) => e.questions.some((q) => evidence(q).outcome === o)),
  );
  const allFound = (q: QuestionScore) =>
    evidence(q).supportingPassages > 0 && evidence(q).supportingRetrieved === evidence(q).supportingPassages;
  const row = (qs: QuestionScore[]) => {
    const shares = outcomes.map((o) => pct(qs.filter((q) => evidence(q).outcome === o).length / qs.length));
    // Right answers given with every supporting passage in the context: the rest were right without
    // the evidence (a yes/no or a guess that happened to match).
    const rightWithAll = pct(
      qs.filter((q) => evidence(q).outcome === 'right' && allFound(q)).length / qs.length,
    );
    const named = qs.filter((q) => evidence(q).supportingPassages > 0);
    const recall =
      named.reduce((sum, q) => sum + evidence(q).supportingRetrieved / evidence(q).supportingPassages, 0) /
      Math.max(1, named.length);
    return `${shares[0]} | ${rightWithAll} | ${shares.slice(1).join(' | ')} | ${named.length ? pct(recall) : '–'} |`;
  };
  // outcomes[0] is 'right'.
  const header = `right | right, all found | ${outcomes
    .slice(1)
    .map((o) => OUTCOME_HEADERS[o])
    .join(' | ')} | supporting passages found |`;
  const rule = `${outcomes.map(() => '---|').join('')}---|---|`;
  console.log(
    `${all[0].questions.length} questions; % of questions by outcome ("found": the supporting passages the episode's searches returned)\n`,
  );
  console.log(`| model | ${header}`);
  console.log(`|---|${rule}`);
  for (const e of all) console.log(`| ${e.model} | ${row(e.questions)}`);
  const types = [...new Set(all[0].questions.map((q) => q.type))];
  console.log(`\n| model · type | n | ${header}`);
  console.log(`|---|---|${rule}`);
  for (const t of types)
    for (const e of all) {
      const qs = e.questions.filter((q) => q.type === t);
      console.log(`| ${e.model} · ${t} | ${qs.length} | ${row(qs)}`);
    }
  // What the fruitless searches asked for, where the file records it (written since the thirty-ninth session).
  if (all.some((e) => e.questions.some((q) => evidence(q).vainSearch !== undefined))) {
    const kindHeaders: Record<VainSearchKind, string> = {
      names_missing: 'a missing passage',
      names_found: 'a passage already found',
      names_other: 'another passage',
      invented_name: 'no passage (invented name)',
      no_query: 'no query',
    };
    console.log(
      '\nwrong answers after a fruitless last search (some or none found), by the title that search named: of a supporting passage still missing, of one already found, of another passage, or of none\n',
    );
    console.log(`| model | such answers | ${VAIN_SEARCH_KINDS.map((k) => kindHeaders[k]).join(' | ')} |`);
    console.log(`|---|---|${VAIN_SEARCH_KINDS.map(() => '---|').join('')}`);
    for (const e of all) {
      const vain = e.questions.filter(
        (q) =>
          (evidence(q).outcome === 'wrong_missed_hop' || evidence(q).outcome === 'wrong_no_evidence') &&
          evidence(q).vainSearch !== undefined,
      );
      const counts = VAIN_SEARCH_KINDS.map((k) => vain.filter((q) => evidence(q).vainSearch === k).length);
      console.log(
        `| ${e.model} | ${vain.length} | ${counts.map((c) => `${c} (${pct(c / Math.max(1, vain.length))} %)`).join(' | ')} |`,
      );
    }
  }
  // Where the answers' words came from, where the file records it (written since the forty-first session).
  if (all.some((e) => e.questions.some((q) => evidence(q).answerSource !== undefined))) {
    const sourceHeaders: Record<AnswerSource, string> = {
      no_answer: 'no answer',
      yes_no: 'yes / no',
      from_question: 'from the question',
      from_results: 'from the results read',
      nowhere: 'in nothing read',
    };
    console.log(
      '\nwhere the answers came from: questions (of them right), by type; "in nothing read": words in neither the question nor a tool result the episode read (a name miscopied or blended)\n',
    );
    console.log(`| model · type | n | ${ANSWER_SOURCES.map((k) => sourceHeaders[k]).join(' | ')} |`);
    console.log(`|---|---|${ANSWER_SOURCES.map(() => '---|').join('')}`);
    for (const t of ['all', ...types])
      for (const e of all) {
        const qs = e.questions.filter(
          (q) => evidence(q).answerSource !== undefined && (t === 'all' || q.type === t),
        );
        if (qs.length === 0) continue;
        const cells = ANSWER_SOURCES.map((k) => {
          const of = qs.filter((q) => evidence(q).answerSource === k);
          return `${of.length} (${of.filter((q) => q.em >= 1).length})`;
        });
        console.log(`| ${e.model} · ${t} | ${qs.length} | ${cells.join(' | ')} |`);
      }
  }
  const [base, ...others] = all;
  for (const o of others) {
    console.log(`\nquestions by outcome: ${base.model} (rows) → ${o.model} (columns)\n`);
    console.log(`| ${base.model} ↓ | ${outcomes.map((x) => OUTCOME_HEADERS[x]).join(' | ')} | total |`);
    console.log(`|---|${outcomes.map(() => '---|').join('')}---|`);
    for (const from of outcomes) {
      const idx = base.questions.flatMap((q, i) => (evidence(q).outcome === from ? [i] : []));
      const counts = outcomes.map((to) => idx.filter((i) => evidence(o.questions[i]).outcome === to).length);
      console.log(`| ${OUTCOME_HEADERS[from]} | ${counts.join(' | ')} | ${idx.length} |`);
    }
  }
}

function printDifferences(words: string[], powerFor?: number[]): void {
  // The tables print a minus as U+2212; accept it as well as '-'.
  const diffs = words.map((w) => {
    const x = Number(w.replace(/^\u2212/, '-'));
    if (!Number.isFinite(x) || w.trim() === '')
      fail(`--differences takes numbers (EM points), got ${JSON.stringify(w)}`);
    return x;
  });
  if (diffs.length < 2)
    fail(`--differences needs at least 2 differences (one per pair), got ${diffs.length}`);
  const r = oneSampleT(diffs);
  if (powerFor && r.se === 0) fail(NO_SPREAD_FOR_POWER);
  const pts = (x: number) => `${x >= 0 ? '+' : '−'}${Math.abs(x).toFixed(2)}`;
  console.log(`${diffs.length} recorded pair differences (EM points): ${diffs.map(pts).join(', ')}\n`);
  console.log('| pooled, pair by pair | Δ EM ± SE | up / down | t test p |');
  console.log('|---|---|---|---|');
  if (r.se === 0) {
    console.log(`| no spread between the pairs: no t test | ${pts(r.mean)} in every pair | | |`);
    return;
  }
  console.log(
    `| seed noise: t ${r.t < 0 ? '−' : ''}${Math.abs(r.t).toFixed(2)}, ${r.df} df | ${pts(r.mean)} ± ${r.se.toFixed(2)} | ${diffs.filter((d) => d > 0).length} up / ${diffs.filter((d) => d < 0).length} down | ${r.p.toPrecision(2)} |`,
  );
  if (powerFor) printPower(diffs.length, r.se * Math.sqrt(diffs.length), powerFor);
}
