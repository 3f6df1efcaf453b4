// The Train screen: algorithm and hyper-parameters (the config's defaults beside each field),
// start / pause / one step / reset, the current phase's progress and the time per step, the live
// charts of every shown run, the saved runs (OPFS, kept across reloads; resume from a checkpoint) with
// their downloads, and the trajectories of a step.
import { memo, useEffect, useMemo, useState } from 'react';
import { ALGORITHMS } from '../../rl/config.ts';
import { LOSS_AGG_MODES } from '../../rl/core-algos.ts';
import type { RunSummary } from '../../worker/protocol.ts';
import { useLab } from '../store.ts';
import { CHARTS, MetricChart, RUN_COLOURS } from './Charts.tsx';
import { CheckField, NumberField, SelectField } from './ConfigFields.tsx';
import { OnnxExport } from './OnnxExport.tsx';
import { TrajectoryList } from './TrajectoryList.tsx';

export const ALGORITHM_LABELS: Record<string, string> = {
  grpo: 'GRPO — group-normalised advantages',
  drgrpo: 'Dr. GRPO — GRPO without the std division',
  ppo: 'PPO — learned critic, GAE',
  'reinforce++': 'REINFORCE++ — discounted returns, batch-normalised',
  'reinforce++-baseline': 'REINFORCE++ with group baseline',
  rloo: 'RLOO — leave-one-out baseline',
  sft: 'SFT — imitate the oracle’s search traces',
};

const PHASE_WORDS: Record<string, string> = {
  rollout: 'playing episodes',
  reference: 'scoring with the start model',
  values: 'critic values',
  update: 'updating the policy',
  critic: 'updating the critic',
  evaluate: 'evaluating on held-out questions',
  checkpoint: 'saving a checkpoint',
};

const MemoTrajectoryList = memo(TrajectoryList);

const FROZEN_WEIGHTS = ['f32', 'bf16', 'f16', 'auto'] as const;

