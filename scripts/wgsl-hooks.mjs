// Node module hooks so `import code from './x.wgsl?raw'` works outside Vite exactly as inside it
// (Vite and Vitest resolve `?raw` themselves). Used by bench and CLI scripts:
//   node --import tsx --import ./scripts/wgsl-hooks.mjs script.ts
import { register } from 'node:module';

register(
  'data:text/javascript,' +
    encodeURIComponent(`
import { readFile } from 'node:fs/promises';
export async function load(url, context, next) {
  if (url.includes('?raw')) {
    const path = new URL(url.slice(0, url.indexOf('?raw')));
    const text = await readFile(path, 'utf8');
    return { format: 'module', shortCircuit: true, source: 'export default ' + JSON.stringify(text) + ';' };
  }
  return next(url, context);
}`),
  import.meta.url,
);
