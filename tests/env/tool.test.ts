import { describe, expect, it } from 'vitest';
import { validateJsonSchema } from '../../src/env/json-schema.ts';
import {
  defineTool,
  type Tool,
  ToolRegistry,
  toToolSpec,
  validateToolArguments,
} from '../../src/env/tool.ts';
import type { JsonSchema } from '../../src/env/types.ts';

describe('validateJsonSchema', () => {
  const schema: JsonSchema = {
    type: 'object',
    properties: {
      query: { type: 'string', minLength: 1, maxLength: 5 },
      k: { type: 'integer', minimum: 1, maximum: 10 },
      mode: { enum: ['fast', 'deep'] },
      tags: { type: 'array', items: { type: 'string' }, maxItems: 2 },
      score: { type: ['number', 'null'], exclusiveMinimum: 0 },
      code: { type: 'string', pattern: '^[A-Z]{2}$' },
    },
    required: ['query'],
    additionalProperties: false,
  };

  it('accepts valid arguments', () => {
    expect(
      validateJsonSchema({ query: 'abc', k: 3, mode: 'deep', tags: ['a'], score: null, code: 'FR' }, schema),
    ).toEqual([]);
  });

  it('reports each problem with its path, in words a model can act on', () => {
    expect(validateJsonSchema({}, schema)).toEqual(["missing required property 'query'"]);
    expect(validateJsonSchema({ query: 7 }, schema)).toEqual(['query: expected string, got integer']);
    expect(validateJsonSchema({ query: 'abc', k: 2.5 }, schema)).toEqual(['k: expected integer, got number']);
    expect(validateJsonSchema({ query: '', k: 11 }, schema)).toEqual([
      'query: must have at least 1 character(s)',
      'k: must be <= 10',
    ]);
    expect(validateJsonSchema({ query: 'abcdef' }, schema)).toEqual([
      'query: must have at most 5 character(s)',
    ]);
    expect(validateJsonSchema({ query: 'a', mode: 'slow' }, schema)).toEqual([
      'mode: must be one of "fast", "deep"',
    ]);
    expect(validateJsonSchema({ query: 'a', tags: ['x', 1, 'z'] }, schema)).toEqual([
      'tags: must have at most 2 item(s)',
      'tags[1]: expected string, got integer',
    ]);
    expect(validateJsonSchema({ query: 'a', score: 0 }, schema)).toEqual(['score: must be > 0']);
    expect(validateJsonSchema({ query: 'a', code: 'fr' }, schema)).toEqual(['code: must match /^[A-Z]{2}$/']);
    expect(validateJsonSchema({ query: 'a', extra: 1 }, schema)).toEqual(["unexpected property 'extra'"]);
    expect(validateJsonSchema([], schema)).toEqual(['expected object, got array']);
    expect(validateJsonSchema(null, schema)).toEqual(['expected object, got null']);
  });

  it('counts string length in code points and checks const and nested schemas', () => {
    expect(validateJsonSchema('😀😀', { type: 'string', maxLength: 2 })).toEqual([]);
    expect(
      validateJsonSchema({ a: { b: 1 } }, { properties: { a: { properties: { b: { const: 2 } } } } }),
    ).toEqual(['a.b: must be 2']);
    expect(
      validateJsonSchema({ x: 'y' }, { type: 'object', additionalProperties: { type: 'number' } }),
    ).toEqual(['x: expected number, got string']);
    expect(validateJsonSchema(Number.NaN, { type: 'number' })).toEqual(['expected number, got number']);
  });
});

describe('Tool and ToolRegistry', () => {
  const echo = defineTool<{ text: string }>({
    name: 'echo',
    description: 'Repeat.',
    parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
    execute: ({ text }) => ({ content: text, success: true }),
  });

  it('exposes OpenAI function specs', () => {
    const registry = new ToolRegistry().register(echo);
    expect(registry.specs()).toEqual([
      {
        type: 'function',
        function: {
          name: 'echo',
          description: 'Repeat.',
          parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
        },
      },
    ]);
    expect(toToolSpec(echo as unknown as Tool).function.name).toBe('echo');
    expect(registry.names()).toEqual(['echo']);
    expect(registry.get('echo')).toBe(echo);
    expect(registry.has('nope')).toBe(false);
    expect(validateToolArguments(echo as unknown as Tool, { text: 1 })).toEqual([
      'text: expected string, got integer',
    ]);
  });

  it('rejects bad definitions and duplicate names with clear errors', () => {
    const registry = new ToolRegistry([echo as unknown as Tool]);
    expect(() => registry.register(echo)).toThrow(/already registered/);
    const base = { description: 'd', execute: () => ({ content: '', success: true }) };
    expect(() => defineTool({ ...base, name: 'has space', parameters: { type: 'object' } })).toThrow(
      /invalid tool name/,
    );
    expect(() => defineTool({ ...base, name: 'x', parameters: { type: 'string' } })).toThrow(/type "object"/);
    expect(() =>
      defineTool({ ...base, name: 'x', parameters: { type: 'object', properties: { a: { pattern: '(' } } } }),
    ).toThrow(/invalid pattern/);
  });
});