export function TrainScreen() {
  const model = useLab((s) => s.model);
  const config = useLab((s) => s.trainConfig);
  const state = useLab((s) => s.trainState);
  const error = useLab((s) => s.trainError);
  const start = useLab((s) => s.startTraining);
  const oneStep = useLab((s) => s.trainOneStep);
  const pause = useLab((s) => s.pauseTraining);
  const reset = useLab((s) => s.resetTraining);
  const refreshRuns = useLab((s) => s.refreshRuns);
  const download = useLab((s) => s.downloadTrainedWeights);
  const live = useLab((s) => s.liveEpisodes);
  const running = state?.running ?? false;
  const active = state !== null && state.runId !== '';
  const busy = running;
  const trainConfigLoraRank = useLab((s) => s.trainConfig.model.lora.rank);

  useEffect(() => {
    void refreshRuns();
  }, [refreshRuns]);

  const rows = config.rollout.questionsPerStep * config.rollout.samplesPerQuestion;
  return (
    <div className="screen train-screen" data-testid="train-screen">
      <section className="panel side">
        <h2>Training run</h2>
        {!model ? (
          <p className="muted">
            Load a model with a tokenizer on the Model screen first (the bundled qwen-tiny works).
          </p>
        ) : (
          <p className="muted">
            Starts from <strong>{model.name}</strong>. Each step plays {rows} episodes (
            {config.rollout.questionsPerStep} questions × {config.rollout.samplesPerQuestion} samples), scores
            them, and updates the policy.
          </p>
        )}
        <div className="form-grid">
          <SelectField
            path="algorithm.name"
            label="algorithm"
            disabled={busy || active}
            options={ALGORITHMS.map((a) => ({ value: a, label: ALGORITHM_LABELS[a] ?? a }))}
          />
          <CheckField
            path="algorithm.filterGroups"
            label="train only groups whose rewards differ"
            disabled={busy || active}
            hint="DAPO's group filter (GRPO, Dr.GRPO, RLOO): a group with equal rewards has zero advantage; dropping it saves its update passes"
          />
          <CheckField
            path="algorithm.oracleTraces"
            label="add the oracle's trace to each group"
            disabled={busy || active}
            hint="LUFFY's mixed-policy GRPO (GRPO, Dr.GRPO, RLOO, REINFORCE++-baseline; one update per step): the oracle's right trace of each question joins its group, so groups that all failed still train. Uses demonstrations: not plain RL"
          />
          <NumberField
            path="train.steps"
            label="steps"
            disabled={busy || active}
            hint="training steps in the run"
          />
          <NumberField path="rollout.questionsPerStep" label="questions / step" disabled={busy || active} />
          <NumberField
            path="rollout.samplesPerQuestion"
            label="samples / question"
            disabled={busy || active}
            hint="G: episodes per question; group methods compare them"
          />
          <NumberField path="actor.lr" label="learning rate" disabled={busy || active} />
          <NumberField
            path="model.lora.rank"
            label="LoRA rank (0 = full)"
            disabled={busy || active}
            hint="0: full fine-tuning; r > 0: LoRA adapters of rank r on q/k/v/o/gate/up/down, the base frozen, the KL reference = the base without adapters"
          />
          <NumberField
            path="model.lora.alpha"
            label="LoRA alpha"
            disabled={busy || active || trainConfigLoraRank === 0}
            hint="adapter scale alpha / rank"
          />
          <SelectField
            path="model.frozenWeights"
            label="frozen base"
            disabled={busy || active || trainConfigLoraRank === 0}
            hint="storage of the frozen base under LoRA: half precision halves its memory, computed in f32 (auto: f16 with shader-f16, else bf16)"
            options={FROZEN_WEIGHTS.map((v) => ({ value: v, label: v }))}
          />
          <NumberField
            path="rollout.temperature"
            label="temperature"
            disabled={busy || active}
            hint="sampling temperature of the rollouts"
          />
          <NumberField path="rollout.maxTurns" label="max turns" disabled={busy || active} />
          <NumberField path="rollout.maxNewTokensPerTurn" label="tokens / turn" disabled={busy || active} />
          <NumberField
            path="actor.clipRatioLow"
            label="clip ε low"
            disabled={busy || active}
            hint="PPO clip range below 1"
          />
          <NumberField
            path="actor.clipRatioHigh"
            label="clip ε high"
            disabled={busy || active}
            hint="PPO clip range above 1"
          />
          <NumberField
            path="actor.klLossCoef"
            label="KL loss coef"
            disabled={busy || active}
            hint="pull toward the start model (0 = off)"
          />
          <NumberField path="actor.entropyCoef" label="entropy coef" disabled={busy || active} />
          <SelectField
            path="actor.lossAggMode"
            label="loss aggregation"
            disabled={busy || active}
            options={LOSS_AGG_MODES.map((m) => ({ value: m, label: m }))}
          />
          <NumberField path="actor.ppoEpochs" label="epochs / batch" disabled={busy || active} />
          <NumberField
            path="train.microBatchRows"
            label="rows / pass"
            disabled={busy || active}
            hint="micro-batch: rows per forward/backward, gradients accumulated over the update (0 = the largest that fits train.memoryBudgetMiB, or all)"
          />
          <NumberField
            path="train.checkpointEvery"
            label="checkpoint every"
            disabled={busy || active}
            hint="steps between checkpoints in the browser's private storage (0 = at the end)"
          />
          <NumberField
            path="train.evalEvery"
            label="evaluate every"
            disabled={busy || active}
            hint="steps between held-out evaluations (0 = start and end)"
          />
          <NumberField path="train.evalSize" label="eval questions" disabled={busy || active} />
          <NumberField path="seed" label="seed" disabled={busy || active} />
        </div>
        <div className="row controls">
          <button
            type="button"
            data-testid="train-start"
            disabled={!model || running}
            onClick={() => void start()}
          >
            {active && state!.step > 0 && state!.step < state!.steps ? 'Continue' : 'Start'}
          </button>
          <button type="button" data-testid="train-pause" disabled={!running} onClick={() => void pause()}>
            Pause
          </button>
          <button
            type="button"
            data-testid="train-step"
            disabled={!model || running}
            onClick={() => void oneStep()}
          >
            One step
          </button>
          <button
            type="button"
            data-testid="train-reset"
            disabled={running || !active}
            onClick={() => void reset()}
          >
            Reset
          </button>
          <button
            type="button"
            data-testid="train-download-weights"
            disabled={running || !active}
            onClick={() => void download()}
            title="the trained policy in Hugging Face layout, one zip"
          >
            Trained weights (.zip)
          </button>
        </div>
        <OnnxExport source="train" disabled={running || !active} />
        <Progress />
        {error ? (
          <p className="error-text" data-testid="train-error">
            {error}
          </p>
        ) : null}
        {live.length > 0 && state?.phase === 'rollout' ? (
          <div className="live-episodes" data-testid="live-episodes">
            {live.map((e) => (
              <span
                key={e.row}
                className={`episode-dot ${e.reward > 0 ? 'good' : 'bad'}`}
                title={`${e.doneReason}, reward ${e.reward.toFixed(2)}`}
              />
            ))}
          </div>
        ) : null}
      </section>
      <div className="main-col">
        <RunsPanel />
        <ChartsPanel />
        <MemoTrajectoryList />
      </div>
    </div>
  );
}

