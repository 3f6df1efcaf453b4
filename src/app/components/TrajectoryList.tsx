// The rollouts of one training step, filterable by reward and by why they ended; one opens in the
// token inspector (with its turns, as the stepper shows them).
import { useEffect, useState } from 'react';
import { useLab } from '../store.ts';

export function TrajectoryList() {
  const runs = useLab((s) => s.runs);
  const state = useLab((s) => s.trainState);
  const list = useLab((s) => s.trajectories);
  const load = useLab((s) => s.loadTrajectories);
  const inspect = useLab((s) => s.inspect);
  const openInStepper = useLab((s) => s.openInStepper);
  const setScreen = useLab((s) => s.setScreen);
  const [runId, setRunId] = useState('');
  const [minReward, setMinReward] = useState('');
  const [reason, setReason] = useState('');
  const run = runs.find((r) => r.meta.id === (runId || state?.runId)) ?? runs.at(-1);
  const steps = run
    ? [...new Set(run.metrics.filter((l) => 'reward/mean' in l).map((l) => l.step as number))]
    : [];
  const lastStep = steps.at(-1);
  // Follow the newest step of the run as training goes on (not every refresh of the run list).
  const runKey = run?.meta.id;
  useEffect(() => {
    if (runKey && lastStep !== undefined) void load(runKey, lastStep);
  }, [runKey, lastStep, load]);
  if (!run || steps.length === 0) return null;
  const views = list?.runId === run.meta.id ? list.views : [];
  const reasons = [...new Set(views.map((v) => v.trajectory.doneReason))];
  const shown = views.filter(
    (v) =>
      (minReward === '' || (v.trajectory.outcome?.outcome ?? 0) >= Number(minReward)) &&
      (reason === '' || v.trajectory.doneReason === reason),
  );
  return (
    <section className="panel" data-testid="trajectories-panel">
      <div className="row between">
        <h2>Trajectories</h2>
        <div className="row small">
          <select value={run.meta.id} onChange={(e) => setRunId(e.target.value)} aria-label="run">
            {runs.map((r) => (
              <option key={r.meta.id} value={r.meta.id}>
                {r.meta.id}
              </option>
            ))}
          </select>
          <select
            data-testid="trajectory-step"
            value={list?.step ?? ''}
            onChange={(e) => void load(run.meta.id, Number(e.target.value))}
            aria-label="step"
          >
            {steps.map((s) => (
              <option key={s} value={s}>
                step {s}
              </option>
            ))}
          </select>
          <input
            className="short"
            type="text"
            placeholder="min reward"
            value={minReward}
            onChange={(e) => setMinReward(e.target.value)}
          />
          <select value={reason} onChange={(e) => setReason(e.target.value)} aria-label="done reason">
            <option value="">any ending</option>
            {reasons.map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
        </div>
      </div>
      <table className="cases">
        <thead>
          <tr>
            <th>#</th>
            <th>question</th>
            <th>answer</th>
            <th>reward</th>
            <th>turns</th>
            <th>ended</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {shown.map((v) => (
            <tr key={v.trajectory.row} data-testid="trajectory-row">
              <td>{v.trajectory.row}</td>
              <td className="clip">{v.trajectory.question}</td>
              <td className="clip">{v.trajectory.prediction ?? '—'}</td>
              <td>{(v.trajectory.outcome?.outcome ?? 0).toFixed(2)}</td>
              <td>{v.trajectory.turns}</td>
              <td>{v.trajectory.doneReason}</td>
              <td>
                <button
                  type="button"
                  className="link"
                  data-testid="inspect-trajectory"
                  onClick={() => {
                    inspect(v);
                    setScreen('inspector');
                  }}
                >
                  tokens
                </button>
                <button
                  type="button"
                  className="link"
                  data-testid="open-in-stepper"
                  onClick={() => {
                    openInStepper(v);
                    setScreen('stepper');
                  }}
                >
                  turns
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
