/**
 * Runs policies in the ToolEnv and reports EM, F1, substring EM, mean turns, tool calls, format-error
 * rates and rewards, overall and per question type. Also turns episodes into supervised (SFT) examples.
 */
import { renderQwen3Chat } from './chat-format.ts';
import { ContextFullError, type Policy } from './policies/policy.ts';
import type { QaTask } from './tasks/schema.ts';
import type { Tool, ToolRegistry } from './tool.ts';
import { ToolEnv, type ToolEnvOptions } from './tool-env.ts';
import type { ChatMessage, DoneReason, OutcomeReward, ProcessReward, State, ToolSpec } from './types.ts';

export interface EpisodeResult {
  taskId: string;
  source: string;
  type?: string;
  question: string;
  answers: string[];
  prediction: string | null;
  em: number;
  f1: number;
  subEm: number;
  outcome: OutcomeReward;
  /** Process reward summed over the episode, part by part. */
  processReward: ProcessReward;
  turns: number;
  toolCalls: number;
  /** Turns with a format error. */
  formatErrorTurns: number;
  doneReason: DoneReason;
  messages: ChatMessage[];
  tools: ToolSpec[];
}

export interface MetricSummary {
  n: number;
  em: number;
  f1: number;
  subEm: number;
}

export interface EvaluationReport extends MetricSummary {
  policy: string;
  meanTurns: number;
  meanToolCalls: number;
  /** Share of episodes whose format is invalid (the outcome gate stayed closed). */
  formatErrorRate: number;
  /** Share of turns with a format error. */
  turnFormatErrorRate: number;
  meanOutcome: number;
  meanProcessReward: number;
  byType: Record<string, MetricSummary>;
  episodes: EpisodeResult[];
}

export interface EvaluateOptions {
  /** The tools of each task, e.g. pooledSearchTools(corpus) or perQuestionSearchTools(). */
  tools: (task: QaTask) => readonly Tool[] | ToolRegistry;
  env?: ToolEnvOptions;
  /** Called after each episode (progress bars, streaming to the UI). */
  onEpisode?: (episode: EpisodeResult, index: number) => void;
}

/** Plays one episode of `policy` in `env` from reset to done. */
export async function runEpisode(policy: Policy, env: ToolEnv, task: QaTask): Promise<EpisodeResult> {
  let state = env.reset();
  const tools = env.toolSpecs;
  const processReward: ProcessReward = { retrieval: 0, format: 0, call: 0, total: 0 };
  let formatErrorTurns = 0;
  for (;;) {
    let action: string;
    try {
      action = await policy.act(state, tools);
    } catch (e) {
      if (!(e instanceof ContextFullError)) throw e;
      const outcome = env.stop('context_budget');
      state = env.snapshot();
      return episodeResult(task, state, tools, outcome, processReward, formatErrorTurns, 'context_budget');
    }
    const step = await env.step(action);
    processReward.retrieval += step.reward.retrieval;
    processReward.format += step.reward.format;
    processReward.call += step.reward.call;
    processReward.total += step.reward.total;
    if (step.info.formatErrors.length > 0) formatErrorTurns++;
    state = env.snapshot();
    if (step.done) {
      return episodeResult(
        task,
        state,
        tools,
        step.outcome!,
        processReward,
        formatErrorTurns,
        step.doneReason!,
      );
    }
  }
}

function episodeResult(
  task: QaTask,
  state: Readonly<State>,
  tools: ToolSpec[],
  outcome: OutcomeReward,
  processReward: ProcessReward,
  formatErrorTurns: number,
  doneReason: DoneReason,
): EpisodeResult {
  return {
    taskId: task.id,
    source: task.source,
    type: task.type,
    question: task.question,
    answers: task.answers,
    prediction: outcome.prediction,
    em: outcome.em,
    f1: outcome.f1,
    subEm: outcome.subEm,
    outcome,
    processReward,
    turns: state.turn,
    toolCalls: state.toolCalls,
    formatErrorTurns,
    doneReason,
    messages: state.messages,
    tools,
  };
}

/**
 * Evaluates a policy on tasks, one episode each, in order. Model mistakes are scored, never thrown (a
 * model whose context window fills ends that episode: context_budget); any other exception from the
 * policy itself (a bug or a crashed model) aborts the evaluation.
 */
export async function evaluate(
  policy: Policy,
  tasks: readonly QaTask[],
  options: EvaluateOptions,
): Promise<EvaluationReport> {
  const episodes: EpisodeResult[] = [];
  for (const [index, task] of tasks.entries()) {
    const env = new ToolEnv(task, options.tools(task), options.env);
    const episode = await runEpisode(policy, env, task);
    episodes.push(episode);
    options.onEpisode?.(episode, index);
  }
  return summarise(policy.name, episodes);
}

/** Aggregates episode results into a report. */
export function summarise(policy: string, episodes: EpisodeResult[]): EvaluationReport {
  const mean = (f: (e: EpisodeResult) => number, list = episodes) =>
    list.length === 0 ? 0 : list.reduce((s, e) => s + f(e), 0) / list.length;
  const totalTurns = episodes.reduce((s, e) => s + e.turns, 0);
  const byType: Record<string, MetricSummary> = {};
  for (const type of new Set(episodes.map((e) => e.type ?? 'untyped'))) {
    const list = episodes.filter((e) => (e.type ?? 'untyped') === type);
    byType[type] = {
      n: list.length,
      em: mean((e) => e.em, list),
      f1: mean((e) => e.f1, list),
      subEm: mean((e) => e.subEm, list),
    };
  }
  return {
    policy,
    n: episodes.length,
    em: mean((e) => e.em),
    f1: mean((e) => e.f1),
    subEm: mean((e) => e.subEm),
    meanTurns: mean((e) => e.turns),
    meanToolCalls: mean((e) => e.toolCalls),
    formatErrorRate: mean((e) => (e.outcome.formatValid ? 0 : 1)),
    turnFormatErrorRate:
      totalTurns === 0 ? 0 : episodes.reduce((s, e) => s + e.formatErrorTurns, 0) / totalTurns,
    meanOutcome: mean((e) => e.outcome.outcome),
    meanProcessReward: mean((e) => e.processReward.total),
    byType,
    episodes,
  };
}

/** A supervised warm-start example: the chat messages, the tools, and the text Qwen3's template renders. */
export interface SftExample {
  messages: ChatMessage[];
  tools: ToolSpec[];
  text: string;
}

export function episodeToSftExample(episode: EpisodeResult): SftExample {
  return {
    messages: episode.messages,
    tools: episode.tools,
    text: renderQwen3Chat(episode.messages, { tools: episode.tools }),
  };
}
