// Live training charts (recharts): one small panel per metric, one line per shown run, a ± band for
// the reward, a shared step axis and smoothing.
import {
  Area,
  CartesianGrid,
  ComposedChart,
  Legend,
  Line,
  ResponsiveContainer,
  Tooltip,
  XAxis,
  YAxis,
} from 'recharts';
import { type ChartRun, chartRows } from '../metrics.ts';

export interface ChartSpec {
  key: string;
  title: string;
  /** Plain-words explanation under the title. */
  help: string;
  std?: string;
  /** A second key drawn dashed on the same panel (e.g. held-out EM next to training EM). */
  also?: { key: string; label: string };
  /** Only shown when a run has the key (the critic's loss for PPO, the SFT loss). */
  optional?: boolean;
}

export const CHARTS: ChartSpec[] = [
  {
    key: 'reward/mean',
    std: 'reward/std',
    title: 'reward (mean ± std)',
    help: 'outcome reward of the step’s episodes',
  },
  {
    key: 'episode/em',
    title: 'exact match',
    help: 'answers equal to the gold answer (dashed: held-out evaluation)',
    also: { key: 'eval/em', label: 'eval' },
  },
  { key: 'episode/f1', title: 'F1', help: 'word overlap of answer and gold answer' },
  {
    key: 'eval/supporting_recall',
    title: 'evidence found (held-out)',
    help: 'share of each question’s supporting passages its searches returned before it answered',
    optional: true,
  },
  {
    key: 'actor/kl_ref_k3',
    title: 'KL to the start model',
    help: 'how far the policy has moved (k3 estimate)',
  },
  { key: 'actor/entropy', title: 'entropy', help: 'per-token entropy of the policy' },
  { key: 'actor/pg_clipfrac', title: 'clip fraction', help: 'tokens whose ratio was clipped' },
  { key: 'actor/pg_loss', title: 'policy loss', help: 'the clipped surrogate loss' },
  {
    key: 'train/trained_groups',
    title: 'groups trained',
    help: 'share of the step’s groups whose rewards differ (the group filter trains only those)',
    optional: true,
  },
  { key: 'critic/vf_loss', title: 'critic loss', help: 'value loss of PPO’s critic', optional: true },
  {
    key: 'sft/loss',
    title: 'SFT loss',
    help: 'negative log-likelihood of the oracle’s tokens',
    optional: true,
  },
  { key: 'episode/response_length', title: 'response length', help: 'policy tokens per episode' },
  { key: 'episode/turns', title: 'turns', help: 'assistant turns per episode' },
  { key: 'episode/tool_calls', title: 'tool calls', help: 'search calls per episode' },
  { key: 'perf/rollout_tokens_per_s', title: 'tokens / s', help: 'rollout sampling speed' },
  { key: 'time/step_s', title: 'seconds per step', help: 'wall time of a training step' },
];

export const RUN_COLOURS = [
  '#2563eb',
  '#dc2626',
  '#059669',
  '#d97706',
  '#7c3aed',
  '#db2777',
  '#0891b2',
  '#65a30d',
];

function fmt(v: unknown): string {
  if (typeof v !== 'number') return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(2) : Number(v.toPrecision(4)).toString();
}

export function MetricChart({
  spec,
  runs,
  smoothing,
  colours,
}: {
  spec: ChartSpec;
  runs: ChartRun[];
  smoothing: number;
  colours: Map<string, string>;
}) {
  const rows = chartRows(runs, spec.key, smoothing, spec.std);
  const also = spec.also ? chartRows(runs, spec.also.key, smoothing) : [];
  // Merge the second key's rows in under `${run}:also`.
  const merged = new Map(rows.map((r) => [r.step, { ...r }]));
  for (const r of also) {
    const row = merged.get(r.step) ?? { step: r.step };
    for (const run of runs)
      if (r[run.id] !== undefined) (row as Record<string, unknown>)[`${run.id}:also`] = r[run.id];
    merged.set(r.step, row);
  }
  const data = [...merged.values()].sort((a, b) => a.step - b.step);
  const points = data.length;
  return (
    <figure className="chart" data-testid={`chart-${spec.key}`} data-points={points}>
      <figcaption>
        <strong>{spec.title}</strong> <span className="muted">{spec.help}</span>
      </figcaption>
      {points === 0 ? (
        <div className="chart-empty muted">no points yet</div>
      ) : (
        <ResponsiveContainer width="100%" height={150}>
          <ComposedChart data={data} margin={{ top: 6, right: 10, bottom: 0, left: -10 }}>
            <CartesianGrid stroke="#e5e7eb" strokeDasharray="3 3" />
            <XAxis
              dataKey="step"
              type="number"
              domain={['dataMin', 'dataMax']}
              allowDecimals={false}
              tick={{ fontSize: 11 }}
            />
            <YAxis tick={{ fontSize: 11 }} tickFormatter={fmt} width={52} domain={['auto', 'auto']} />
            <Tooltip
              formatter={(v) => (Array.isArray(v) ? v.map(fmt).join(' – ') : fmt(v))}
              labelFormatter={(s) => `step ${s}`}
            />
            {runs.length > 1 ? <Legend wrapperStyle={{ fontSize: 11 }} /> : null}
            {spec.std
              ? runs.map((run) => (
                  <Area
                    key={`${run.id}:band`}
                    dataKey={`${run.id}:band`}
                    stroke="none"
                    fill={colours.get(run.id)}
                    fillOpacity={0.15}
                    isAnimationActive={false}
                    legendType="none"
                    name={`${run.id} ± std`}
                  />
                ))
              : null}
            {runs.map((run) => (
              <Line
                key={run.id}
                dataKey={run.id}
                name={run.id}
                stroke={colours.get(run.id)}
                strokeWidth={2}
                dot={points < 30 ? { r: 2.5 } : false}
                isAnimationActive={false}
                connectNulls
              />
            ))}
            {spec.also
              ? runs.map((run) => (
                  <Line
                    key={`${run.id}:also`}
                    dataKey={`${run.id}:also`}
                    name={`${run.id} (${spec.also!.label})`}
                    stroke={colours.get(run.id)}
                    strokeDasharray="5 4"
                    dot={{ r: 2.5 }}
                    isAnimationActive={false}
                    connectNulls
                  />
                ))
              : null}
          </ComposedChart>
        </ResponsiveContainer>
      )}
    </figure>
  );
}
