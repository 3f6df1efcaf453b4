// Shared e2e plumbing: serve the built app (dist/) on a free localhost port with Vite's preview
// server and drive Debian's chromium through playwright-core.
import { mkdirSync } from 'node:fs';
import { type Browser, chromium, type Page } from 'playwright-core';
import { type PreviewServer, preview } from 'vite';

export const ARTIFACTS = 'test-artifacts';
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export async function startPreview(): Promise<{ server: PreviewServer; url: string }> {
  const server = await preview({
    preview: { port: 0, host: '127.0.0.1', strictPort: false },
    logLevel: 'warn',
  });
  const address = server.httpServer.address();
  if (!address || typeof address === 'string') throw new Error('preview server has no TCP address');
  return { server, url: `http://127.0.0.1:${address.port}/` };
}

/** Headless chromium; `webgpu` adds the flags that expose WebGPU on a GPU-less Linux machine. */
export async function launchChromium(webgpu: boolean): Promise<Browser> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const args = [
    '--no-sandbox',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
    '--disable-quic',
  ];
  if (webgpu) args.push('--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-angle=swiftshader');
  else args.push('--disable-gpu', '--disable-features=WebGPU');
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args });
}

/** Loads a bundled model on the Model screen and waits until the page says it is loaded. */
export async function loadBundledModel(page: Page, name: string): Promise<void> {
  await page.getByTestId('nav-model').click();
  await page.getByTestId('bundled-select').locator(`option[value="${name}"]`).waitFor({ state: 'attached' });
  await page.getByTestId('bundled-select').selectOption(name);
  await page.getByTestId('load-bundled').click();
  await page.getByTestId('model-loaded').filter({ hasText: name }).waitFor({ timeout: 90_000 });
}
