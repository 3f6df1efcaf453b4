// The GPU engine: runtime, kernels and the in-page self-check. CPU references live in ./reference
// and are imported directly by tests.
export * from './device.ts';
export * from './errors.ts';
export * from './hang-clock.ts';
export * from './kernels/attention.ts';
export * from './kernels/elementwise.ts';
export * from './kernels/embedding.ts';
export {
  effectiveBindingLimit,
  type LinearBackwardOptions,
  type LinearGrads,
  type LinearOptions,
  linear,
  linearBackward,
  matmulViews,
} from './kernels/linear.ts';
export * from './kernels/logprob.ts';
export * from './kernels/matmul.ts';
export * from './kernels/optimizer.ts';
export * from './kernels/rmsnorm.ts';
export * from './kernels/rope.ts';
export * from './kernels/sampling.ts';
export * from './runtime.ts';
export * from './selfcheck.ts';
export * from './tensor.ts';
