import { formatBytes } from '../../gpu/errors.ts';
import { useLab } from '../store.ts';

const SHOWN_LIMITS = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
];

export function AdapterPanel() {
  const adapter = useLab((s) => s.adapter);
  if (!adapter) return null;
  return (
    <section className="panel" data-testid="adapter-panel">
      <h2>WebGPU adapter</h2>
      <dl className="kv">
        <dt>kind</dt>
        <dd data-testid="adapter-kind">{adapter.kind}</dd>
        <dt>vendor</dt>
        <dd>{adapter.vendor || '—'}</dd>
        <dt>architecture</dt>
        <dd>{adapter.architecture || '—'}</dd>
        <dt>device</dt>
        <dd>{adapter.device || adapter.description || '—'}</dd>
        <dt>fallback (software) adapter</dt>
        <dd>{adapter.isFallbackAdapter ? 'yes' : 'no'}</dd>
        {SHOWN_LIMITS.map((name) => (
          <LimitRow key={name} name={name} value={adapter.limits[name]} />
        ))}
      </dl>
      <p className="features">
        <strong>features:</strong> {adapter.features.join(', ') || 'none'}
      </p>
    </section>
  );
}

function LimitRow({ name, value }: { name: string; value: number }) {
  const shown = name.endsWith('Size') && value >= 1024 ? `${formatBytes(value)} (${value})` : String(value);
  return (
    <>
      <dt>{name}</dt>
      <dd>{shown}</dd>
    </>
  );
}
