// The Task screen: the synthetic multi-hop world (seed, size, hops, question types), question files the
// user drops in (HotpotQA, 2WikiMultihopQA, MuSiQue; used by the stepper), the search tool's top-k, and
// the reward settings. Dropped questions are shown as text, never as HTML.
import { type DragEvent, useState } from 'react';
import { useLab } from '../store.ts';
import { CheckField, ChoiceListField, NumberField, SelectField } from './ConfigFields.tsx';

const TYPES = ['compositional', 'bridge', 'comparison', 'bridge_comparison', 'yesno'] as const;

export function TaskScreen() {
  const running = useLab((s) => s.trainState?.running ?? false);
  const topK = useLab((s) => s.searchTopK);
  const setTopK = useLab((s) => s.setSearchTopK);
  const dropped = useLab((s) => s.droppedTasks);
  const error = useLab((s) => s.taskError);
  const drop = useLab((s) => s.dropTaskFile);
  const [dragging, setDragging] = useState(false);
  const onDrop = (e: DragEvent) => {
    e.preventDefault();
    setDragging(false);
    const f = e.dataTransfer.files[0];
    if (f) void drop(f);
  };
  return (
    <div className="screen task-screen" data-testid="task-screen">
      <section className="panel">
        <h2>Synthetic world</h2>
        <p className="muted">
          A generated world of people, works and places; each question needs 2–4 facts found by searching its
          passages. The same seed always gives the same world.
        </p>
        <div className="form-grid">
          <NumberField path="task.seed" label="world seed" disabled={running} />
          <NumberField path="task.trainSize" label="train questions" disabled={running} />
          <NumberField path="task.testSize" label="held-out questions" disabled={running} />
          <SelectField
            path="task.corpus"
            label="search over"
            disabled={running}
            options={[
              { value: 'pooled', label: 'the whole world (open corpus)' },
              { value: 'question', label: 'each question’s own passages' },
            ]}
          />
          <SelectField
            path="task.preset"
            label="prompt style"
            disabled={running}
            options={[
              { value: 'compact', label: 'compact (short prompt, top-3 passages)' },
              { value: 'default', label: 'default (Agent-R1 prompt, top-5)' },
            ]}
          />
        </div>
        <ChoiceListField
          path="task.hops"
          label="facts per question (hops)"
          choices={[2, 3, 4]}
          disabled={running}
        />
        <ChoiceListField
          path="task.types"
          label="question types (none ticked = all)"
          choices={TYPES}
          disabled={running}
        />
      </section>
      <section className="panel">
        <h2>Search tool</h2>
        <label className="field">
          <span className="field-label">passages per search (top-k, stepper)</span>
          <input
            data-testid="search-top-k"
            type="number"
            min={1}
            max={20}
            value={topK}
            onChange={(e) => setTopK(Math.max(1, Math.min(20, Number(e.target.value) || 1)))}
          />
          <span className="field-note">training uses the prompt style’s top-k</span>
        </label>
        <NumberField path="rollout.maxToolCalls" label="tool calls per episode" disabled={running} />
        <NumberField
          path="rollout.maxTotalTokens"
          label="tokens per episode (prompt included)"
          disabled={running}
        />
      </section>
      <section className="panel">
        <h2>Rewards</h2>
        <p className="muted">
          The outcome reward scores the final answer, gated by format; process rewards score each turn (a
          search that finds a gold passage, penalties for malformed turns and failed calls).
        </p>
        <div className="form-grid">
          <SelectField
            path="reward.outcomeMetric"
            label="outcome metric"
            disabled={running}
            options={[
              { value: 'f1', label: 'F1 (word overlap)' },
              { value: 'em', label: 'exact match' },
            ]}
          />
          <NumberField
            path="reward.processWeight"
            label="process reward weight"
            disabled={running}
            hint="0 = outcome only"
          />
          <NumberField
            path="reward.klInRewardCoef"
            label="KL in reward"
            disabled={running}
            hint="β of r − β·KL (0 = off)"
          />
          <CheckField
            path="ablation.lossMask"
            label="loss mask (train on the model’s own tokens only)"
            disabled={running}
          />
          <CheckField path="ablation.advantageMask" label="advantage mask" disabled={running} />
        </div>
      </section>
      {/* biome-ignore lint/a11y/noStaticElementInteractions: a drop target; the file input is the keyboard route */}
      <section
        className={`panel${dragging ? ' dropping' : ''}`}
        data-testid="task-drop"
        onDragOver={(e) => {
          e.preventDefault();
          setDragging(true);
        }}
        onDragLeave={() => setDragging(false)}
        onDrop={onDrop}
      >
        <h2>Your questions</h2>
        <p className="muted">
          Drop a HotpotQA or 2WikiMultihopQA .json file, or a MuSiQue .jsonl file, here to step its questions
          on the Rollout screen (each question searches its own passages).
        </p>
        <label className="file-button">
          Choose a file…
          <input
            data-testid="task-file"
            type="file"
            accept=".json,.jsonl"
            onChange={(e) => {
              const f = e.target.files?.[0];
              e.target.value = '';
              if (f) void drop(f);
            }}
          />
        </label>
        {error ? (
          <p className="error-text" data-testid="task-error">
            {error}
          </p>
        ) : null}
        {dropped ? (
          <div data-testid="task-dropped">
            <p>
              {dropped.fileName}: {dropped.count} {dropped.kind} questions
              {dropped.skipped > 0 ? ` (${dropped.skipped} records skipped)` : ''}
            </p>
            {dropped.summary ? <p className="muted">{dropped.summary}</p> : null}
            <ul className="questions">
              {dropped.sample.map((q, i) => (
                // biome-ignore lint/suspicious/noArrayIndexKey: a fixed sample
                <li key={i}>{q}</li>
              ))}
            </ul>
          </div>
        ) : null}
      </section>
    </div>
  );
}
