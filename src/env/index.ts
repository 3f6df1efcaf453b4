/**
 * The environment side of Agent-R1: MDP types, tools and the ToolEnv, retrieval, QA tasks, rewards,
 * training-free policies and evaluation. Plain TypeScript with no GPU, DOM or Node dependency: it runs in
 * the browser tab, in a worker and in Node.
 */
export * from './chat-format.ts';
export * from './evaluate.ts';
export * from './json.ts';
export * from './json-schema.ts';
export * from './parse.ts';
export * from './policies/base-tool-call.ts';
export * from './policies/history.ts';
export * from './policies/naive-rag.ts';
export * from './policies/oracle.ts';
export * from './policies/policy.ts';
export * from './policies/readers.ts';
export * from './policies/turns.ts';
export * from './presets.ts';
export * from './prompt.ts';
export * from './retrieval/bm25.ts';
export * from './retrieval/metrics.ts';
export * from './reward.ts';
export * from './rng.ts';
export * from './tasks/hotpotqa.ts';
export * from './tasks/musique.ts';
export * from './tasks/parquet.ts';
export * from './tasks/schema.ts';
export * from './tasks/synthetic.ts';
export * from './tasks/synthetic-world.ts';
export * from './tasks/twowiki.ts';
export * from './text.ts';
export * from './tool.ts';
export * from './tool-env.ts';
export * from './tools/search.ts';
export * from './types.ts';
