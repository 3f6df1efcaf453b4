import { type Generation, type GenSettings, type GenToken, useLab } from '../store.ts';

const SAMPLING_FIELDS: { key: keyof GenSettings; label: string; title: string }[] = [
  { key: 'temperature', label: 'temperature', title: '0 = greedy (argmax)' },
  { key: 'topP', label: 'top-p', title: 'nucleus sampling mass, (0, 1]; 1 = off' },
  { key: 'topK', label: 'top-k', title: 'keep the k most likely tokens; 0 = off' },
  { key: 'maxNewTokens', label: 'max new tokens', title: 'stop after this many new tokens' },
  { key: 'seed', label: 'seed', title: 'same seed, same settings: same tokens' },
];

export function GeneratePanel() {
  const model = useLab((s) => s.model);
  const settings = useLab((s) => s.genSettings);
  const setSettings = useLab((s) => s.setGenSettings);
  const generating = useLab((s) => s.generating);
  const stopRequested = useLab((s) => s.stopRequested);
  const generation = useLab((s) => s.generation);
  const generate = useLab((s) => s.generate);
  const stop = useLab((s) => s.stopGeneration);
  const loading = useLab((s) => s.modelLoading !== null);

  return (
    <section className="panel wide" data-testid="generate-panel">
      <h2>Generate</h2>
      {!model ? <p className="muted">Load a model first.</p> : null}
      {model?.hasTokenizer ? (
        <div className="messages">
          <label>
            system
            <textarea
              data-testid="gen-system"
              rows={2}
              value={settings.system}
              onChange={(e) => setSettings({ system: e.target.value })}
            />
          </label>
          <label>
            user
            <textarea
              data-testid="gen-user"
              rows={3}
              value={settings.user}
              onChange={(e) => setSettings({ user: e.target.value })}
            />
          </label>
          <label className="check">
            <input
              data-testid="gen-offer-search"
              type="checkbox"
              checked={settings.offerSearchTool}
              onChange={(e) => setSettings({ offerSearchTool: e.target.checked })}
            />
            offer the <code>search</code> tool (the chat template lists it under <code># Tools</code>)
          </label>
        </div>
      ) : null}
      {model && !model.hasTokenizer ? (
        <div className="messages">
          <p className="muted">
            {model.name} has no tokenizer: its prompt is token ids (0–{model.config.vocabSize - 1}) and it
            generates token ids.
          </p>
          <label>
            prompt token ids
            <input
              data-testid="gen-prompt-ids"
              type="text"
              value={settings.promptIds}
              onChange={(e) => setSettings({ promptIds: e.target.value })}
            />
          </label>
        </div>
      ) : null}
      {model ? (
        <div className="row sampling">
          {SAMPLING_FIELDS.map(({ key, label, title }) => (
            <label key={key} title={title}>
              {label}
              <input
                data-testid={`gen-${key}`}
                type="text"
                inputMode="decimal"
                value={settings[key] as string}
                onChange={(e) => setSettings({ [key]: e.target.value })}
              />
            </label>
          ))}
          <button
            type="button"
            data-testid="generate"
            disabled={generating || loading}
            onClick={() => void generate()}
          >
            Generate
          </button>
          <button
            type="button"
            data-testid="stop"
            disabled={!generating || stopRequested}
            onClick={() => stop()}
          >
            Stop
          </button>
        </div>
      ) : null}
      {generation ? <GenerationView generation={generation} /> : null}
    </section>
  );
}

function statusLine(g: Generation): string {
  const n = g.tokens.length;
  const speed = [
    g.firstTokenMs !== null ? `first token ${(g.firstTokenMs / 1000).toFixed(2)} s` : null,
    g.tokensPerSecond !== null ? `${g.tokensPerSecond.toFixed(1)} tokens/s after it` : null,
  ]
    .filter(Boolean)
    .join(' · ');
  const tokens = `${n} token${n === 1 ? '' : 's'}`;
  switch (g.status) {
    case 'running':
      return `generating… ${tokens}${speed ? ` · ${speed}` : ''}`;
    case 'done':
      return `done — ${tokens}, ${g.finish === 'stop' ? 'ended by a stop token' : 'reached max new tokens'}${speed ? ` · ${speed}` : ''}`;
    case 'stopped':
      return `stopped — ${tokens}${speed ? ` · ${speed}` : ''}`;
    case 'error':
      return `ERROR — ${g.error}`;
  }
}

function tokenTitle(t: GenToken): string {
  return `id ${t.id} · logprob ${t.logprob.toFixed(3)} · p ${Math.exp(t.logprob).toPrecision(3)}`;
}

function shown(t: GenToken): string {
  if (t.piece === null) return String(t.id); // no tokenizer: ids
  // Embedding rows past the tokenizer's last token (Qwen pads the vocabulary) decode to nothing.
  if (t.piece === '' && t.alone === '') return `⟨${t.id}⟩`;
  return t.piece;
}

function GenerationView({ generation: g }: { generation: Generation }) {
  const statusClass = g.status === 'error' ? 'status-error' : g.status === 'running' ? '' : 'status-pass';
  return (
    <div className="generation">
      <p className={`status ${statusClass}`} data-testid="gen-status">
        {statusLine(g)}
      </p>
      {g.promptText !== null ? (
        <details>
          <summary data-testid="gen-prompt-summary">
            prompt: {g.promptIds.length} tokens (chat template of {g.modelName})
          </summary>
          <pre className="prompt" data-testid="gen-prompt">
            {g.promptText}
          </pre>
        </details>
      ) : g.promptIds.length > 0 ? (
        <p className="muted">prompt ids: {g.promptIds.join(' ')}</p>
      ) : null}
      <div className="output" data-testid="gen-output" data-text={g.text ?? undefined}>
        {g.tokens.map((t, i) => (
          <span
            // biome-ignore lint/suspicious/noArrayIndexKey: tokens only ever append; the index is the identity
            key={i}
            className={g.text === null ? 'tok id' : 'tok'}
            title={tokenTitle(t)}
            data-id={t.id}
            data-logprob={t.logprob}
          >
            {shown(t)}
          </span>
        ))}
        {g.status === 'running' ? <span className="cursor">▌</span> : null}
      </div>
      {g.tokens.length > 0 ? (
        <details>
          <summary>per-token log-probabilities</summary>
          <table className="cases" data-testid="gen-logprobs">
            <thead>
              <tr>
                <th>#</th>
                <th>id</th>
                <th>token</th>
                <th>logprob</th>
                <th>p</th>
              </tr>
            </thead>
            <tbody>
              {g.tokens.map((t, i) => (
                // biome-ignore lint/suspicious/noArrayIndexKey: rows only ever append
                <tr key={i}>
                  <td>{i + 1}</td>
                  <td>{t.id}</td>
                  <td>
                    <code>{t.alone === null ? '—' : JSON.stringify(t.alone)}</code>
                  </td>
                  <td>{t.logprob.toFixed(4)}</td>
                  <td>{Math.exp(t.logprob).toPrecision(3)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </details>
      ) : null}
    </div>
  );
}
