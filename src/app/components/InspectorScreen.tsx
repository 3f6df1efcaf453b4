// The token inspector: every token of one episode, coloured by who wrote it (prompt, policy,
// environment) and marked where the loss mask trains on it; hovering or selecting a token shows its
// id, text, log-prob and, after a training step, its advantage, ratio and KL. Token text is rendered
// as text (React text nodes), never as HTML.
import { useState } from 'react';
import type { TrajectoryView } from '../../worker/protocol.ts';
import { useLab } from '../store.ts';
import { trajectoryTurns } from '../trajectory-turns.ts';
import { TurnCard } from './StepperScreen.tsx';

const SOURCE_WORDS = { prompt: 'prompt', policy: 'policy (model)', env: 'environment (tool)' } as const;

function shownText(t: string): string {
  return t.replace(/\n/g, '↵\n').replace(/\t/g, '→');
}

const num = (v: number | undefined, digits = 4) =>
  v === undefined || Number.isNaN(v) ? '—' : v.toFixed(digits);

export function InspectorScreen() {
  const view = useLab((s) => s.inspected);
  if (!view)
    return (
      <div className="screen" data-testid="inspector-screen">
        <section className="panel">
          <h2>Tokens</h2>
          <p className="muted">
            Run an episode on the Rollout screen, or open a trajectory from the Train screen, to see its
            tokens here.
          </p>
        </section>
      </div>
    );
  return <Inspector view={view} />;
}

function Inspector({ view }: { view: TrajectoryView }) {
  const t = view.trajectory;
  const [selected, setSelected] = useState<number | null>(null);
  const [hovered, setHovered] = useState<number | null>(null);
  const focus = hovered ?? selected;
  const counts = { prompt: 0, policy: 0, env: 0 };
  for (const s of t.sources) counts[s]++;
  const masked = t.lossMask.reduce((a, b) => a + b, 0);
  return (
    <div className="screen inspector-screen" data-testid="inspector-screen">
      <section className="panel">
        <h2>Tokens</h2>
        <p className="question" data-testid="inspector-question">
          {t.question}
        </p>
        <div className="row legend">
          <span className="tok src-prompt">prompt {counts.prompt}</span>
          <span className="tok src-policy mask-1">policy {counts.policy}</span>
          <span className="tok src-env">environment {counts.env}</span>
          <span className="muted small">
            underlined: in the loss mask ({masked} tokens are trained on) ·{' '}
            {view.step !== null ? `training step ${view.step}` : 'from the stepper'} · reward{' '}
            {(t.outcome?.outcome ?? 0).toFixed(2)} · ended: {t.doneReason}
          </span>
        </div>
        <div className="token-grid">
          {/* biome-ignore lint/a11y/noStaticElementInteractions: leaving the token area ends the hover preview; tokens are buttons */}
          <div className="tokens" data-testid="inspector-tokens" onMouseLeave={() => setHovered(null)}>
            {t.ids.map((id, j) => (
              <button
                type="button"
                // biome-ignore lint/suspicious/noArrayIndexKey: token positions are the identity
                key={j}
                className={`tok src-${t.sources[j]} mask-${t.lossMask[j]}${selected === j ? ' selected' : ''}`}
                data-id={id}
                data-source={t.sources[j]}
                data-mask={t.lossMask[j]}
                onMouseEnter={() => setHovered(j)}
                onFocus={() => setHovered(j)}
                onClick={() => setSelected(j)}
              >
                {shownText(view.tokenTexts[j] ?? '')}
              </button>
            ))}
          </div>
          <TokenDetails view={view} index={focus} />
        </div>
      </section>
      {t.turnRecords.length > 0 ? (
        <section className="panel">
          <h2>Turns</h2>
          {trajectoryTurns(t).map((turn) => (
            <TurnCard key={turn.turn} turn={turn} />
          ))}
        </section>
      ) : null}
    </div>
  );
}

function TokenDetails({ view, index }: { view: TrajectoryView; index: number | null }) {
  if (index === null)
    return (
      <aside className="token-details muted" data-testid="token-details">
        Hover or click a token.
      </aside>
    );
  const t = view.trajectory;
  const source = t.sources[index];
  return (
    <aside className="token-details" data-testid="token-details">
      <dl className="kv">
        <dt>position</dt>
        <dd>{index}</dd>
        <dt>id</dt>
        <dd data-testid="token-id">{t.ids[index]}</dd>
        <dt>text</dt>
        <dd>
          <code data-testid="token-text">{JSON.stringify(view.tokenTexts[index])}</code>
        </dd>
        <dt>written by</dt>
        <dd data-testid="token-source">{SOURCE_WORDS[source]}</dd>
        <dt>loss mask</dt>
        <dd data-testid="token-mask">{t.lossMask[index] ? '1 (trained on)' : '0 (not trained on)'}</dd>
        <dt>turn</dt>
        <dd>{t.turnIndex[index] < 0 ? 'prompt' : t.turnIndex[index]}</dd>
        <dt>log-prob</dt>
        <dd data-testid="token-logprob">
          {source === 'policy'
            ? `${num(t.logprobs[index])} (p ${Math.exp(t.logprobs[index]).toPrecision(3)})`
            : '— (not sampled)'}
        </dd>
        {view.trained ? (
          <>
            <dt>advantage</dt>
            <dd data-testid="token-advantage">{num(view.trained.advantage[index])}</dd>
            <dt>ratio π / π_sampler</dt>
            <dd>{num(view.trained.ratio[index])}</dd>
            <dt>KL to start (k1)</dt>
            <dd>{num(view.trained.kl[index])}</dd>
          </>
        ) : (
          <>
            <dt>advantage</dt>
            <dd className="muted">after a training step</dd>
          </>
        )}
      </dl>
    </aside>
  );
}
