import { useLab } from '../store.ts';

export function SelfCheckPanel() {
  const result = useLab((s) => s.selfCheck);
  const running = useLab((s) => s.selfCheckRunning);
  const error = useLab((s) => s.selfCheckError);
  const rerun = useLab((s) => s.runSelfCheck);
  const status = running ? 'running' : error ? 'error' : result ? (result.ok ? 'pass' : 'fail') : 'pending';
  return (
    <section className="panel" data-testid="selfcheck-panel">
      <h2>Kernel self-check: matmul</h2>
      <p>
        GPU matmul (all three transpose layouts, odd shapes) against a plain CPU reference; relative error
        must be ≤ {result?.tolerance ?? 1e-4}.
      </p>
      <p className={`status status-${status}`} data-testid="selfcheck-status">
        {status === 'pass' && `PASS — ${result!.cases.length} cases, ${result!.ms.toFixed(0)} ms`}
        {status === 'fail' &&
          `FAIL — ${result!.cases.filter((c) => !c.ok).length} of ${result!.cases.length} cases`}
        {status === 'running' && 'running…'}
        {status === 'error' && `ERROR — ${error}`}
        {status === 'pending' && 'waiting for the GPU…'}
      </p>
      {result ? (
        <table className="cases">
          <thead>
            <tr>
              <th>case</th>
              <th>max rel. error</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {result.cases.map((c) => (
              <tr key={c.name}>
                <td>{c.name}</td>
                <td>{c.maxRelError.toExponential(2)}</td>
                <td>{c.ok ? '✓' : '✗'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {result ? <p className="muted">kernel variant: {result.variant}</p> : null}
      <button type="button" onClick={() => void rerun()} disabled={running}>
        Run again
      </button>
    </section>
  );
}
