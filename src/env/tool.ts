/**
 * Tools the model can call. A tool is a name, a description, a JSON Schema for its arguments (OpenAI
 * function format) and an `execute` function. Adding a tool is one file that exports a `Tool` (or a
 * factory returning one) and one `registry.register(...)` line.
 */
import { validateJsonSchema } from './json-schema.ts';
import type { JsonObject, JsonSchema, ToolSpec } from './types.ts';

/** What a tool returns. `content` is what the model reads inside `<tool_response>`. */
export interface ToolResult {
  content: string;
  /** False when the tool could not do what was asked (the model gets `content` as the error). */
  success: boolean;
  /**
   * Ids of the passages a retrieval tool returned, in rank order. The ToolEnv uses them for the
   * gold-retrieval process reward and to detect searches that bring nothing new.
   */
  retrievedIds?: string[];
  /** Anything else worth logging (scores, timings). */
  metadata?: Record<string, unknown>;
}

/** A callable tool. `TArgs` is the argument object its schema describes. */
export interface Tool<TArgs extends JsonObject = JsonObject> {
  readonly name: string;
  readonly description: string;
  /** JSON Schema of the arguments; must describe an object. */
  readonly parameters: JsonSchema;
  /** Runs the tool on arguments that already passed schema validation. May throw; the env catches. */
  execute(args: TArgs): ToolResult | Promise<ToolResult>;
}

/** Tool names the chat template and the parser accept: what OpenAI allows for function names. */
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** The OpenAI-format spec of a tool, for the chat template's `tools` and the policy. */
export function toToolSpec(tool: Tool): ToolSpec {
  return {
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  };
}

/** Validates tool arguments against the tool's schema; empty when valid. */
export function validateToolArguments(tool: Tool, args: unknown): string[] {
  return validateJsonSchema(args, tool.parameters);
}

/** Checks a tool definition; throws with a clear message when it is unusable. */
export function assertValidTool(tool: Tool): void {
  if (!TOOL_NAME.test(tool.name)) {
    throw new Error(`invalid tool name ${JSON.stringify(tool.name)}: use 1-64 letters, digits, '_' or '-'`);
  }
  if (tool.parameters.type !== 'object') {
    throw new Error(`tool '${tool.name}': parameters must be a JSON Schema with type "object"`);
  }
  for (const [name, property] of Object.entries(tool.parameters.properties ?? {})) {
    if (property.pattern !== undefined) {
      try {
        new RegExp(property.pattern, 'u');
      } catch {
        throw new Error(`tool '${tool.name}': property '${name}' has an invalid pattern`);
      }
    }
  }
  if (typeof tool.execute !== 'function') throw new Error(`tool '${tool.name}': execute is not a function`);
}

/** Identity helper that keeps a tool's argument type attached to its definition. */
export function defineTool<TArgs extends JsonObject>(tool: Tool<TArgs>): Tool<TArgs> {
  assertValidTool(tool as unknown as Tool);
  return tool;
}

/** A set of tools with unique names, in registration order. */
export class ToolRegistry {
  private readonly tools = new Map<string, Tool>();

  constructor(tools: Iterable<Tool> = []) {
    for (const tool of tools) this.register(tool);
  }

  /** Adds a tool; throws when the name is taken or the definition is invalid. */
  register<TArgs extends JsonObject>(tool: Tool<TArgs>): this {
    const generic = tool as unknown as Tool;
    assertValidTool(generic);
    if (this.tools.has(tool.name)) throw new Error(`tool '${tool.name}' is already registered`);
    this.tools.set(tool.name, generic);
    return this;
  }

  get(name: string): Tool | undefined {
    return this.tools.get(name);
  }

  has(name: string): boolean {
    return this.tools.has(name);
  }

  names(): string[] {
    return [...this.tools.keys()];
  }

  list(): Tool[] {
    return [...this.tools.values()];
  }

  specs(): ToolSpec[] {
    return this.list().map(toToolSpec);
  }

  get size(): number {
    return this.tools.size;
  }
}
