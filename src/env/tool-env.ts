/**
 * ToolEnv: the multi-turn tool-use environment of Agent-R1.
 *
 * Each `step(action)` takes the model's text for one assistant turn and
 *   1. parses it (parse.ts): `<tool_call>` JSON blocks and the final `<answer>`;
 *   2. validates each call's arguments against the tool's JSON Schema and runs at most
 *      `maxCallsPerTurn` calls (default 1, as in Agent-R1);
 *   3. answers with `tool` messages plus the exact text Qwen's chat template renders for them, also
 *      as glue and data pieces (a tool result is data: its `<|im_end|>` is text, never a token);
 *   4. reports the process reward parts separately (gold retrieval, format penalty, call penalty);
 *   5. decides `done`: an answer, a turn with no tool call, the turn limit, the tool-call budget or the
 *      context budget. The step that ends the episode carries the outcome reward.
 *
 * Malformed turns never throw: the model reads an `Error: …` observation and the turn is penalised.
 * Calling step() after the episode ended is a caller bug and does throw.
 */
import { GENERATION_PROMPT, IM_END, IM_START, renderToolResponses } from './chat-format.ts';
import { pythonJsonDumps, truncateText } from './json.ts';
import { DEFAULT_MAX_ACTION_CHARS, type ParsedTurn, parseTurn } from './parse.ts';
import { DEFAULT_SYSTEM_PROMPT, initialMessages } from './prompt.ts';
import {
  DEFAULT_OUTCOME_REWARD,
  DEFAULT_PROCESS_REWARD,
  type OutcomeRewardConfig,
  outcomeReward,
  type ProcessRewardConfig,
} from './reward.ts';
import { stripStopTokens } from './text.ts';
import { type Tool, ToolRegistry, validateToolArguments } from './tool.ts';
import type {
  Action,
  ChatMessage,
  DoneReason,
  JsonObject,
  Observation,
  OutcomeReward,
  ProcessReward,
  State,
  StepCallInfo,
  StepResult,
  TextPiece,
  ToolSpec,
} from './types.ts';

/** What the env needs to know about a task. QaTask satisfies it. */
export interface EnvTask {
  id: string;
  question: string;
  /** Gold answers and aliases (for the outcome reward). */
  answers: readonly string[];
  /** Gold passage ids (for the retrieval process reward); may be empty. */
  supportingIds: readonly string[];
}

export interface ToolEnvConfig {
  /** Assistant turns per episode. */
  maxTurns: number;
  /** Calls executed per turn; extra calls are refused with an error and a format penalty. */
  maxCallsPerTurn: number;
  /** Calls executed per episode; a call attempted beyond it ends the episode ('tool_budget'). */
  maxToolCalls: number;
  /** Context budget in characters of message content; exceeding it ends the episode. */
  maxContextChars: number;
  /** Context budget in tokens, checked when step() is given `contextTokens` by the rollout engine. */
  maxContextTokens: number;
  /** Longer turns are rejected unparsed. */
  maxActionChars: number;
  /** Each tool response is cut to this many characters. */
  maxObservationChars: number;
  process: ProcessRewardConfig;
  outcome: OutcomeRewardConfig;
  systemPrompt: string;
}

export const DEFAULT_TOOL_ENV_CONFIG: Readonly<ToolEnvConfig> = Object.freeze({
  maxTurns: 8,
  maxCallsPerTurn: 1,
  maxToolCalls: 8,
  maxContextChars: Number.POSITIVE_INFINITY,
  maxContextTokens: Number.POSITIVE_INFINITY,
  maxActionChars: DEFAULT_MAX_ACTION_CHARS,
  maxObservationChars: 4000,
  process: DEFAULT_PROCESS_REWARD,
  outcome: DEFAULT_OUTCOME_REWARD,
  systemPrompt: DEFAULT_SYSTEM_PROMPT,
});

/** Partial configuration; nested reward configs may be partial too. */
export type ToolEnvOptions = Partial<Omit<ToolEnvConfig, 'process' | 'outcome'>> & {
  process?: Partial<ProcessRewardConfig>;
  outcome?: Partial<OutcomeRewardConfig>;
};

export function resolveToolEnvConfig(options: ToolEnvOptions = {}): ToolEnvConfig {
  const config: ToolEnvConfig = {
    ...DEFAULT_TOOL_ENV_CONFIG,
    ...options,
    process: { ...DEFAULT_PROCESS_REWARD, ...options.process },
    outcome: { ...DEFAULT_OUTCOME_REWARD, ...options.outcome },
  };
  for (const key of ['maxTurns', 'maxCallsPerTurn', 'maxToolCalls'] as const) {
    if (!Number.isInteger(config[key]) || config[key] < 1)
      throw new Error(`ToolEnv: ${key} must be a positive integer`);
  }
  return config;
}

export interface StepOptions {
  /** Current context length in tokens, when the rollout engine tracks it (checked against maxContextTokens). */
  contextTokens?: number;
}

