// The rollout stepper: pick or type a question, then step the episode (an MDP) one turn at a time:
// the state (system prompt, question, tools, the turns so far), the model's action (thinking, tool
// call), the tool's raw result, the environment's reading of it (reward parts, done), the next turn.
// Keys: n = next turn, r = run to the end, s = start / resample, Escape = reset. Model and dataset
// text is rendered as text, never as HTML.
import { useCallback, useEffect, useState } from 'react';
import type { QuestionPick, StepperTurn } from '../../worker/protocol.ts';
import { engine } from '../engine-client.ts';
import { useLab } from '../store.ts';
import { NumberField } from './ConfigFields.tsx';

export function TurnCard({ turn }: { turn: StepperTurn }) {
  return (
    <article className="turn" data-testid="stepper-turn">
      <header className="row between">
        <strong>turn {turn.turn + 1}</strong>
        {turn.done ? <span className="pill">episode ends</span> : null}
      </header>
      <div className="turn-part">
        <h4>model's action</h4>
        <pre className="action" data-testid="turn-action">
          {turn.action || '(empty)'}
        </pre>
      </div>
      {turn.calls.length > 0 ? (
        <div className="turn-part">
          <h4>tool call</h4>
          {turn.calls.map((c, i) => (
            // biome-ignore lint/suspicious/noArrayIndexKey: calls of a turn are fixed
            <p key={i} className="mono" data-testid="turn-call">
              {c.name}({c.arguments}) {c.ok ? '✓' : `✗ ${c.error ?? ''}`}
            </p>
          ))}
        </div>
      ) : null}
      {turn.toolResult ? (
        <div className="turn-part">
          <h4>tool result</h4>
          <pre className="tool-result" data-testid="turn-result">
            {turn.toolResult}
          </pre>
        </div>
      ) : null}
      <div className="turn-part env-reading" data-testid="turn-reward">
        <h4>environment's reading</h4>
        {turn.reward ? (
          <span>
            process reward {turn.reward.total.toFixed(2)} (
            {Object.entries(turn.reward.parts)
              .map(([k, v]) => `${k} ${v.toFixed(2)}`)
              .join(', ')}
            )
          </span>
        ) : null}
        {turn.outcome ? (
          <span>
            {' '}
            · outcome reward <strong>{turn.outcome.outcome.toFixed(2)}</strong> (EM {turn.outcome.em}, F1{' '}
            {turn.outcome.f1.toFixed(2)}, format {turn.outcome.formatValid ? 'valid' : 'invalid'})
          </span>
        ) : null}
        <span> · {turn.done ? 'done' : 'continues'}</span>
      </div>
    </article>
  );
}

