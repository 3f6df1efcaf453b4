/**
 * A small JSON Schema validator for tool arguments. Tool schemas are tiny (a handful of typed
 * properties), so a dependency-free subset is enough: type, properties, required, additionalProperties,
 * items, enum, const, numeric bounds, string length and pattern, array length. The messages are meant
 * to be read by the model, e.g. `query: expected string, got number`.
 */
import type { JsonSchema, JsonSchemaType } from './types.ts';

/** Validates `value` against `schema`; returns human-readable problems, empty when valid. */
export function validateJsonSchema(value: unknown, schema: JsonSchema, path = ''): string[] {
  const errors: string[] = [];
  const at = path === '' ? '' : `${path}: `;

  if (schema.type !== undefined) {
    const allowed = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!allowed.some((t) => matchesType(value, t))) {
      errors.push(`${at}expected ${allowed.join(' or ')}, got ${describeType(value)}`);
      return errors; // Later checks would only repeat the type mismatch in other words.
    }
  }

  if (schema.const !== undefined && !jsonEqual(value, schema.const)) {
    errors.push(`${at}must be ${JSON.stringify(schema.const)}`);
  }
  if (schema.enum !== undefined && !schema.enum.some((option) => jsonEqual(value, option))) {
    errors.push(`${at}must be one of ${schema.enum.map((o) => JSON.stringify(o)).join(', ')}`);
  }

  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum)
      errors.push(`${at}must be >= ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum)
      errors.push(`${at}must be <= ${schema.maximum}`);
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) {
      errors.push(`${at}must be > ${schema.exclusiveMinimum}`);
    }
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) {
      errors.push(`${at}must be < ${schema.exclusiveMaximum}`);
    }
  }

  if (typeof value === 'string') {
    const length = [...value].length; // JSON Schema counts code points, not UTF-16 units.
    if (schema.minLength !== undefined && length < schema.minLength) {
      errors.push(`${at}must have at least ${schema.minLength} character(s)`);
    }
    if (schema.maxLength !== undefined && length > schema.maxLength) {
      errors.push(`${at}must have at most ${schema.maxLength} character(s)`);
    }
    if (schema.pattern !== undefined && !safeRegExp(schema.pattern)?.test(value)) {
      errors.push(`${at}must match /${schema.pattern}/`);
    }
  }

  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) {
      errors.push(`${at}must have at least ${schema.minItems} item(s)`);
    }
    if (schema.maxItems !== undefined && value.length > schema.maxItems) {
      errors.push(`${at}must have at most ${schema.maxItems} item(s)`);
    }
    if (schema.items !== undefined) {
      const items = schema.items;
      value.forEach((item, i) => {
        errors.push(...validateJsonSchema(item, items, `${path}[${i}]`));
      });
    }
  }

  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const record = value as Record<string, unknown>;
    for (const name of schema.required ?? []) {
      if (!Object.hasOwn(record, name)) errors.push(`${at}missing required property '${name}'`);
    }
    const properties = schema.properties ?? {};
    for (const [name, child] of Object.entries(record)) {
      const childPath = path === '' ? name : `${path}.${name}`;
      if (Object.hasOwn(properties, name)) {
        errors.push(...validateJsonSchema(child, properties[name], childPath));
      } else if (schema.additionalProperties === false) {
        errors.push(`${at}unexpected property '${name}'`);
      } else if (typeof schema.additionalProperties === 'object') {
        errors.push(...validateJsonSchema(child, schema.additionalProperties, childPath));
      }
    }
  }
  return errors;
}

function matchesType(value: unknown, type: JsonSchemaType): boolean {
  switch (type) {
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'null':
      return value === null;
    case 'array':
      return Array.isArray(value);
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value);
    default:
      return false;
  }
}

function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number' && Number.isInteger(value)) return 'integer';
  return typeof value;
}

function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every(
    (k) =>
      Object.hasOwn(b, k) && jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
  );
}

/** Compiles a schema pattern once per call; a pattern that is not a valid RegExp matches nothing. */
function safeRegExp(pattern: string): RegExp | null {
  try {
    return new RegExp(pattern, 'u');
  } catch {
    return null;
  }
}
