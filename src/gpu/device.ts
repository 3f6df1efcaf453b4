// Device acquisition, the same entry point in the browser and in Node.
//
// Browser: navigator.gpu. Node: the `webgpu` npm package (Dawn), loaded lazily so the browser bundle
// never contains it. In Node the adapter is chosen in this order unless the user says otherwise:
//   1. a real GPU, if Dawn's default adapter is not a software rasteriser;
//   2. Mesa lavapipe (needs mesa-vulkan-drivers >= 23; bookworm-backports ships 25.x);
//   3. SwiftShader, whose Vulkan ICD ships inside Debian's chromium package.
// Set AGENT_R1_ADAPTER=gpu|lavapipe|swiftshader to force one, or VK_ICD_FILENAMES yourself.

import { WebGPUUnavailableError } from './errors.ts';

export type AdapterKind = 'gpu' | 'lavapipe' | 'swiftshader' | 'software';
export type AdapterPreference = 'auto' | AdapterKind;

export const LAVAPIPE_ICD = '/usr/share/vulkan/icd.d/lvp_icd.json';
export const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

export interface AdapterReport {
  kind: AdapterKind;
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  isFallbackAdapter: boolean;
  /** Where the adapter came from: "navigator.gpu", or "dawn (node) via <ICD path>". */
  source: string;
  features: string[];
  limits: Record<string, number>;
}

export interface AcquiredDevice {
  gpu: GPU;
  adapter: GPUAdapter;
  device: GPUDevice;
  report: AdapterReport;
}

/** The limits worth asking for: training needs large buffers and bindings. */
const LIMITS_TO_REQUEST = [
  'maxStorageBufferBindingSize',
  'maxBufferSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupSizeZ',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
  'maxUniformBufferBindingSize',
  'maxBindGroups',
] as const;

// 'subgroups' is newer than some @webgpu/types releases, hence the cast.
const FEATURES_TO_REQUEST = ['shader-f16', 'timestamp-query', 'subgroups'] as GPUFeatureName[];

const isNode = typeof process !== 'undefined' && !!process.versions?.node && typeof window === 'undefined';

