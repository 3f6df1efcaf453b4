// Form fields bound to one key of the TrainConfig ("actor.lr"). A field keeps what was typed; the
// config changes only when resolveConfig accepts the edit, otherwise the field shows its error (the
// config's own message, naming the key) and the last valid value stays in force.
import { useState } from 'react';
import { DEFAULT_CONFIG, resolveConfig, type TrainConfig } from '../../rl/config.ts';
import { useLab } from '../store.ts';

function getPath(obj: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], obj);
}

function withPath(config: TrainConfig, path: string, value: unknown): TrainConfig {
  const out = structuredClone(config) as unknown as Record<string, unknown>;
  const keys = path.split('.');
  let o = out;
  for (const k of keys.slice(0, -1)) o = o[k] as Record<string, unknown>;
  o[keys.at(-1)!] = value;
  return out as unknown as TrainConfig;
}

/** Applies one edit; returns the error text, or null when the config took it. */
function useConfigEdit(path: string): [unknown, (value: unknown) => string | null] {
  const config = useLab((s) => s.trainConfig);
  const setConfig = useLab((s) => s.setTrainConfig);
  const apply = (value: unknown): string | null => {
    try {
      setConfig(resolveConfig(withPath(config, path, value)));
      return null;
    } catch (e) {
      return e instanceof Error ? e.message.replace(/^config: /, '') : String(e);
    }
  };
  return [getPath(config, path), apply];
}

interface FieldProps {
  path: string;
  label: string;
  hint?: string;
  disabled?: boolean;
}

export function NumberField({ path, label, hint, disabled }: FieldProps) {
  const [value, apply] = useConfigEdit(path);
  const [text, setText] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const def = getPath(DEFAULT_CONFIG, path);
  return (
    <label className="field" title={hint}>
      <span className="field-label">{label}</span>
      <input
        data-testid={`cfg-${path}`}
        type="text"
        inputMode="decimal"
        disabled={disabled}
        value={text ?? String(value)}
        className={error ? 'invalid' : undefined}
        onChange={(e) => {
          setText(e.target.value);
          const v = Number(e.target.value);
          setError(
            e.target.value.trim() === '' ? 'a number is needed' : apply(Number.isNaN(v) ? e.target.value : v),
          );
        }}
        onBlur={() => {
          if (!error) setText(null);
        }}
      />
      <span className="field-note">
        {error ? <span className="error-text">{error}</span> : `default ${String(def)}`}
      </span>
    </label>
  );
}

export function SelectField({
  path,
  label,
  hint,
  disabled,
  options,
}: FieldProps & { options: readonly { value: string; label: string }[] }) {
  const [value, apply] = useConfigEdit(path);
  const [error, setError] = useState<string | null>(null);
  return (
    <label className="field" title={hint}>
      <span className="field-label">{label}</span>
      <select
        data-testid={`cfg-${path}`}
        disabled={disabled}
        value={String(value)}
        onChange={(e) => setError(apply(e.target.value))}
      >
        {options.map((o) => (
          <option key={o.value} value={o.value}>
            {o.label}
          </option>
        ))}
      </select>
      {error ? <span className="field-note error-text">{error}</span> : null}
    </label>
  );
}

export function CheckField({ path, label, hint, disabled }: FieldProps) {
  const [value, apply] = useConfigEdit(path);
  const [error, setError] = useState<string | null>(null);
  return (
    <label className="field check" title={hint}>
      <input
        data-testid={`cfg-${path}`}
        type="checkbox"
        disabled={disabled}
        checked={value === true}
        onChange={(e) => setError(apply(e.target.checked))}
      />
      <span className="field-label">{label}</span>
      {error ? <span className="field-note error-text">{error}</span> : null}
    </label>
  );
}

/** A list-valued key edited as checkboxes (task.types, task.hops). */
export function ChoiceListField<T extends string | number>({
  path,
  label,
  hint,
  disabled,
  choices,
}: FieldProps & { choices: readonly T[] }) {
  const [value, apply] = useConfigEdit(path);
  const [error, setError] = useState<string | null>(null);
  const list = (value as T[]) ?? [];
  return (
    <fieldset className="field choices" title={hint}>
      <legend className="field-label">{label}</legend>
      {choices.map((c) => (
        <label key={String(c)} className="check">
          <input
            type="checkbox"
            disabled={disabled}
            checked={list.includes(c)}
            onChange={(e) => setError(apply(e.target.checked ? [...list, c] : list.filter((x) => x !== c)))}
          />
          {String(c)}
        </label>
      ))}
      {error ? <span className="field-note error-text">{error}</span> : null}
    </fieldset>
  );
}
