// What Dawn sees on this machine: the adapter the runtime picks (kind, description, driver), the
// features the kernels can use (shader-f16, subgroups, timestamps), the limits that bound buffer sizes,
// and the device-to-device copy bandwidth through WebGPU (bytes read + written per second), the
// bound that decode speed is compared against. Run on the device machine by scripts/device/run.sh.
import { Gpu } from '../../src/gpu/runtime.ts';

const gpu = await Gpu.create();
const r = gpu.report;
console.log(`adapter: ${r.kind} — ${r.description || r.device}`);
console.log(`vendor ${r.vendor}, architecture ${r.architecture}, device ${r.device}, source ${r.source}`);
console.log(`features: ${r.features.join(', ')}`);
console.log(`f16 ${gpu.hasF16}, subgroups ${gpu.hasSubgroups}, timestamps ${gpu.hasTimestamps}`);
const lim = r.limits;
console.log(
  `limits: maxBufferSize ${lim.maxBufferSize}, maxStorageBufferBindingSize ${lim.maxStorageBufferBindingSize}, ` +
    `maxComputeWorkgroupStorageSize ${lim.maxComputeWorkgroupStorageSize}, maxComputeInvocationsPerWorkgroup ${lim.maxComputeInvocationsPerWorkgroup}`,
);

// Copy bandwidth: copyBufferToBuffer of a 512 MiB buffer, 20 copies per submit, median of 5 submits.
const device = gpu.device;
const size = 512 * 2 ** 20;
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
const src = device.createBuffer({ size, usage });
const dst = device.createBuffer({ size, usage });
const copies = 20;
const times: number[] = [];
for (let rep = 0; rep < 6; rep++) {
  const enc = device.createCommandEncoder();
  for (let i = 0; i < copies; i++) enc.copyBufferToBuffer(i % 2 ? dst : src, 0, i % 2 ? src : dst, 0, size);
  const t0 = performance.now();
  device.queue.submit([enc.finish()]);
  await device.queue.onSubmittedWorkDone();
  if (rep > 0) times.push(performance.now() - t0);
}
times.sort((a, b) => a - b);
const ms = times[Math.floor(times.length / 2)];
console.log(
  `copy bandwidth (WebGPU copyBufferToBuffer, ${size / 2 ** 20} MiB × ${copies}, read + write): ${((2 * size * copies) / ms / 1e6).toFixed(0)} GB/s`,
);
src.destroy();
dst.destroy();
gpu.destroy();
