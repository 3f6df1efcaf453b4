// The Generate form's settings live with the engine (src/worker/generation.ts), which renders the
// prompt; the page and the tests import them from here as before.
export * from '../worker/generation.ts';
