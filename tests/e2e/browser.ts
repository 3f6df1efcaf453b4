// Shared e2e plumbing: serve the built app (dist/) on a free localhost port with Vite's preview
// server and drive Debian's chromium through playwright-core.
import { mkdirSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';
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
