// End-to-end: the Qwen policy in the page, in headless Chromium on WebGPU (SwiftShader here).
//   1. a bundled real-vocabulary model (Qwen tokenizer + chat template with the search tool) loads and
//      generates greedily; the prompt equals Node's rendering, and every token is the argmax of the
//      float64 reference forward (tests/reference/qwen-ref.ts) with a matching log-prob;
//   2. "Download weights" gives a .zip whose model.safetensors loads back in Node bit for bit;
//   3. bad inputs (a garbage safetensors file, a stray file, a model too large for the adapter, an
//      unreachable Hub) show errors that name the problem, and the loaded model stays usable;
//   4. a small-vocabulary model dropped onto the panel generates token ids (checked against the
//      reference too), and Stop ends a long generation between steps.
// SwiftShader is slow (a real-vocabulary step samples over 151,936 logits), so generations are short.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Page } from 'playwright-core';
import type { PreviewServer } from 'vite';
import { type Checkpoint, loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import { memorySource } from '../../src/agent/model/sources.ts';
import { QwenTokenizer } from '../../src/agent/tokenizer/qwen-tokenizer.ts';
import { chatMessages, DEFAULT_GEN_SETTINGS, offeredTools } from '../../src/app/generation.ts';
import { logitsRow, logSoftmax, qwenForward } from '../reference/qwen-ref.ts';
import { ARTIFACTS, launchChromium, startPreview } from './browser.ts';
import { readStoredZip } from './unzip.ts';

const MODELS = 'public/models';
const REAL = 'tiny-qwen2-tied'; // real Qwen vocabulary and tokenizer
const SMALL = 'tiny-qwen2-v512'; // 512-row vocabulary, no tokenizer

let server: PreviewServer;
let url: string;

before(async () => {
  ({ server, url } = await startPreview());
});
after(async () => {
  await server.close();
});

const sameBytes = (a: ArrayBufferView, b: ArrayBufferView) =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

async function modelFiles(name: string): Promise<{ name: string; buffer: Buffer }[]> {
  const names = ['config.json', 'generation_config.json', 'model.safetensors'];
  return Promise.all(names.map(async (n) => ({ name: n, buffer: await readFile(join(MODELS, name, n)) })));
}

/** The new tokens on the page: ids and log-probs from the output's token spans. */
async function pageTokens(page: Page): Promise<{ ids: number[]; logprobs: number[] }> {
  return page.getByTestId('gen-output').evaluate((el) => {
    const spans = [...el.querySelectorAll<HTMLElement>('span[data-id]')];
    return {
      ids: spans.map((s) => Number(s.dataset.id)),
      logprobs: spans.map((s) => Number(s.dataset.logprob)),
    };
  });
}

/**
 * Every generated token must be the argmax of the float64 reference's next-token logits (up to
 * float32 rounding: a near-tie may go either way) and carry its log-softmax as the log-prob.
 */
function assertGreedyMatchesReference(
  ckpt: Pick<Checkpoint, 'config' | 'tensors'>,
  prompt: readonly number[],
  ids: readonly number[],
  logprobs: readonly number[],
): void {
  const V = ckpt.config.vocabSize;
  const all = [...prompt, ...ids.slice(0, -1)];
  const { logits } = qwenForward(ckpt.config, ckpt.tensors, all);
  ids.forEach((id, k) => {
    const row = logitsRow(logits, V, prompt.length - 1 + k);
    let best = 0;
    for (let j = 1; j < V; j++) if (row[j] > row[best]) best = j;
    assert.ok(
      row[id] >= row[best] - 2e-3,
      `token ${k + 1}: page chose ${id} (logit ${row[id]}), the reference's argmax is ${best} (${row[best]})`,
    );
    const lp = logSoftmax(row)[id];
    assert.ok(Math.abs(lp - logprobs[k]) < 2e-3, `token ${k + 1}: logprob ${logprobs[k]} vs reference ${lp}`);
  });
}

async function waitForGeneration(page: Page, timeout = 90_000): Promise<string> {
  const status = page.getByTestId('gen-status');
  await status.filter({ hasText: /^(done|stopped|ERROR)/ }).waitFor({ timeout });
  return (await status.textContent()) ?? '';
}

async function expectLoadError(page: Page, pattern: RegExp): Promise<string> {
  const error = page.getByTestId('model-error');
  await error.waitFor({ timeout: 60_000 });
  await page.getByTestId('model-loading').waitFor({ state: 'detached', timeout: 60_000 });
  const text = (await error.textContent()) ?? '';
  assert.match(text, pattern);
  return text;
}

test('the model panel loads, generates, downloads and survives bad input in Chromium', {
  timeout: 240_000,
}, async () => {
  const browser = await launchChromium(true);
  const t0 = Date.now();
  const lap = (what: string) => console.log(`[e2e] ${what}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 }, acceptDownloads: true });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    // The Hub is unreachable from the test machine; make that deterministic (as if offline).
    await page.route(/^https:\/\/huggingface\.co\//, (route) => route.abort('internetdisconnected'));
    await page.goto(url);

    // 1. Bundled real-vocabulary model.
    await page
      .getByTestId('bundled-select')
      .locator(`option[value="${REAL}"]`)
      .waitFor({ state: 'attached' });
    await page.getByTestId('bundled-select').selectOption(REAL);
    await page.getByTestId('load-bundled').click();
    await page.getByTestId('model-loaded').waitFor({ timeout: 90_000 });
    lap(`${REAL} loaded`);
    const info = (await page.getByTestId('model-info').textContent()) ?? '';
    assert.match(info, /Qwen2ForCausalLM/);
    assert.match(info, /151,936 rows \(tokenizer: 151,669 tokens\)/);
    assert.match(info, /9,798,208/);

    // Greedy, with the search tool offered: the chat template renders the # Tools block.
    await page.getByTestId('gen-offer-search').check();
    await page.getByTestId('gen-temperature').fill('0');
    await page.getByTestId('gen-maxNewTokens').fill('4');
    await page.getByTestId('gen-seed').fill('7');
    await page.getByTestId('generate').click();
    const status = await waitForGeneration(page);
    lap(`generated (${status})`);
    assert.match(status, /^done — \d tokens?/);
    const prompt = (await page.getByTestId('gen-prompt').textContent()) ?? '';
    const real = await loadCheckpoint(directorySource(join(MODELS, REAL)));
    const tokenizer = QwenTokenizer.fromFiles(real.tokenizerFiles);
    // The default messages, with the search tool (rendered in Node by the same template).
    const expectedPrompt = tokenizer.applyChatTemplate(chatMessages(DEFAULT_GEN_SETTINGS), {
      tools: offeredTools({ offerSearchTool: true }),
      addGenerationPrompt: true,
    });
    assert.equal(prompt, expectedPrompt);
    assert.match(prompt, /# Tools[\s\S]*"name": "search"/);
    const promptIds = tokenizer.encode(expectedPrompt);
    const generated = await pageTokens(page);
    assert.ok(generated.ids.length >= 1 && generated.ids.length <= 4);
    assert.match(status, new RegExp(`^done — ${generated.ids.length} token`));
    assert.match(
      (await page.getByTestId('gen-prompt-summary').textContent()) ?? '',
      new RegExp(`^prompt: ${promptIds.length} tokens`),
    );
    const pageText = await page.getByTestId('gen-output').getAttribute('data-text');
    assert.equal(pageText, tokenizer.decode(generated.ids));
    assertGreedyMatchesReference(real, promptIds, generated.ids, generated.logprobs);
    lap('greedy tokens match the float64 reference');
    await page.getByTestId('gen-prompt-summary').click();
    await page.getByText('per-token log-probabilities').click();
    await page.screenshot({ path: `${ARTIFACTS}/e2e-model-generate.png`, fullPage: true });

    // 2. Download: one .zip with the HF folder; its weights equal the bundled ones bit for bit.
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.getByTestId('download-weights').click(),
    ]);
    const zipPath = join(ARTIFACTS, download.suggestedFilename());
    await download.saveAs(zipPath);
    lap(`downloaded ${download.suggestedFilename()}`);
    assert.equal(download.suggestedFilename(), `${REAL}.zip`);
    const entries = readStoredZip(new Uint8Array(await readFile(zipPath)));
    const names = [...entries.keys()].sort();
    assert.deepEqual(
      names,
      [
        'config.json',
        'generation_config.json',
        'model.safetensors',
        'tokenizer.json',
        'tokenizer_config.json',
      ].map((n) => `${REAL}/${n}`),
    );
    const files = new Map([...entries].map(([n, b]) => [n.slice(REAL.length + 1), b]));
    const back = await loadCheckpoint(memorySource(files, 'the downloaded zip'));
    assert.deepEqual([...back.tensors.keys()], [...real.tensors.keys()]);
    for (const [name, t] of real.tensors) {
      const b = back.tensors.get(name)!;
      assert.deepEqual(b.shape, t.shape, name);
      assert.ok(sameBytes(b.data, t.data), `${name}: downloaded weights differ from the bundled ones`);
    }
    // Same writer, same input: the files themselves are the bundled files, byte for byte.
    for (const [name, bytes] of files) {
      assert.ok(
        sameBytes(bytes, await readFile(join(MODELS, REAL, name))),
        `${name} differs from the bundled file`,
      );
    }
    await page
      .getByTestId('download-status')
      .filter({ hasText: `${REAL}.zip` })
      .waitFor();

    // 3. Bad input. A garbage model.safetensors next to a good config.json: the loader's error names it.
    const small = await modelFiles(SMALL);
    const garbage = Buffer.from(
      'this is not a safetensors file, just some text pretending to be one\n'.repeat(4),
    );
    await page.getByTestId('model-files').setInputFiles([
      { name: 'config.json', mimeType: 'application/json', buffer: small[0].buffer },
      { name: 'model.safetensors', mimeType: 'application/octet-stream', buffer: garbage },
    ]);
    await expectLoadError(page, /model\.safetensors: /);
    assert.match(
      (await page.getByTestId('model-error').textContent()) ?? '',
      new RegExp(`Still loaded: ${REAL}`),
    );
    await page.screenshot({ path: `${ARTIFACTS}/e2e-model-bad-file.png`, fullPage: true });
    // A stray file that is no checkpoint at all.
    await page
      .getByTestId('model-files')
      .setInputFiles([{ name: 'garbage.bin', mimeType: 'application/octet-stream', buffer: garbage }]);
    await expectLoadError(page, /garbage\.bin/);
    // A config too large for the adapter is refused before any weights are read.
    const huge = JSON.parse(small[0].buffer.toString('utf8'));
    Object.assign(huge, {
      hidden_size: 8192,
      intermediate_size: 131072,
      num_attention_heads: 64,
      num_key_value_heads: 8,
    });
    await page
      .getByTestId('model-files')
      .setInputFiles([
        { name: 'config.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(huge)) },
      ]);
    await expectLoadError(
      page,
      /model too large for this GPU: tensor 'model\.layers\.0\.mlp\.\w+_proj\.weight' needs/,
    );
    // The Hub, unreachable: the real hubSource path fails with a clear message.
    await page.getByTestId('hub-repo').fill('Qwen/Qwen2.5-0.5B-Instruct');
    await page.getByTestId('load-hub').click();
    await expectLoadError(
      page,
      /huggingface\.co\/Qwen\/Qwen2\.5-0\.5B-Instruct\/resolve\/main\/config\.json.*could not be reached/,
    );
    await page.screenshot({ path: `${ARTIFACTS}/e2e-model-hub-error.png`, fullPage: true });
    assert.match((await page.getByTestId('model-loaded').textContent()) ?? '', new RegExp(REAL));
    lap('bad inputs refused');

    // 4. Drop the small-vocabulary model's files onto the panel; generate token ids.
    await page.evaluate(
      async (files) => {
        const dt = new DataTransfer();
        for (const f of files)
          dt.items.add(new File([Uint8Array.from(atob(f.b64), (c) => c.charCodeAt(0))], f.name));
        const panel = document.querySelector('[data-testid="model-panel"]')!;
        panel.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
        panel.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
      },
      small.map((f) => ({ name: f.name, b64: f.buffer.toString('base64') })),
    );
    await page
      .getByTestId('model-loaded')
      .filter({ hasText: 'your files (config.json, generation_config.json, model.safetensors)' })
      .waitFor({ timeout: 60_000 });
    assert.equal(await page.getByTestId('model-error').count(), 0);
    lap(`${SMALL} loaded by drop`);
    await page.getByTestId('gen-prompt-ids').fill('1 17 42 99 500 3');
    await page.getByTestId('gen-temperature').fill('0');
    await page.getByTestId('gen-maxNewTokens').fill('8');
    await page.getByTestId('generate').click();
    const smallStatus = await waitForGeneration(page);
    assert.match(smallStatus, /^done — \d tokens?/);
    const smallTokens = await pageTokens(page);
    const smallCkpt = await loadCheckpoint(directorySource(join(MODELS, SMALL)));
    assertGreedyMatchesReference(smallCkpt, [1, 17, 42, 99, 500, 3], smallTokens.ids, smallTokens.logprobs);
    await page.screenshot({ path: `${ARTIFACTS}/e2e-model-small-vocab.png`, fullPage: true });
    lap(`${SMALL} generated ${smallTokens.ids.length} ids matching the reference`);

    // Stop: a long sampled generation ends between steps, soon after the click. (A sampled stop
    // token could end it first; then try another seed.)
    await page.getByTestId('gen-temperature').fill('1');
    await page.getByTestId('gen-maxNewTokens').fill('2000');
    let stopped = '';
    for (const seed of [11, 12, 13]) {
      await page.getByTestId('gen-seed').fill(String(seed));
      await page.getByTestId('generate').click();
      await page.locator('[data-testid="gen-output"] span[data-id]').nth(2).waitFor({ timeout: 60_000 });
      if (await page.getByTestId('stop').isEnabled()) await page.getByTestId('stop').click();
      stopped = await waitForGeneration(page);
      if (!/ended by a stop token/.test(stopped)) break;
    }
    assert.match(stopped, /^stopped — \d+ tokens/);
    const n = Number(/— (\d+) tokens/.exec(stopped)![1]);
    assert.ok(n >= 3 && n < 2000, `stopped after ${n} tokens`);
    assert.ok(await page.getByTestId('generate').isEnabled());
    lap(`stopped after ${n} tokens`);

    assert.deepEqual(errors, [], `page errors: ${errors.join('\n')}`);
  } finally {
    await browser.close();
  }
});
