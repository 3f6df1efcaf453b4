export * from './device.ts';
export * from './errors.ts';
export * from './kernels/matmul.ts';
export * from './runtime.ts';
export * from './selfcheck.ts';
export * from './tensor.ts';
