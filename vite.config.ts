import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// The lab is a static site: `vite build` emits dist/, `vite preview` serves it.
// WGSL files are imported as text with Vite's `?raw` suffix; Node scripts get the same through
// scripts/wgsl-hooks.mjs, so the engine has one import mechanism in both places.
export default defineConfig({
  plugins: [react()],
  build: { target: 'es2022', chunkSizeWarningLimit: 4096 },
  worker: { format: 'es' },
});
