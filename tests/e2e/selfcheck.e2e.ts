// End-to-end: the built lab in real headless Chromium. The matmul self-check must pass on the
// browser's WebGPU adapter (SwiftShader here), and without WebGPU the page must explain what to do.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { PreviewServer } from 'vite';
import { ARTIFACTS, launchChromium, startPreview } from './browser.ts';

let server: PreviewServer;
let url: string;

before(async () => {
  ({ server, url } = await startPreview());
});
after(async () => {
  await server.close();
});

test('the matmul self-check passes in Chromium on WebGPU', { timeout: 240_000 }, async () => {
  const browser = await launchChromium(true);
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(url);
    const status = page.getByTestId('selfcheck-status');
    await status.filter({ hasText: /PASS|FAIL|ERROR/ }).waitFor({ timeout: 200_000 });
    const text = (await status.textContent()) ?? '';
    const kind = (await page.getByTestId('adapter-kind').textContent()) ?? '';
    await page.screenshot({ path: `${ARTIFACTS}/e2e-selfcheck.png`, fullPage: true });
    console.log(`[e2e] browser adapter: ${kind}; self-check: ${text}`);
    assert.match(text, /^PASS/, `self-check did not pass: ${text}`);
    assert.deepEqual(errors, [], `page errors: ${errors.join('\n')}`);
  } finally {
    await browser.close();
  }
});

test('without WebGPU the page shows guidance instead of crashing', { timeout: 120_000 }, async () => {
  const browser = await launchChromium(false);
  try {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(url);
    const panel = page.getByTestId('no-webgpu');
    await panel.waitFor({ timeout: 60_000 });
    const text = (await panel.textContent()) ?? '';
    await page.screenshot({ path: `${ARTIFACTS}/e2e-no-webgpu.png`, fullPage: true });
    assert.match(text, /enable-unsafe-webgpu/);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