export function StepperScreen() {
  const model = useLab((s) => s.model);
  const config = useLab((s) => s.trainConfig);
  const dropped = useLab((s) => s.droppedTasks);
  const stepper = useLab((s) => s.stepper);
  const busy = useLab((s) => s.stepperBusy);
  const error = useLab((s) => s.stepperError);
  const start = useLab((s) => s.stepperStart);
  const next = useLab((s) => s.stepperNext);
  const run = useLab((s) => s.stepperRun);
  const reset = useLab((s) => s.stepperReset);
  const setScreen = useLab((s) => s.setScreen);
  const inspected = useLab((s) => s.inspected);
  const [source, setSource] = useState<'train' | 'test' | 'dropped' | 'custom'>('train');
  const [index, setIndex] = useState(0);
  const [question, setQuestion] = useState('');
  const [answer, setAnswer] = useState('');
  const [temperature, setTemperature] = useState('1');
  const [seed, setSeed] = useState(1);
  const [questions, setQuestions] = useState<string[]>([]);

  useEffect(() => {
    if (source === 'custom') return;
    let live = true;
    engine.listQuestions(config, source, 200).then(
      (q) => live && setQuestions(q),
      () => live && setQuestions([]),
    );
    return () => {
      live = false;
    };
  }, [config, source]);

  const pick = useCallback((): QuestionPick => {
    if (source === 'custom') return { kind: 'custom', question, answer };
    if (source === 'dropped') return { kind: 'dropped', index };
    return { kind: 'split', split: source, index };
  }, [source, index, question, answer]);

  const begin = useCallback(
    (newSeed: number) => {
      const t = Number(temperature);
      void start(pick(), Number.isFinite(t) && t >= 0 ? t : 1, newSeed);
    },
    [pick, start, temperature],
  );

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const target = e.target as HTMLElement | null;
      if (target && /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName)) return;
      if (e.key === 'n') void next();
      else if (e.key === 'r') void run();
      else if (e.key === 's') begin(seed);
      else if (e.key === 'Escape') void reset();
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [next, run, reset, begin, seed]);

  const done = stepper?.done ?? false;
  return (
    <div className="screen stepper-screen" data-testid="stepper-screen">
      <section className="panel side">
        <h2>Rollout stepper</h2>
        <p className="muted">
          One episode of the agent's decision process, a turn at a time: the model acts (thinks, calls the
          search tool or answers), the environment runs the tool and scores the turn.
        </p>
        <label className="field">
          <span className="field-label">question from</span>
          <select
            data-testid="stepper-source"
            value={source}
            onChange={(e) => setSource(e.target.value as typeof source)}
          >
            <option value="train">synthetic world — train split</option>
            <option value="test">synthetic world — held-out split</option>
            <option value="dropped" disabled={!dropped}>
              {dropped ? `dropped file: ${dropped.fileName}` : 'dropped file (Task screen)'}
            </option>
            <option value="custom">type my own</option>
          </select>
        </label>
        {source === 'custom' ? (
          <>
            <label className="field">
              <span className="field-label">question</span>
              <textarea
                data-testid="stepper-question"
                rows={3}
                value={question}
                onChange={(e) => setQuestion(e.target.value)}
              />
            </label>
            <label className="field">
              <span className="field-label">gold answer (for the reward)</span>
              <input type="text" value={answer} onChange={(e) => setAnswer(e.target.value)} />
            </label>
          </>
        ) : (
          <label className="field">
            <span className="field-label">question</span>
            <select
              data-testid="stepper-index"
              value={index}
              onChange={(e) => setIndex(Number(e.target.value))}
            >
              {questions.map((q, i) => (
                // biome-ignore lint/suspicious/noArrayIndexKey: the index is the question's position in its split
                <option key={i} value={i}>
                  {i}: {q.length > 90 ? `${q.slice(0, 87)}…` : q}
                </option>
              ))}
            </select>
          </label>
        )}
        <div className="form-grid">
          <label className="field">
            <span className="field-label">temperature</span>
            <input
              className="short"
              type="text"
              data-testid="stepper-temperature"
              value={temperature}
              onChange={(e) => setTemperature(e.target.value)}
            />
          </label>
          <label className="field">
            <span className="field-label">seed</span>
            <input
              className="short"
              type="text"
              value={seed}
              onChange={(e) => setSeed(Number(e.target.value) || 0)}
            />
          </label>
        </div>
        <div className="form-grid">
          <NumberField path="rollout.maxNewTokensPerTurn" label="tokens / turn" />
          <NumberField path="rollout.maxTurns" label="max turns" />
        </div>
        <div className="row controls">
          <button
            type="button"
            data-testid="stepper-start"
            disabled={!model || busy}
            onClick={() => begin(seed)}
          >
            {stepper ? 'Restart' : 'Start'} <kbd>s</kbd>
          </button>
          <button
            type="button"
            data-testid="stepper-resample"
            disabled={!model || busy}
            onClick={() => {
              setSeed(seed + 1);
              begin(seed + 1);
            }}
            title="the same question with the next seed"
          >
            Resample
          </button>
          <button
            type="button"
            data-testid="stepper-next"
            disabled={!stepper || done || busy}
            onClick={() => void next()}
          >
            Next turn <kbd>n</kbd>
          </button>
          <button
            type="button"
            data-testid="stepper-run"
            disabled={!stepper || done || busy}
            onClick={() => void run()}
          >
            Run to end <kbd>r</kbd>
          </button>
          <button
            type="button"
            data-testid="stepper-reset"
            disabled={!stepper || busy}
            onClick={() => void reset()}
          >
            Reset <kbd>Esc</kbd>
          </button>
        </div>
        {!model ? <p className="muted">Load a model on the Model screen first.</p> : null}
        {busy ? (
          <p className="muted" data-testid="stepper-busy">
            the model is thinking…
          </p>
        ) : null}
        {error ? (
          <p className="error-text" data-testid="stepper-error">
            {error}
          </p>
        ) : null}
      </section>
      <div className="main-col">
        {stepper ? (
          <section className="panel" data-testid="stepper-state">
            <h2>State</h2>
            <p className="muted small">policy: {stepper.start.policy}</p>
            <div className="turn-part">
              <h4>system prompt</h4>
              <pre className="prompt">{stepper.start.systemPrompt}</pre>
            </div>
            <div className="turn-part">
              <h4>question</h4>
              <p className="question" data-testid="stepper-shown-question">
                {stepper.start.question}
              </p>
              <p className="muted small">gold answer: {stepper.start.answers.join(' / ')}</p>
            </div>
            <div className="turn-part">
              <h4>tools</h4>
              {stepper.start.tools.map((t) => (
                <p key={t.function.name} className="mono small">
                  {t.function.name}: {t.function.description}
                </p>
              ))}
            </div>
            {stepper.turns.map((t) => (
              <TurnCard key={t.turn} turn={t} />
            ))}
            {done ? (
              <p className="status status-pass" data-testid="stepper-done">
                Episode finished after {stepper.turns.length} turn{stepper.turns.length === 1 ? '' : 's'}.{' '}
                {inspected ? (
                  <button
                    type="button"
                    className="link"
                    data-testid="open-inspector"
                    onClick={() => setScreen('inspector')}
                  >
                    See its tokens
                  </button>
                ) : null}
              </p>
            ) : stepper.turns.length === 0 ? (
              <p className="muted">Press Next turn (n) to let the model act.</p>
            ) : null}
          </section>
        ) : (
          <section className="panel">
            <p className="muted">Pick a question and press Start.</p>
          </section>
        )}
      </div>
    </div>
  );
}