/** One environment instance runs one episode at a time; reset() starts the next. */
export class ToolEnv {
  readonly config: ToolEnvConfig;
  readonly registry: ToolRegistry;
  readonly task: EnvTask;
  private state: State;
  private parsedTurns: ParsedTurn[] = [];
  private seenPassages = new Set<string>();
  private seenGold = new Set<string>();
  private seenCalls = new Set<string>();
  private lastOutcome: OutcomeReward | undefined;

  constructor(task: EnvTask, tools: ToolRegistry | readonly Tool[], options: ToolEnvOptions = {}) {
    this.config = resolveToolEnvConfig(options);
    this.registry = tools instanceof ToolRegistry ? tools : new ToolRegistry(tools);
    if (this.registry.size === 0) throw new Error('ToolEnv needs at least one tool');
    this.task = task;
    this.state = this.freshState();
  }

  /** The tools in OpenAI format, for the chat template and the policy. */
  get toolSpecs(): ToolSpec[] {
    return this.registry.specs();
  }

  /** Starts (or restarts) the episode; returns the initial state. */
  reset(): State {
    this.state = this.freshState();
    this.parsedTurns = [];
    this.seenPassages = new Set();
    this.seenGold = new Set();
    this.seenCalls = new Set();
    this.lastOutcome = undefined;
    return this.snapshot();
  }

  /** A copy of the current state (the env keeps its own). */
  snapshot(): State {
    return { ...this.state, messages: this.state.messages.map((m) => ({ ...m })) };
  }

  /** The outcome reward, once the episode is done. */
  get outcome(): OutcomeReward | undefined {
    return this.lastOutcome;
  }

  /** Parsed assistant turns so far (for format statistics). */
  get turns(): readonly ParsedTurn[] {
    return this.parsedTurns;
  }

  async step(action: Action, options: StepOptions = {}): Promise<StepResult> {
    if (this.state.done) throw new Error('ToolEnv.step: the episode is over; call reset() first');
    const config = this.config;
    const text = typeof action === 'string' ? action : '';
    const parsed = parseTurn(action, { maxChars: config.maxActionChars });
    this.parsedTurns.push(parsed);
    this.state.turn += 1;
    this.state.messages.push({ role: 'assistant', content: stripStopTokens(text) });

    const reward = { retrieval: 0, format: 0, call: 0 };
    const toolMessages: ChatMessage[] = [];
    const calls: StepCallInfo[] = [];
    let doneReason: DoneReason | undefined;

    if (parsed.kind === 'invalid') {
      // A malformed turn runs nothing, not even its well-formed calls: its intent is ambiguous.
      reward.format += config.process.invalidFormat;
      toolMessages.push({ role: 'tool', content: this.formatErrorMessage(parsed.errors) });
    } else if (parsed.kind === 'answer') {
      doneReason = 'answer';
    } else if (parsed.kind === 'none') {
      doneReason = 'no_tool_call';
    } else {
      const allowed = parsed.toolCalls.slice(0, config.maxCallsPerTurn);
      const refused = parsed.toolCalls.slice(config.maxCallsPerTurn);
      for (const call of allowed) {
        if (this.state.toolCalls >= config.maxToolCalls) {
          calls.push({ name: call.name, arguments: call.arguments, status: 'budget', success: false });
          reward.call += config.process.failedCall;
          toolMessages.push({
            role: 'tool',
            content: `Error: the tool-call budget (${config.maxToolCalls}) is used up.`,
          });
          doneReason = 'tool_budget';
          break;
        }
        const { info, content } = await this.runCall(call.name, call.arguments);
        calls.push(info);
        toolMessages.push({ role: 'tool', content: truncateText(content, config.maxObservationChars) });
        if (!info.success) reward.call += config.process.failedCall;
        else if (info.ineffective) reward.call += config.process.ineffectiveCall;
        if ((info.newGoldIds?.length ?? 0) > 0) reward.retrieval += config.process.goldRetrieval;
      }
      if (refused.length > 0) {
        reward.format += config.process.invalidFormat;
        for (const call of refused) {
          calls.push({ name: call.name, arguments: call.arguments, status: 'refused', success: false });
        }
        toolMessages.push({
          role: 'tool',
          content: `Error: at most ${config.maxCallsPerTurn} tool call(s) per turn; ${refused.length} extra call(s) ignored.`,
        });
      }
    }

    this.state.messages.push(...toolMessages);
    if (doneReason === undefined) doneReason = this.budgetDoneReason(options);
    const done = doneReason !== undefined;
    if (done) {
      this.state.done = true;
      this.state.doneReason = doneReason;
      this.lastOutcome = outcomeReward(
        this.parsedTurns,
        this.task.answers,
        config.maxCallsPerTurn,
        config.outcome,
      );
    }

    const observationText = renderToolResponses(toolMessages.map((m) => m.content));
    const continuationPieces = done || observationText === '' ? [] : continuationPiecesFor(toolMessages);
    const observation: Observation = {
      messages: toolMessages,
      text: observationText,
      continuation: continuationPieces.map((p) => p.text).join(''),
      continuationPieces,
    };
    const processReward: ProcessReward = { ...reward, total: reward.retrieval + reward.format + reward.call };
    return {
      observation,
      reward: processReward,
      done,
      doneReason,
      outcome: done ? this.lastOutcome : undefined,
      info: {
        calls,
        formatErrors: parsed.errors,
        answer: parsed.answer,
        wellFormed:
          parsed.kind === 'tool_calls'
            ? parsed.toolCalls.length <= config.maxCallsPerTurn
            : parsed.kind === 'answer',
      },
    };
  }

