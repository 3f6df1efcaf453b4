// The part of vitest's API that tests/gpu uses, so the kernel tests run on the device machine, which
// has no package registry and no node_modules (scripts/device/build.mjs bundles each test file with
// `vitest` aliased to this module). `expect` is vitest's own (@vitest/expect on chai, set up the way
// vitest sets it up), so every matcher behaves as it does under vitest. The runner is sequential,
// like vitest.config.ts (one file at a time, tests in order), with vitest's hook order:
// beforeAll / afterAll per suite, beforeEach / afterEach from the outer suites inwards.
import {
  chai,
  GLOBAL_EXPECT,
  JestAsymmetricMatchers,
  JestChaiExpect,
  JestExtend,
  setState,
} from '@vitest/expect';

chai.use(JestExtend);
chai.use(JestChaiExpect);
chai.use(JestAsymmetricMatchers);

type Fn = () => unknown;

interface TestCase {
  name: string;
  fn: Fn;
}

interface Suite {
  name: string;
  parent: Suite | null;
  children: Array<Suite | TestCase>;
  beforeAll: Fn[];
  afterAll: Fn[];
  beforeEach: Fn[];
  afterEach: Fn[];
}

function newSuite(name: string, parent: Suite | null): Suite {
  return { name, parent, children: [], beforeAll: [], afterAll: [], beforeEach: [], afterEach: [] };
}

let root = newSuite('', null);
/** The suite that describe/it/hooks attach to: the one being collected, or the one running. */
let current = root;

// biome-ignore lint/suspicious/noExplicitAny: chai's expect is untyped here; the tests type-check against vitest
export const expect: any = (value: unknown, message?: string) => chai.expect(value, message);
Object.assign(expect, chai.expect);
setState(
  { assertionCalls: 0, isExpectingAssertions: false, expectedAssertionsNumber: null, currentTestName: '' },
  expect,
);
(globalThis as Record<symbol, unknown>)[GLOBAL_EXPECT] = expect;

/** vitest's title formatting for .each: printf-style %s %d %i %f %j %o %%, and $name for objects. */
function formatTitle(title: string, args: unknown[]): string {
  if (args.length === 1 && args[0] !== null && typeof args[0] === 'object' && title.includes('$')) {
    const row = args[0] as Record<string, unknown>;
    return title.replace(/\$([A-Za-z_][\w.]*)/g, (_, key: string) => String(row[key]));
  }
  let i = 0;
  return title.replace(/%[sdifjo%]/g, (m) => {
    if (m === '%%') return '%';
    const v = args[i++];
    return m === '%j' || m === '%o' ? JSON.stringify(v) : String(v);
  });
}

function each<T>(register: (name: string, fn: Fn) => void) {
  // biome-ignore lint/suspicious/noExplicitAny: a row's cells are spread as the test's arguments, as in vitest
  return (table: readonly T[]) => (title: string, fn: (...args: any[]) => unknown) => {
    for (const row of table) {
      const args = Array.isArray(row) ? row : [row];
      register(formatTitle(title, args), () => fn(...args));
    }
  };
}

function describeImpl(name: string, fn: Fn): void {
  const suite = newSuite(name, current);
  current.children.push(suite);
  const outer = current;
  current = suite;
  try {
    const r = fn();
    if (r instanceof Promise) throw new Error(`describe("${name}"): an async describe body is not supported`);
  } finally {
    current = outer;
  }
}

function itImpl(name: string, fn: Fn): void {
  current.children.push({ name, fn });
}

export const describe = Object.assign(describeImpl, { each: each(describeImpl) });
export const it = Object.assign(itImpl, { each: each(itImpl) });
export const test = it;
export const beforeAll = (fn: Fn) => void current.beforeAll.push(fn);
export const afterAll = (fn: Fn) => void current.afterAll.push(fn);
export const beforeEach = (fn: Fn) => void current.beforeEach.push(fn);
export const afterEach = (fn: Fn) => void current.afterEach.push(fn);

export interface TestResult {
  name: string;
  ok: boolean;
  ms: number;
  error?: string;
}

function chain(suite: Suite): Suite[] {
  const out: Suite[] = [];
  for (let s: Suite | null = suite; s; s = s.parent) out.unshift(s);
  return out;
}

function errorText(e: unknown): string {
  return e instanceof Error
    ? `${e.message}\n${e.stack?.split('\n').slice(1, 6).join('\n') ?? ''}`
    : String(e);
}

async function runSuite(
  suite: Suite,
  prefix: string,
  results: TestResult[],
  report: (r: TestResult) => void,
) {
  const title = suite.name ? `${prefix}${suite.name} > ` : prefix;
  const outer = current;
  current = suite;
  let setupError: unknown = null;
  try {
    for (const h of suite.beforeAll) await h();
  } catch (e) {
    setupError = e;
  }
  // children may be appended while running (a hook registered inside a test); iterate by index
  for (let i = 0; i < suite.children.length; i++) {
    const child = suite.children[i];
    if ('children' in child) {
      if (setupError) continue;
      await runSuite(child, title, results, report);
      continue;
    }
    const t0 = performance.now();
    let error: unknown = setupError;
    if (!error) {
      const suites = chain(suite);
      try {
        for (const s of suites) for (const h of s.beforeEach) await h();
        await child.fn();
      } catch (e) {
        error = e;
      }
      for (const s of suites.reverse()) {
        for (const h of s.afterEach) {
          try {
            await h();
          } catch (e) {
            error ??= e;
          }
        }
      }
    }
    const r: TestResult = { name: title + child.name, ok: !error, ms: performance.now() - t0 };
    if (error) r.error = errorText(error);
    results.push(r);
    report(r);
  }
  for (const h of suite.afterAll) {
    try {
      await h();
    } catch (e) {
      const r = { name: `${title}afterAll`, ok: false, ms: 0, error: errorText(e) };
      results.push(r);
      report(r);
    }
  }
  current = outer;
}

/** Imports one bundled test file (its describe/it calls collect), runs what it collected, resets. */
export async function runTestFile(
  load: () => Promise<unknown>,
  report: (r: TestResult) => void,
): Promise<TestResult[]> {
  root = newSuite('', null);
  current = root;
  const results: TestResult[] = [];
  try {
    await load();
  } catch (e) {
    const r = { name: 'import', ok: false, ms: 0, error: errorText(e) };
    report(r);
    return [r];
  }
  await runSuite(root, '', results, report);
  return results;
}