function Progress() {
  const state = useLab((s) => s.trainState);
  if (!state || state.runId === '') return <p className="muted">No run yet: Start or One step begins one.</p>;
  const overall = state.steps > 0 ? state.step / state.steps : 0;
  return (
    <div className="progress-block" data-testid="train-progress">
      <div className="row between">
        <span data-testid="train-step-count">
          step {state.step} of {state.steps}
        </span>
        <span className="muted" data-testid="train-step-time">
          {state.lastStepSeconds !== null ? `${state.lastStepSeconds.toFixed(1)} s / step` : ''}
        </span>
      </div>
      <progress value={overall} max={1} />
      <div className="row between">
        <span data-testid="train-phase">
          {state.phase ? (PHASE_WORDS[state.phase] ?? state.phase) : state.running ? 'starting…' : 'idle'}
        </span>
        {state.phase === 'rollout' ? (
          <progress className="phase" value={state.phaseProgress} max={1} title="episodes finished" />
        ) : state.phase ? (
          <progress className="phase" />
        ) : null}
      </div>
      {state.message ? (
        <p className="note" data-testid="train-message">
          {state.message}
        </p>
      ) : null}
      <p className="muted small">run {state.runId}</p>
    </div>
  );
}

// memo: the screen re-renders on every progress report; the panels only when their own slices change.
const RunsPanel = memo(function RunsPanel() {
  const runs = useLab((s) => s.runs);
  const shown = useLab((s) => s.shownRuns);
  const toggle = useLab((s) => s.toggleShownRun);
  const state = useLab((s) => s.trainState);
  const resume = useLab((s) => s.resumeRun);
  const del = useLab((s) => s.deleteRun);
  const dl = useLab((s) => s.downloadRunFile);
  const running = state?.running ?? false;
  const interrupted = runs.filter((r) => r.meta.status === 'interrupted' && r.meta.id !== state?.runId);
  return (
    <section className="panel" data-testid="runs-panel">
      <h2>Runs</h2>
      {interrupted.map((r) => (
        <div key={r.meta.id} className="banner" data-testid="interrupted-run">
          Run <strong>{r.meta.id}</strong> stopped at step {r.meta.step} when the page closed.{' '}
          {r.checkpoints.length > 0
            ? `Its last checkpoint is step ${r.checkpoints.at(-1)}: resuming continues from there` +
              (r.meta.step > r.checkpoints.at(-1)!
                ? ` and runs steps ${r.checkpoints.at(-1)! + 1}–${r.meta.step} again.`
                : '.')
            : 'It has no checkpoint yet: resuming starts it again from step 0.'}{' '}
          <button
            type="button"
            data-testid="resume-run"
            disabled={running}
            onClick={() => void resume(r.meta.id)}
          >
            Resume
          </button>
        </div>
      ))}
      {runs.length === 0 ? (
        <p className="muted">
          Runs are saved in this browser (origin private file system) and listed here after a reload.
        </p>
      ) : (
        <table className="cases runs">
          <thead>
            <tr>
              <th>show</th>
              <th>run</th>
              <th>algorithm</th>
              <th>status</th>
              <th>step</th>
              <th>checkpoints</th>
              <th>download</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {runs.map((r, i) => (
              <RunRow
                key={r.meta.id}
                run={r}
                colour={RUN_COLOURS[i % RUN_COLOURS.length]}
                shown={shown.includes(r.meta.id)}
                active={state?.runId === r.meta.id}
                running={running}
                onToggle={() => toggle(r.meta.id)}
                onResume={() => void resume(r.meta.id)}
                onDelete={() => void del(r.meta.id)}
                onDownload={(what) => void dl(r.meta.id, what)}
              />
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
});

function RunRow(p: {
  run: RunSummary;
  colour: string;
  shown: boolean;
  active: boolean;
  running: boolean;
  onToggle: () => void;
  onResume: () => void;
  onDelete: () => void;
  onDownload: (what: 'metrics-jsonl' | 'metrics-csv' | 'config') => void;
}) {
  const m = p.run.meta;
  return (
    <tr data-testid="run-row" data-run={m.id}>
      <td>
        <input
          type="checkbox"
          checked={p.shown}
          onChange={p.onToggle}
          aria-label={`show ${m.id} on the charts`}
        />
        <span className="swatch" style={{ background: p.colour }} />
      </td>
      <td className="run-id">{m.id}</td>
      <td>{m.algorithm}</td>
      <td data-testid="run-status">{p.active ? (p.running ? 'training' : 'open') : m.status}</td>
      <td>
        {m.step} / {m.steps}
      </td>
      <td data-testid="run-checkpoints">
        {p.run.checkpoints.length > 0 ? p.run.checkpoints.join(', ') : '—'}
      </td>
      <td className="links">
        <button
          type="button"
          className="link"
          data-testid="download-metrics-jsonl"
          onClick={() => p.onDownload('metrics-jsonl')}
        >
          JSONL
        </button>
        <button
          type="button"
          className="link"
          data-testid="download-metrics-csv"
          onClick={() => p.onDownload('metrics-csv')}
        >
          CSV
        </button>
        <button
          type="button"
          className="link"
          data-testid="download-config"
          onClick={() => p.onDownload('config')}
        >
          config
        </button>
      </td>
      <td>
        {!p.active && m.status !== 'done' ? (
          <button type="button" className="link" disabled={p.running} onClick={p.onResume}>
            resume
          </button>
        ) : null}
        <button type="button" className="link danger" disabled={p.active && p.running} onClick={p.onDelete}>
          delete
        </button>
      </td>
    </tr>
  );
}

const ChartsPanel = memo(function ChartsPanel() {
  const runs = useLab((s) => s.runs);
  const shown = useLab((s) => s.shownRuns);
  const smoothing = useLab((s) => s.smoothing);
  const setSmoothing = useLab((s) => s.setSmoothing);
  const [filter, setFilter] = useState('');
  const colours = useMemo(
    () => new Map(runs.map((r, i) => [r.meta.id, RUN_COLOURS[i % RUN_COLOURS.length]])),
    [runs],
  );
  const chartRuns = runs
    .filter((r) => shown.includes(r.meta.id))
    .map((r) => ({ id: r.meta.id, lines: r.metrics }));
  const charts = CHARTS.filter(
    (c) =>
      (filter === '' || `${c.title} ${c.key}`.toLowerCase().includes(filter.toLowerCase())) &&
      (!c.optional || chartRuns.some((r) => r.lines.some((l) => c.key in l))),
  );
  return (
    <section className="panel" data-testid="charts-panel">
      <div className="row between">
        <h2>Charts</h2>
        <div className="row">
          <input
            type="search"
            placeholder="filter charts"
            value={filter}
            onChange={(e) => setFilter(e.target.value)}
            className="short"
          />
          <label className="row small" title="exponential moving average of each curve (debiased)">
            smoothing
            <input
              data-testid="smoothing"
              type="range"
              min={0}
              max={0.95}
              step={0.05}
              value={smoothing}
              onChange={(e) => setSmoothing(Number(e.target.value))}
            />
            <span className="mono">{smoothing.toFixed(2)}</span>
          </label>
        </div>
      </div>
      {chartRuns.length === 0 ? <p className="muted">No run shown: start one, or tick a saved run.</p> : null}
      <div className="charts-grid">
        {charts.map((c) => (
          <MetricChart key={c.key} spec={c} runs={chartRuns} smoothing={smoothing} colours={colours} />
        ))}
      </div>
    </section>
  );
});
