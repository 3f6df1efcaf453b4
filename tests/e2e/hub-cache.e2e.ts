// The Hub code path for real, minus the internet: a local server plays huggingface.co (the
// `resolve/<revision>/<file>` layout, CORS, Content-Length) for one repo made from a bundled model.
// The page (opened with ?hub=<server>) loads it through hubSource, keeps the files in Cache Storage,
// loads it again after a reload without downloading anything, and downloads again after "Clear".
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { after, before, test } from 'node:test';
import type { PreviewServer } from 'vite';
import { ARTIFACTS, launchChromium, startPreview } from './browser.ts';

const MODEL = 'tiny-qwen2-tied';
const REPO = 'lab-test/tiny-qwen2-tied';

let preview: PreviewServer;
let url: string;
let hub: Server;
let hubUrl: string;
const gets: string[] = [];

before(async () => {
  ({ server: preview, url } = await startPreview());
  hub = createServer((req, res) => {
    res.setHeader('Access-Control-Allow-Origin', '*');
    const m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/([^/?]+)$/.exec(req.url ?? '');
    if (!m || m[1] !== REPO || m[2] !== 'main') {
      res.writeHead(404).end();
      return;
    }
    let body: Buffer;
    try {
      body = readFileSync(`public/models/${MODEL}/${decodeURIComponent(m[3])}`);
    } catch {
      res.writeHead(404).end(); // e.g. model.safetensors.index.json: the repo has one file
      return;
    }
    if (req.method === 'GET') gets.push(m[3]);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
    res.end(req.method === 'HEAD' ? undefined : body);
  });
  await new Promise<void>((resolve) => hub.listen(0, '127.0.0.1', resolve));
  const address = hub.address();
  if (!address || typeof address === 'string') throw new Error('hub server has no address');
  hubUrl = `http://127.0.0.1:${address.port}`;
});
after(async () => {
  await preview.close();
  await new Promise((resolve) => hub.close(resolve));
});

test('a Hub repo downloads once, loads from Cache Storage after a reload, and again after Clear', {
  timeout: 240_000,
}, async () => {
  const browser = await launchChromium(true);
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    const load = async () => {
      await page.getByTestId('hub-repo').fill(REPO);
      await page.getByTestId('load-hub').click();
      // A model may already be shown: wait for this load's progress to come and go.
      await page.getByTestId('model-loading').waitFor({ state: 'attached', timeout: 10_000 });
      await page.getByTestId('model-loading').waitFor({ state: 'detached', timeout: 120_000 });
      await page.getByTestId('model-loaded').filter({ hasText: 'lab-test' }).waitFor({ timeout: 10_000 });
    };
    await page.goto(`${url}?hub=${encodeURIComponent(hubUrl)}`);
    assert.equal(await page.getByTestId('hub-endpoint').textContent(), hubUrl);
    await load();
    const first = [...gets].sort();
    assert.ok(
      first.includes('model.safetensors') && first.includes('config.json'),
      `first load fetched ${first}`,
    );
    await page.screenshot({ path: `${ARTIFACTS}/e2e-hub-local.png`, fullPage: true });

    // Same browser profile, new page load: every file comes from Cache Storage.
    gets.length = 0;
    await page.reload();
    await load();
    assert.deepEqual(gets, [], `the reload downloaded ${gets.join(', ')} again`);

    // Clear the cache: the next load downloads again.
    await page
      .locator('details', { has: page.getByTestId('clear-cache') })
      .locator('summary')
      .click();
    await page.getByTestId('clear-cache').click();
    await page
      .getByTestId('cache-message')
      .filter({ hasText: /Cleared/ })
      .waitFor();
    await load();
    assert.deepEqual([...gets].sort(), first);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
