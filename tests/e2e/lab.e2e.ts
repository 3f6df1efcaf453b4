// End-to-end: the lab's screens in headless Chromium on WebGPU (SwiftShader), on configs/micro.json-
// sized settings, with the engine in its Web Worker:
//   1. the bundled qwen-tiny loads; the Model screen shows the training memory estimate;
//   2. a dropped HotpotQA-format file whose question holds `<img src=x onerror=...>` shows it as text
//      (Task screen), and stepping that question shows it as text too (no element, no script ran);
//   3. the stepper runs an episode turn by turn (one turn card per Next), shows the action, and the tool
//      call and its result when the model made one, then runs to the end;
//   4. the token inspector shows every token with its source and loss mask (policy tokens masked 1,
//      prompt and environment tokens 0) and a policy token's log-prob;
//   5. two training steps run; the charts get two points; the page answers clicks while a step runs;
//   6. the trained weights zip parses as safetensors with qwen-tiny's tensors; the metrics CSV and
//      JSONL have both steps; a step's trajectory opens in the inspector (advantages at policy
//      tokens) and in the stepper (its turns);
//   7. a reload in the middle of step 3 leaves the run "interrupted"; Resume continues from the step-2
//      checkpoint and says so; step 3 runs again and metrics.jsonl has steps 1–3 once each.
// Screenshots of every screen land in test-artifacts/lab-*.png.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Page } from 'playwright-core';
import type { PreviewServer } from 'vite';
import { loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import { memorySource } from '../../src/agent/model/sources.ts';
import { ARTIFACTS, launchChromium, loadBundledModel, startPreview } from './browser.ts';
import { readStoredZip } from './unzip.ts';

// LAB_E2E_MODEL: another bundled folder (e.g. a warm-start checkpoint copied to public/models/).
const MODEL = process.env.LAB_E2E_MODEL ?? 'qwen-tiny';
const XSS = '<img src=x onerror="window.__xss=1">';

let server: PreviewServer;
let url: string;

before(async () => {
  ({ server, url } = await startPreview());
});
after(async () => {
  await server.close();
});

/** A one-question HotpotQA file (the distractor-setting layout) whose question carries markup. */
function hotpotFile(): Buffer {
  const record = {
    _id: 'xss-1',
    question: `Who founded the company that ${XSS} makes the Lumen lamp?`,
    answer: 'Ada Brook',
    type: 'bridge',
    level: 'easy',
    supporting_facts: [
      ['Lumen lamp', 0],
      ['Brook Works', 0],
    ],
    context: [
      ['Lumen lamp', ['The Lumen lamp is made by Brook Works.']],
      ['Brook Works', ['Brook Works was founded by Ada Brook.']],
      ['Other', ['Nothing to see here.']],
    ],
  };
  return Buffer.from(JSON.stringify([record]));
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: `${ARTIFACTS}/lab-${name}.png`, fullPage: true });
}

async function download(page: Page, testId: string): Promise<{ name: string; bytes: Buffer }> {
  const [d] = await Promise.all([page.waitForEvent('download'), page.getByTestId(testId).first().click()]);
  const path = join(ARTIFACTS, d.suggestedFilename());
  await d.saveAs(path);
  return { name: d.suggestedFilename(), bytes: await readFile(path) };
}

const stepCount = (page: Page) => page.getByTestId('train-step-count').textContent();