  /**
   * Ends the episode where it stands, without another turn (the policy could not write one, e.g. its
   * context window is full): done with `reason`, the outcome scored on the turns so far.
   */
  stop(reason: DoneReason): OutcomeReward {
    if (this.state.done) throw new Error('ToolEnv.stop: the episode is already done');
    this.state.done = true;
    this.state.doneReason = reason;
    this.lastOutcome = outcomeReward(
      this.parsedTurns,
      this.task.answers,
      this.config.maxCallsPerTurn,
      this.config.outcome,
    );
    return this.lastOutcome;
  }

  /** Validates and runs one call; never throws. */
  private async runCall(name: string, args: JsonObject): Promise<{ info: StepCallInfo; content: string }> {
    const tool = this.registry.get(name);
    const argsJson = args;
    if (!tool) {
      return {
        info: { name, arguments: argsJson, status: 'unknown_tool', success: false },
        content: `Error: unknown tool '${name}'. Available tools: ${this.registry.names().join(', ')}.`,
      };
    }
    const problems = validateToolArguments(tool, args);
    if (problems.length > 0) {
      return {
        info: { name, arguments: argsJson, status: 'invalid_arguments', success: false },
        content: `Error: invalid tool arguments for '${name}': ${problems.join('; ')}.`,
      };
    }
    let result: Awaited<ReturnType<Tool['execute']>>;
    try {
      result = await tool.execute(argsJson);
    } catch (error) {
      return {
        info: { name, arguments: argsJson, status: 'tool_error', success: false },
        content: `Error: tool '${name}' failed: ${error instanceof Error ? error.message : String(error)}`,
      };
    }
    this.state.toolCalls += 1;
    const info: StepCallInfo = {
      name,
      arguments: argsJson,
      status: 'executed',
      success: result.success === true,
    };
    if (result.retrievedIds !== undefined) {
      const gold = new Set(this.task.supportingIds);
      const fresh = result.retrievedIds.filter((id) => !this.seenPassages.has(id));
      info.retrievedIds = [...result.retrievedIds];
      info.newGoldIds = fresh.filter((id) => gold.has(id) && !this.seenGold.has(id));
      info.ineffective = info.success && fresh.length === 0;
      for (const id of result.retrievedIds) this.seenPassages.add(id);
      for (const id of info.newGoldIds) this.seenGold.add(id);
    } else {
      const signature = `${name}\u0000${pythonJsonDumps(args)}`;
      info.ineffective = info.success && this.seenCalls.has(signature);
      this.seenCalls.add(signature);
    }
    return { info, content: typeof result.content === 'string' ? result.content : String(result.content) };
  }

  private budgetDoneReason(options: StepOptions): DoneReason | undefined {
    const config = this.config;
    if (this.state.turn >= config.maxTurns) return 'max_turns';
    const chars = this.state.messages.reduce((sum, m) => sum + m.content.length, 0);
    if (chars > config.maxContextChars) return 'context_budget';
    if (options.contextTokens !== undefined && options.contextTokens > config.maxContextTokens)
      return 'context_budget';
    return undefined;
  }

  private formatErrorMessage(errors: readonly string[]): string {
    const example = this.registry.names()[0];
    return (
      `Error: invalid format: ${errors.join('; ')}. ` +
      `Call a tool with <tool_call>{"name": "${example}", "arguments": {...}}</tool_call>, ` +
      'or give the final answer as <answer>...</answer>.'
    );
  }

  private freshState(): State {
    return {
      taskId: this.task.id,
      question: this.task.question,
      messages: initialMessages(this.task.question, this.config.systemPrompt),
      turn: 0,
      toolCalls: 0,
      done: false,
    };
  }
}

/**
 * The continuation after the model's `<|im_end|>` as glue and data pieces: '\n' + the template's
 * rendering of the tool messages (renderToolResponses) + the generation prompt. The contents are data.
 */
function continuationPiecesFor(toolMessages: readonly ChatMessage[]): TextPiece[] {
  const pieces: TextPiece[] = [{ text: `\n${IM_START}user`, data: false }];
  for (const m of toolMessages) {
    pieces.push({ text: '\n<tool_response>\n', data: false });
    pieces.push({ text: m.content, data: true });
    pieces.push({ text: '\n</tool_response>', data: false });
  }
  pieces.push({ text: `${IM_END}\n${GENERATION_PROMPT}`, data: false });
  return pieces;
}
