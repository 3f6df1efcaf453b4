// End-to-end: the ONNX export in headless Chromium. The bundled qwen-tiny loads; "Download for
// transformers.js (ONNX)" gives a zip with the folder transformers.js loads (onnx/model.onnx, config
// with transformers.js_config, tokenizer files); "Check the export in this tab" runs that graph with
// onnxruntime-web's WebGPU execution provider in the engine's worker and finds the same 32 greedy tokens
// as the engine, with logits within 1e-4. Screenshot: test-artifacts/lab-onnx.png.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { PreviewServer } from 'vite';
import { ARTIFACTS, launchChromium, loadBundledModel, startPreview } from './browser.ts';
import { readStoredZip } from './unzip.ts';

let server: PreviewServer;
let url: string;

before(async () => {
  ({ server, url } = await startPreview());
});
after(async () => {
  await server.close();
});

test('the lab exports qwen-tiny to ONNX and onnxruntime-web (WebGPU) decodes it as the engine does', {
  timeout: 600_000,
}, async () => {
  const browser = await launchChromium(true);
  try {
    const context = await browser.newContext({
      viewport: { width: 1366, height: 900 },
      acceptDownloads: true,
    });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(url);
    await loadBundledModel(page, 'qwen-tiny');

    const row = page.getByTestId('onnx-model');
    const [d] = await Promise.all([page.waitForEvent('download'), row.getByTestId('download-onnx').click()]);
    const path = join(ARTIFACTS, d.suggestedFilename());
    await d.saveAs(path);
    const files = readStoredZip(await readFile(path));
    const names = [...files.keys()].map((n) => n.split('/').slice(1).join('/')).sort();
    assert.deepEqual(names, [
      'config.json',
      'generation_config.json',
      'onnx/model.onnx',
      'tokenizer.json',
      'tokenizer_config.json',
    ]);
    const configEntry = [...files].find(([n]) => n.endsWith('/config.json'))!;
    const config = JSON.parse(new TextDecoder().decode(configEntry[1]));
    assert.deepEqual(config['transformers.js_config'], { dtype: 'fp32' });

    await row.locator('select').selectOption('webgpu');
    await row.getByTestId('check-onnx').click();
    const status = row.getByTestId('onnx-status');
    await status.filter({ hasText: /onnxruntime-web \(webgpu\)|error|Error/ }).waitFor({ timeout: 300_000 });
    const text = (await status.textContent()) ?? '';
    console.log(`[e2e] ${text}`);
    assert.match(text, /onnxruntime-web \(webgpu\): same 32 greedy tokens as the engine/);
    const diff = Number(/max logit difference ([\d.e+-]+)/.exec(text)?.[1]);
    assert.ok(diff < 1e-4, `max logit difference ${diff}`);
    await page.screenshot({ path: `${ARTIFACTS}/lab-onnx.png`, fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
