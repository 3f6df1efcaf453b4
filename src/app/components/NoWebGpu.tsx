import { useLab } from '../store.ts';

export function NoWebGpu() {
  const status = useLab((s) => s.gpuStatus);
  const error = useLab((s) => s.gpuError);
  return (
    <section className="panel warning" data-testid="no-webgpu">
      <h2>{status === 'unavailable' ? 'WebGPU is not available here' : 'The GPU could not be started'}</h2>
      <p className="error-text">{error}</p>
      <ul>
        <li>
          Use a recent Chrome, Edge or another Chromium browser (WebGPU is on by default on Windows, macOS,
          ChromeOS and Android).
        </li>
        <li>
          On Linux, start Chrome with <code>--enable-unsafe-webgpu</code> (and{' '}
          <code>--enable-features=Vulkan</code> if needed).
        </li>
        <li>Serve the page over https or from localhost: WebGPU needs a secure context.</li>
        <li>
          Check <code>chrome://gpu</code>: a blocklisted GPU or disabled hardware acceleration hides WebGPU.
        </li>
        <li>Headless and Node use work too: see the README for the Node (Dawn) route.</li>
      </ul>
    </section>
  );
}