test('the lab: stepper, inspector, training with charts, downloads and resume after a reload', {
  timeout: 900_000,
}, async () => {
  const browser = await launchChromium(true);
  const t0 = Date.now();
  const lap = (what: string) => console.log(`[e2e] ${what}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  try {
    const context = await browser.newContext({
      viewport: { width: 1366, height: 900 },
      acceptDownloads: true,
    });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`console: ${m.text()}`);
    });
    await page.goto(url);

    // 1. The bundled model.
    await loadBundledModel(page, MODEL);
    assert.match((await page.getByTestId('model-train-memory').textContent()) ?? '', /about [\d.]+ [KMG]i?B/);
    lap(`${MODEL} loaded`);
    await shot(page, 'model');

    // 2. A dropped question file with markup in the question: text, not HTML.
    await page.getByTestId('nav-task').click();
    await page
      .getByTestId('task-file')
      .setInputFiles({ name: 'hotpot-xss.json', mimeType: 'application/json', buffer: hotpotFile() });
    const dropped = page.getByTestId('task-dropped');
    await dropped.waitFor({ timeout: 20_000 });
    assert.match((await dropped.textContent()) ?? '', /1 hotpotqa questions/);
    assert.ok(
      ((await dropped.textContent()) ?? '').includes(XSS),
      'the question is shown with its markup as text',
    );
    assert.equal(await dropped.locator('img').count(), 0);
    await shot(page, 'task');

    // 3. The stepper on the dropped question: as text again, then a synthetic question turn by turn.
    await page.getByTestId('nav-stepper').click();
    await page.getByTestId('stepper-source').selectOption('dropped');
    await page.getByTestId('stepper-start').click();
    const shownQuestion = page.getByTestId('stepper-shown-question');
    await shownQuestion.waitFor({ timeout: 30_000 });
    assert.ok(((await shownQuestion.textContent()) ?? '').includes(XSS));
    assert.equal(await page.getByTestId('stepper-state').locator('img').count(), 0);
    await page.getByTestId('stepper-next').click();
    await page.getByTestId('stepper-turn').first().waitFor({ timeout: 120_000 });
    assert.equal(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss), undefined);
    assert.equal(await page.locator('img').count(), 0, 'no <img> anywhere on the page');
    lap('markup in dataset text stays text');

    // A synthetic question, greedy, one turn per key press. The first question whose first turn calls
    // the search tool is stepped on (a warm-started qwen-tiny calls it on nearly every question).
    await page.getByTestId('stepper-source').selectOption('train');
    await page.getByTestId('cfg-rollout.maxNewTokensPerTurn').fill('64');
    await page.getByTestId('stepper-index').locator('option').nth(4).waitFor({ state: 'attached' });
    let action = '';
    let question = -1;
    for (let q = 0; q < 5; q++) {
      await page.getByTestId('stepper-index').selectOption(String(q));
      await page.getByTestId('stepper-temperature').fill('0');
      await page.getByTestId('stepper-start').click();
      await page.getByTestId('stepper-state').waitFor({ timeout: 30_000 });
      await page.getByTestId('stepper-busy').waitFor({ state: 'detached', timeout: 30_000 });
      assert.equal(await page.getByTestId('stepper-turn').count(), 0);
      await page.locator('body').press('n'); // keyboard: next turn
      await page.getByTestId('stepper-turn').first().waitFor({ timeout: 120_000 });
      await page.getByTestId('stepper-busy').waitFor({ state: 'detached', timeout: 120_000 });
      assert.equal(await page.getByTestId('stepper-turn').count(), 1, 'one turn per Next');
      action = (await page.getByTestId('turn-action').first().textContent()) ?? '';
      if (action.includes('<tool_call>')) {
        question = q;
        break;
      }
    }
    assert.ok(
      question >= 0,
      `${MODEL} made no tool call in the first turn of 5 greedy episodes (is it the warm-started checkpoint?); last action: ${JSON.stringify(action)}`,
    );
    const firstTurn = page.getByTestId('stepper-turn').first();
    assert.match(
      (await firstTurn.getByTestId('turn-call').first().textContent()) ?? '',
      /^search\(\{"query":/,
    );
    assert.ok(
      ((await firstTurn.getByTestId('turn-result').textContent()) ?? '').length > 0,
      'the tool result is shown',
    );
    assert.match((await firstTurn.getByTestId('turn-reward').textContent()) ?? '', /process reward/);
    lap(`stepper: question ${question}, turn 1 called the tool: ${JSON.stringify(action.slice(0, 120))}`);
    // Run to the end (the episode may have ended with its first turn: a turn without a call ends it).
    await page.locator('body').press('r'); // keyboard: run to the end
    await page.getByTestId('stepper-done').waitFor({ timeout: 180_000 });
    const turns = await page.getByTestId('stepper-turn').count();
    assert.ok(turns >= 1 && turns <= 3, `${turns} turns (micro config: at most 3)`);
    await shot(page, 'stepper');
    lap(`episode done in ${turns} turns`);

    // 4. The inspector: sources and masks.
    await page.getByTestId('open-inspector').click();
    const tokens = page.getByTestId('inspector-tokens').locator('button');
    await tokens.first().waitFor();
    const cells = await tokens.evaluateAll((els) =>
      els.map((e) => ({ source: e.getAttribute('data-source'), mask: e.getAttribute('data-mask') })),
    );
    assert.ok(cells.length > 20);
    assert.equal(cells[0].source, 'prompt');
    assert.ok(cells.some((c) => c.source === 'policy'));
    for (const c of cells) assert.equal(c.mask, c.source === 'policy' ? '1' : '0', JSON.stringify(c));
    const firstPolicy = cells.findIndex((c) => c.source === 'policy');
    await tokens.nth(firstPolicy).hover();
    assert.match((await page.getByTestId('token-mask').textContent()) ?? '', /^1/);
    assert.match((await page.getByTestId('token-logprob').textContent()) ?? '', /^-?\d+\.\d{4} \(p /);
    await tokens.nth(0).hover();
    assert.match((await page.getByTestId('token-source').textContent()) ?? '', /prompt/);
    await tokens.nth(firstPolicy).click();
    await shot(page, 'inspector');
    lap(`inspector: ${cells.length} tokens`);

    // 5. Training: three steps planned, two run with "One step".
    await page.getByTestId('nav-train').click();
    await page.getByTestId('cfg-train.steps').fill('3');
    await page.getByTestId('cfg-rollout.maxNewTokensPerTurn').fill('24'); // configs/micro.json's
    await page.getByTestId('cfg-train.evalSize').fill('0');
    await page.getByTestId('cfg-train.checkpointEvery').fill('1');
    await page.getByTestId('train-step').click();
    // While the step runs, the page answers: switch screens and back.
    await page
      .getByTestId('train-phase')
      .filter({ hasText: /playing episodes|scoring|updating/ })
      .waitFor({ timeout: 60_000 });
    const tClick = Date.now();
    await page.getByTestId('nav-task').click();
    await page.getByTestId('task-screen').waitFor({ timeout: 5_000 });
    await page.getByTestId('nav-train').click();
    await page.getByTestId('train-screen').waitFor({ timeout: 5_000 });
    const answerMs = Date.now() - tClick;
    assert.ok(answerMs < 3_000, `the page took ${answerMs} ms to switch screens during a step`);
    const phaseNow = (await page.getByTestId('train-phase').textContent()) ?? '';
    lap(`page answered in ${answerMs} ms while the step was ${phaseNow}`);
    await page
      .getByTestId('train-step-count')
      .filter({ hasText: 'step 1 of 3' })
      .waitFor({ timeout: 300_000 });
    await page.getByTestId('train-step').waitFor({ state: 'visible' });
    await page.waitForFunction(
      () => !(document.querySelector('[data-testid="train-step"]') as HTMLButtonElement).disabled,
    );
    lap('step 1');
    await page.getByTestId('train-step').click();
    await page
      .getByTestId('train-step-count')
      .filter({ hasText: 'step 2 of 3' })
      .waitFor({ timeout: 300_000 });
    await page.waitForFunction(
      () => !(document.querySelector('[data-testid="train-step"]') as HTMLButtonElement).disabled,
    );
    lap('step 2');
    for (const key of [
      'reward/mean',
      'episode/em',
      'actor/kl_ref_k3',
      'actor/entropy',
      'perf/rollout_tokens_per_s',
    ]) {
      const chart = page.getByTestId(`chart-${key}`);
      await chart.and(page.locator('[data-points="2"]')).waitFor({ timeout: 10_000 });
      assert.ok((await chart.locator('svg path.recharts-curve').count()) >= 1, `${key}: no line drawn`);
    }
    assert.match((await page.getByTestId('train-step-time').textContent()) ?? '', /[\d.]+ s \/ step/);
    assert.match((await page.getByTestId('run-checkpoints').first().textContent()) ?? '', /1, 2/);
    await page.getByTestId('trajectory-row').first().waitFor({ timeout: 10_000 });
    await shot(page, 'train');

    // 6. Downloads: trained weights (HF layout, safetensors), metrics, config.
    const zip = await download(page, 'train-download-weights');
    assert.match(zip.name, /step2\.zip$/);
    const entries = readStoredZip(new Uint8Array(zip.bytes));
    const folder = [...entries.keys()][0].split('/')[0];
    const files = new Map([...entries].map(([n, b]) => [n.slice(folder.length + 1), b]));
    assert.deepEqual([...files.keys()].sort(), [
      'config.json',
      'generation_config.json',
      'model.safetensors',
      'tokenizer.json',
      'tokenizer_config.json',
    ]);
    const trained = await loadCheckpoint(memorySource(files, 'the trained zip'));
    const bundled = await loadCheckpoint(directorySource(join('public/models', MODEL)));
    assert.deepEqual([...trained.tensors.keys()].sort(), [...bundled.tensors.keys()].sort());
    for (const [name, t] of bundled.tensors)
      assert.deepEqual(trained.tensors.get(name)!.shape, t.shape, name);
    const csv = (await download(page, 'download-metrics-csv')).bytes.toString('utf8').trim().split('\n');
    assert.match(csv[0], /^step,/);
    assert.equal(csv.length, 3, `header + 2 steps: ${csv.length} lines`);
    const jsonl = (await download(page, 'download-metrics-jsonl')).bytes.toString('utf8').trim().split('\n');
    assert.deepEqual(
      jsonl.map((l) => JSON.parse(l).step),
      [1, 2],
    );
    const config = JSON.parse((await download(page, 'download-config')).bytes.toString('utf8'));
    assert.equal(config.train.steps, 3);
    lap('downloads parsed');

    // The inspector after a training step: advantages at policy tokens.
    await page.getByTestId('inspect-trajectory').first().click();
    const trainedTokens = page.getByTestId('inspector-tokens').locator('button[data-source="policy"]');
    await trainedTokens.first().hover();
    assert.match((await page.getByTestId('token-advantage').textContent()) ?? '', /^-?\d+\.\d{4}$/);
    await shot(page, 'inspector-trained');
    // ... and its turns in the stepper.
    await page.getByTestId('nav-train').click();
    await page.getByTestId('open-in-stepper').first().click();
    await page.getByTestId('stepper-done').waitFor({ timeout: 10_000 });
    assert.ok((await page.getByTestId('stepper-turn').count()) >= 1);
    assert.match((await page.getByTestId('stepper-state').textContent()) ?? '', /replay of training step 2/);

    // 7. Reload in the middle of step 3, then resume from the step-2 checkpoint.
    await page.getByTestId('nav-train').click();
    await page.getByTestId('train-start').click();
    await page
      .getByTestId('train-phase')
      .filter({ hasText: /playing episodes/ })
      .waitFor({ timeout: 60_000 });
    await page.reload();
    const banner = page.getByTestId('interrupted-run');
    await banner.waitFor({ timeout: 60_000 });
    assert.match((await banner.textContent()) ?? '', /stopped at step 2[\s\S]*last checkpoint is step 2/);
    await shot(page, 'train-interrupted');
    await banner.getByTestId('resume-run').click();
    const message = page.getByTestId('train-message');
    await message.filter({ hasText: /resumed run/ }).waitFor({ timeout: 120_000 });
    assert.match((await message.textContent()) ?? '', /from its checkpoint at step 2/);
    assert.match((await stepCount(page)) ?? '', /step 2 of 3/);
    assert.equal(
      await page.getByTestId('cfg-train.steps').inputValue(),
      '3',
      "the form shows the run's config",
    );
    lap('resumed after the reload');
    await page.getByTestId('train-step').click();
    await page
      .getByTestId('train-step-count')
      .filter({ hasText: 'step 3 of 3' })
      .waitFor({ timeout: 300_000 });
    await page
      .getByTestId('chart-reward/mean')
      .and(page.locator('[data-points="3"]'))
      .waitFor({ timeout: 20_000 });
    const after = (await download(page, 'download-metrics-jsonl')).bytes.toString('utf8').trim().split('\n');
    assert.deepEqual(
      after.map((l) => JSON.parse(l).step).filter((s) => typeof s === 'number'),
      [1, 2, 3],
    );
    await shot(page, 'train-resumed');
    lap('step 3 after resume');

    assert.deepEqual(errors, [], `page errors: ${errors.join('\n')}`);
  } finally {
    await browser.close();
  }
});