export function classifyAdapter(info: GPUAdapterInfo, isFallback: boolean): AdapterKind {
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`.toLowerCase();
  if (text.includes('llvmpipe') || text.includes('lavapipe')) return 'lavapipe';
  if (text.includes('swiftshader')) return 'swiftshader';
  if (isFallback || text.includes('software')) return 'software';
  return 'gpu';
}

function readLimits(adapter: GPUAdapter): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of LIMITS_TO_REQUEST) out[name] = Number(adapter.limits[name]);
  out.minStorageBufferOffsetAlignment = Number(adapter.limits.minStorageBufferOffsetAlignment);
  return out;
}

function describe(adapter: GPUAdapter, source: string): AdapterReport {
  const info = adapter.info;
  // Dawn reports isFallbackAdapter on the info object; browsers on the adapter (older spec).
  const fallback = Boolean(
    (info as unknown as { isFallbackAdapter?: boolean }).isFallbackAdapter ??
      (adapter as unknown as { isFallbackAdapter?: boolean }).isFallbackAdapter,
  );
  return {
    kind: classifyAdapter(info, fallback),
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    isFallbackAdapter: fallback,
    source,
    features: [...adapter.features].map(String).sort(),
    limits: readLimits(adapter),
  };
}

async function requestDevice(gpu: GPU, adapter: GPUAdapter, source: string): Promise<AcquiredDevice> {
  const report = describe(adapter, source);
  const requiredLimits: Record<string, number> = {};
  for (const name of LIMITS_TO_REQUEST) requiredLimits[name] = report.limits[name];
  const requiredFeatures = FEATURES_TO_REQUEST.filter((f) => adapter.features.has(f));
  let device: GPUDevice;
  try {
    device = await adapter.requestDevice({ requiredLimits, requiredFeatures });
  } catch (cause) {
    throw new WebGPUUnavailableError(
      `The adapter "${report.description || report.device}" refused to create a device: ${String(cause)}`,
      { cause },
    );
  }
  // Report what the device actually got, which is what kernels may rely on.
  for (const name of LIMITS_TO_REQUEST) report.limits[name] = Number(device.limits[name]);
  // Not requested, so the device keeps the default (256) even where the adapter allows less (16).
  report.limits.minStorageBufferOffsetAlignment = Number(device.limits.minStorageBufferOffsetAlignment);
  report.features = [...device.features].map(String).sort();
  return { gpu, adapter, device, report };
}

interface DawnModule {
  create(flags: string[]): GPU;
  globals: Record<string, unknown>;
}

let dawnModule: DawnModule | null = null;
// The Dawn instance must stay referenced while in use (its lifetime ends when the GPU object goes).
const liveDawnInstances: GPU[] = [];

/** Drops the runtime's reference to a Dawn instance so the Node process can exit. */
export function releaseDawnInstance(gpu: GPU): void {
  const i = liveDawnInstances.indexOf(gpu);
  if (i >= 0) liveDawnInstances.splice(i, 1);
}

async function loadDawn(): Promise<DawnModule> {
  if (dawnModule) return dawnModule;
  const name = 'webgpu'; // a variable, so bundlers leave this Node-only import alone
  try {
    dawnModule = (await import(/* @vite-ignore */ name)) as DawnModule;
  } catch (cause) {
    throw new WebGPUUnavailableError(
      'WebGPU for Node needs the "webgpu" npm package (Dawn): run `npm install` in the project.',
      { cause },
    );
  }
  // Dawn's GPUBufferUsage, GPUMapMode, ... are needed as globals by code written for browsers.
  for (const [k, v] of Object.entries(dawnModule.globals)) {
    if (!(k in globalThis)) (globalThis as Record<string, unknown>)[k] = v;
  }
  return dawnModule;
}

async function fileExists(path: string): Promise<boolean> {
  const fsName = 'node:fs';
  const fs = (await import(/* @vite-ignore */ fsName)) as typeof import('node:fs');
  return fs.existsSync(path);
}

async function nodeAdapter(
  preference: AdapterPreference,
): Promise<{ gpu: GPU; adapter: GPUAdapter; source: string }> {
  const dawn = await loadDawn();
  const env = process.env;
  const tryIcd = async (
    icd: string | null,
  ): Promise<{ gpu: GPU; adapter: GPUAdapter; source: string } | null> => {
    // The Vulkan loader reads VK_ICD_FILENAMES when each Dawn instance is created.
    if (icd) env.VK_ICD_FILENAMES = icd;
    const gpu = dawn.create([]);
    const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
    if (!adapter) return null;
    liveDawnInstances.push(gpu);
    return {
      gpu,
      adapter,
      source: `dawn (node) via ${icd ?? env.VK_ICD_FILENAMES ?? 'default Vulkan ICDs'}`,
    };
  };
  const userIcd = env.VK_ICD_FILENAMES || env.VK_DRIVER_FILES;
  if (userIcd && preference === 'auto') {
    const got = await tryIcd(null);
    if (got) return got;
    throw new WebGPUUnavailableError(
      `No WebGPU adapter from the Vulkan ICD set in the environment (${userIcd}).`,
    );
  }
  const tried: string[] = [];
  if (preference === 'auto' || preference === 'gpu') {
    const got = await tryIcd(null);
    if (got && classifyAdapter(got.adapter.info, false) === 'gpu') return got;
    tried.push('default Vulkan ICDs (no real GPU)');
    if (preference === 'gpu')
      throw new WebGPUUnavailableError(`No real GPU adapter found: tried ${tried.join(', ')}.`);
  }
  if (preference === 'auto' || preference === 'lavapipe') {
    if (await fileExists(LAVAPIPE_ICD)) {
      const got = await tryIcd(LAVAPIPE_ICD);
      if (got && classifyAdapter(got.adapter.info, true) === 'lavapipe') return got;
      tried.push(`lavapipe (${LAVAPIPE_ICD}: no usable adapter; Dawn needs Mesa >= 23)`);
    } else
      tried.push(
        `lavapipe (${LAVAPIPE_ICD} missing: apt-get install -t bookworm-backports mesa-vulkan-drivers)`,
      );
  }
  if (preference === 'auto' || preference === 'swiftshader') {
    if (await fileExists(SWIFTSHADER_ICD)) {
      const got = await tryIcd(SWIFTSHADER_ICD);
      if (got) return got;
      tried.push(`SwiftShader (${SWIFTSHADER_ICD}: no adapter)`);
    } else tried.push(`SwiftShader (${SWIFTSHADER_ICD} missing: apt-get install chromium)`);
  }
  throw new WebGPUUnavailableError(
    `No WebGPU adapter in Node. Tried: ${tried.join('; ')}. Run scripts/setup-machine.sh as root.`,
  );
}

export interface AcquireOptions {
  /** Node only: which adapter to use; default from AGENT_R1_ADAPTER, else 'auto'. */
  adapter?: AdapterPreference;
}

/** Finds an adapter and creates a device with the adapter's real limits and useful features. */
export async function acquireDevice(options: AcquireOptions = {}): Promise<AcquiredDevice> {
  if (isNode) {
    const fromEnv = process.env.AGENT_R1_ADAPTER as AdapterPreference | undefined;
    const preference = options.adapter ?? fromEnv ?? 'auto';
    if (!['auto', 'gpu', 'lavapipe', 'swiftshader'].includes(preference)) {
      throw new WebGPUUnavailableError(
        `${options.adapter ? 'adapter' : 'AGENT_R1_ADAPTER'}="${preference}" is not one of auto, gpu, lavapipe, swiftshader.`,
      );
    }
    const { gpu, adapter, source } = await nodeAdapter(preference);
    return requestDevice(gpu, adapter, source);
  }
  const gpu = (globalThis.navigator as Navigator | undefined)?.gpu;
  if (!gpu) {
    throw new WebGPUUnavailableError(
      'This browser does not expose WebGPU (navigator.gpu is missing). Use a recent Chrome or Edge; on Linux ' +
        'start Chrome with --enable-unsafe-webgpu, and make sure the page is served over https or localhost.',
    );
  }
  let adapter: GPUAdapter | null = null;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  } catch (cause) {
    throw new WebGPUUnavailableError(`navigator.gpu.requestAdapter() failed: ${String(cause)}`, { cause });
  }
  if (!adapter) {
    throw new WebGPUUnavailableError(
      'WebGPU is present but no adapter is available (GPU blocklisted or disabled). Check chrome://gpu.',
    );
  }
  return requestDevice(gpu, adapter, 'navigator.gpu');
}
