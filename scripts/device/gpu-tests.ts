// Runs the bundled tests/gpu files one after another with the vitest shim (scripts/device/
// vitest-shim.ts) and prints a line per test and a summary; exit code 1 if any failed. Built by
// scripts/device/build.mjs into .device/js/scripts/device/gpu-tests.js; the bundled test files sit at
// .device/js/tests/gpu/. Arguments: substrings of test file names to run (default: all).
//   node .device/js/scripts/device/gpu-tests.js [matmul attention ...]
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runTestFile, type TestResult } from './vitest-shim.ts';

const dir = new URL('../../tests/gpu/', import.meta.url);
const filters = process.argv.slice(2);
const files = readdirSync(fileURLToPath(dir))
  .filter((f) => f.endsWith('.test.js'))
  .filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)))
  .sort();

const all: Array<TestResult & { file: string }> = [];
const t0 = performance.now();
for (const file of files) {
  console.log(`\n${file}`);
  const results = await runTestFile(
    () => import(new URL(file, dir).href),
    (r) => {
      console.log(`  ${r.ok ? 'ok  ' : 'FAIL'} ${r.name} (${r.ms.toFixed(0)} ms)`);
      if (r.error) console.log(`       ${r.error.split('\n').join('\n       ')}`);
    },
  );
  for (const r of results) all.push({ ...r, file });
}
const failed = all.filter((r) => !r.ok);
console.log(
  `\n${files.length} files, ${all.length} tests: ${all.length - failed.length} passed, ${failed.length} failed (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
);
for (const r of failed) console.log(`FAILED ${r.file}: ${r.name}`);
process.exit(failed.length > 0 ? 1 : 0);
