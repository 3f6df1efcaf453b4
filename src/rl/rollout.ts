// Batched multi-turn rollouts, token in / token out, as an async event stream.
//
// A batch is tasks × G samples: rows R = tasks.length · G, row r plays task floor(r / G) as sample
// r % G (its GRPO group is the task index). Every row has its own ToolEnv (tools from toolsFor(task))
// and all rows decode together in ONE TurnSampler (a GenerationSession: one KV cache, one batched
// forward per step over the rows that have new tokens: appends are packed without padding, so a
// finished row costs nothing; a batch whose K/V cache would exceed one storage binding is split over
// sessions of whole groups, ShardedSampler). The G samples of a task share its prompt, which is prefilled in the
// group's first row and copied to the others (TurnSampler.copyRow). A row's token sequence is built
// only from ids, never from re-encoded text:
//
//   ids     = prompt | turn 0: policy ids (…, <|im_end|>) | env ids | turn 1: policy ids | env ids | …
//   prompt  = tokenizer.encodeChat(env.reset().messages, { tools, addGenerationPrompt: true })
//   policy  = exactly the ids the sampler drew, including the stop token it drew
//   env     = tokenizer.encodePieces(Observation.continuationPieces): '\n' + tool responses +
//             '<|im_start|>assistant\n', the template glue as markup and the tool results as plain text
//             (a passage that spells <|im_end|> stays text); the prompt's question is data the same
//             way inside encodeChat
//
// Per token (parallel arrays on the Trajectory): ids, sources ('prompt' | 'policy' | 'env'),
// lossMask (1 exactly on policy ids, the sampled <|im_end|> included), logprobs (the sampler's
// log-prob under its temperature; 0 off-policy) and turnIndex (-1 for the prompt; env ids carry the
// turn they answer). Per turn: processRewards[t] (the StepResult's reward parts, on tokenIndex = the
// turn's last policy token) and turnRecords[t] (action text, calls, tool result text, token spans).
// The ToolEnv reads the decoded policy text without the stop token. Two cases make the environment
// close the turn itself: a turn cut by its token limit without <|im_end|>, and a turn the policy ended
// with <|endoftext|> (treated as a stop).
// In both the env appends '<|im_end|>' as an ENV token (mask 0) before its continuation, so the model
// always sees well-formed turns. When the episode ends, the closing <|im_end|> (if any) is still
// appended to the trajectory, but no continuation: the sequence ends with the last turn's <|im_end|>,
// and for an episode without truncation or <|endoftext|> decode(ids) + '\n' is the chat template's
// rendering of the final messages (Qwen3's template is a fixed point for oracle-style turns).
//
// Budgets:
//   maxTurns            the env's turn limit (overrides request.env.maxTurns); the env ends the
//                       episode with 'max_turns'.
//   maxNewTokensPerTurn a turn stops after this many sampled ids; without <|im_end|> it is a truncated
//                       turn: the env closes it with an env <|im_end|> and still parses its text (a cut
//                       tool call is usually a format error the env penalises).
//   maxTotalTokens      per episode, prompt included. A prompt must leave room for a turn (else a
//                       RolloutError before anything runs). A turn may use at most
//                       maxTotalTokens - length - 1 ids (one slot is kept for a closing <|im_end|>).
//                       After a turn of length L (closing <|im_end|> included) env.step gets
//                       contextTokens = L with the env's maxContextTokens set to at most
//                       maxTotalTokens - 3, so the env ends a row that cannot hold another turn
//                       (continuation >= 1 id, a sampled id, a closing slot) with 'context_budget'.
//                       If the env continues but L + continuation + 2 > maxTotalTokens, the ROLLOUT
//                       ends the row with 'context_budget' itself: that turn's tool responses are not
//                       appended (TurnRecord.resultAppended false; they stay in the env's messages),
//                       and the outcome reward is computed from the env's parsed turns as the env
//                       would (reward.ts outcomeReward). Trajectory.endedByRollout marks this case.
// The sampler holds maxTotalTokens + appendBlock + 1 slots per row: env ids go into the cache in
// blocks of at most appendBlock ids, right-aligned so every row's last id is in the last block, and a
// block overhangs a row's length by at most appendBlock + 1 padding slots (see GenerationSession).
//
// Finished rows cost no sampling (they are inactive in sample(): no tokens, no cache slots); they
// still ride along in the dense [rows, Tq] blocks of the other rows' appends.
//
// Sampling: temperature (0 = greedy, for evaluation), topP, topK and a seed per batch; the sampler's
// randomness is counter-based (seed, step, row), so the same seed and inputs give the same
// trajectories.
//
// Events (rolloutStream): per batch turn, 'turn_started' with the active rows; after the batched
// sampling, 'tokens_sampled' for each active row; then row by row, after that row's env.step:
// 'tool_called' (when the turn had calls), 'tool_result' (when there is a response text or env ids),
// 'reward' (process parts; the outcome on the last step) and 'episode_done'. Last, 'rollout_done' with
// every trajectory and the stats. The generator is lazy: env steps run as events are pulled, and the
// next turn's sampling only starts when the consumer pulls past the current turn's last event.

import type {
  GenerateOptions,
  GenerateResult,
  GenerationSession,
  QwenGpuModel,
} from '../agent/model/qwen-gpu.ts';
import type { ChatTemplateOptions, QwenTokenName } from '../agent/tokenizer/qwen-tokenizer.ts';
import { outcomeReward } from '../env/reward.ts';
import type { Tool, ToolRegistry } from '../env/tool.ts';
import { type EnvTask, ToolEnv, type ToolEnvOptions } from '../env/tool-env.ts';
import type {
  ChatMessage,
  DoneReason,
  JsonValue,
  OutcomeReward,
  ProcessReward,
  StepCallInfo,
  TextPiece,
  ToolSpec,
} from '../env/types.ts';

// ------------------------------------------------------------------------------------ interfaces

/** What the rollout needs from a decoder: GenerationSession implements it; tests script it. */
export interface TurnSampler {
  readonly batch: number;
  readonly maxLen: number;
  /** Appends ids to every row ([] = nothing new) and computes the next-token distributions. */
  append(tokens: ReadonlyArray<ArrayLike<number>>): void;
  /** Samples one turn for the active rows (stop ids, per-row caps: see GenerateOptions). */
  sample(options: GenerateOptions): Promise<GenerateResult>;
  /** Optional: makes rows `to` copies of row `from` (a prompt the G samples share is prefilled once). */
  copyRow?(from: number, to: readonly number[]): void;
  release(): void;
}

/**
 * Starts a sampler of `rows` rows with `maxLen` cache slots per row; rows come in groups of
 * `groupSize` that share a prompt (copyRow stays within a group).
 */
export type SamplerFactory = (rows: number, maxLen: number, groupSize?: number) => TurnSampler;

/**
 * The GPU model as a SamplerFactory: one GenerationSession per batch, or, when the batch's K/V cache
 * would not fit one storage binding, one per slice of whole groups (ShardedSampler).
 */
export function modelSampler(model: QwenGpuModel): SamplerFactory {
  return (rows, maxLen, groupSize = 1) => {
    const most = model.maxSessionRows(maxLen);
    if (rows <= most) return model.startSession(rows, maxLen);
    const perShard = Math.floor(most / groupSize) * groupSize;
    if (perShard === 0) return model.startSession(groupSize, maxLen); // throws: not even one group fits
    return new ShardedSampler(model, rows, maxLen, perShard);
  };
}

/**
 * A batch of rows over several GenerationSessions of at most `perShard` rows each (a multiple of the
 * group size, so a group's prompt copies stay in one session). Each call goes to every session in
 * turn with its slice of the rows; row r samples as stream r, as it would in one session. The
 * sessions count their decode steps apart, so the tokens are a valid sample of the same policy but
 * not those of one large session.
 */
export class ShardedSampler implements TurnSampler {
  readonly batch: number;
  readonly maxLen: number;
  private readonly shards: { session: GenerationSession; start: number; end: number }[] = [];

  constructor(model: QwenGpuModel, rows: number, maxLen: number, perShard: number) {
    this.batch = rows;
    this.maxLen = maxLen;
    try {
      for (let start = 0; start < rows; start += perShard) {
        const end = Math.min(rows, start + perShard);
        this.shards.push({ session: model.startSession(end - start, maxLen), start, end });
      }
    } catch (e) {
      this.release();
      throw e;
    }
  }

  /** Sessions in use (for tests and benchmarks). */
  get sessions(): number {
    return this.shards.length;
  }

  append(tokens: ReadonlyArray<ArrayLike<number>>): void {
    if (tokens.length !== this.batch)
      throw new Error(`append: ${tokens.length} rows for a session of ${this.batch}`);
    for (const { session, start, end } of this.shards) session.append(tokens.slice(start, end));
  }

  async sample(options: GenerateOptions): Promise<GenerateResult> {
    const out: GenerateResult = { tokens: [], logprobs: [], finish: [] };
    for (const { session, start, end } of this.shards) {
      const { shouldStop } = options;
      const r = await session.sample({
        ...options,
        active: options.active?.slice(start, end),
        maxNewTokensPerRow: options.maxNewTokensPerRow?.slice(start, end),
        shouldStop: shouldStop && ((row, ids) => shouldStop(start + row, ids)),
        streamOffset: (options.streamOffset ?? 0) + start,
      });
      out.tokens.push(...r.tokens);
      out.logprobs.push(...r.logprobs);
      out.finish.push(...r.finish);
    }
    return out;
  }

  copyRow(from: number, to: readonly number[]): void {
    const shard = this.shards.find((s) => from >= s.start && from < s.end);
    const outside = to.find((b) => !shard || b < shard.start || b >= shard.end);
    if (!shard || outside !== undefined) {
      throw new Error(
        `copyRow: rows ${from} and ${outside ?? from} are not in one session of this sharded batch`,
      );
    }
    shard.session.copyRow(
      from - shard.start,
      to.map((b) => b - shard.start),
    );
  }

  release(): void {
    for (const { session } of this.shards) session.release();
  }
}

/** The tokenizer calls the rollout makes (QwenTokenizer implements them). */
export interface RolloutTokenizer {
  encode(text: string): number[];
  /** Template pieces as encode(), data pieces as plain text (never special ids). */
  encodePieces(pieces: readonly TextPiece[]): number[];
  decode(ids: readonly number[]): string;
  encodeChat(messages: readonly ChatMessage[], options?: ChatTemplateOptions): number[];
  specialId(name: QwenTokenName): number;
  readonly padTokenId: number;
}

export interface RolloutOptions<T extends EnvTask> {
  /** The tools of each task (as evaluate.ts's `tools`). */
  toolsFor: (task: T) => readonly Tool[] | ToolRegistry;
  /** Samples per task (G). Default 1. */
  samplesPerTask?: number;
  /** ToolEnv options (rewards, tool budgets...). maxTurns and maxContextTokens are set as documented. */
  env?: ToolEnvOptions;
  /** The env's turn limit. Default: options.env.maxTurns, else the env's default. */
  maxTurns?: number;
  maxNewTokensPerTurn: number;
  /** Tokens per episode, prompt included. */
  maxTotalTokens: number;
  /** 0 = greedy. Default 1. */
  temperature?: number;
  /** Default 1 (off). */
  topP?: number;
  /** Default 0 (off). */
  topK?: number;
  /** u32 seed of the batch. Default 0. */
  seed?: number;
  /** Env ids appended per forward block. Default 64. */
  appendBlock?: number;
}

export type TokenSource = 'prompt' | 'policy' | 'env';

/** Parallel per-token arrays of one episode (part of Trajectory). */
export interface TrajectoryTokens {
  ids: number[];
  sources: TokenSource[];
  /** 1 on policy-sampled ids, 0 elsewhere. */
  lossMask: number[];
  /** Sampling log-prob of policy ids; 0 elsewhere. */
  logprobs: number[];
  /** Turn index; -1 for the prompt. */
  turnIndex: number[];
}

/** A turn's process reward parts (StepResult.reward), on the turn's last policy token. */
export interface TurnProcessReward extends ProcessReward {
  turn: number;
  tokenIndex: number;
}

/** How a turn's sampling ended: the policy drew <|im_end|>, drew <|endoftext|>, or hit its limit. */
export type TurnEnd = 'im_end' | 'endoftext' | 'length';

export interface TurnRecord {
  turn: number;
  /** The decoded policy text the env read (stop token excluded). */
  action: string;
  end: TurnEnd;
  /** The turn's policy ids are tokens[policyStart, policyEnd). */
  policyStart: number;
  policyEnd: number;
  /** Index of the turn's last policy token: where its process reward lands. */
  lastPolicyTokenIndex: number;
  /** Env ids after the turn (closing <|im_end|>, continuation) are tokens[envStart, envEnd). */
  envStart: number;
  envEnd: number;
  /** The StepResult's process reward parts. */
  reward: ProcessReward;
  calls: StepCallInfo[];
  formatErrors: string[];
  /** Observation.text: the tool responses as the template renders them ('' when none). */
  toolResultText: string;
  /** False when the tool responses were not appended (the episode ended with this turn). */
  resultAppended: boolean;
}

export interface Trajectory extends TrajectoryTokens {
  /** Row in the batch; group = task index, sample = index within the group. */
  row: number;
  group: number;
  sample: number;
  taskId: string;
  question: string;
  answers: string[];
  tools: ToolSpec[];
  promptLength: number;
  /** One per turn, in order. */
  processRewards: TurnProcessReward[];
  outcome: OutcomeReward;
  doneReason: DoneReason;
  /** True when the rollout's token budget ended the episode rather than the env (see the header). */
  endedByRollout: boolean;
  /** Assistant turns taken. */
  turns: number;
  toolCalls: number;
  prediction: string | null;
  /** The env's final messages. */
  messages: ChatMessage[];
  turnRecords: TurnRecord[];
}

export interface RolloutStats {
  rows: number;
  /** Batch turns run (sampling calls). */
  batchTurns: number;
  /** GPU time: prompt and env-id appends plus sampling (appends are timed when their results are read). */
  samplingSeconds: number;
  /** env.step and tokenisation. */
  envSeconds: number;
  totalSeconds: number;
  promptTokens: number;
  policyTokens: number;
  envTokens: number;
}

export interface RolloutResult {
  trajectories: Trajectory[];
  stats: RolloutStats;
}

export type RolloutEvent =
  | { type: 'turn_started'; turn: number; rows: number[] }
  | { type: 'tokens_sampled'; row: number; turn: number; ids: number[]; logprobs: number[]; text: string }
  | { type: 'tool_called'; row: number; turn: number; calls: StepCallInfo[] }
  | { type: 'tool_result'; row: number; turn: number; text: string; ids: number[] }
  | { type: 'reward'; row: number; turn: number; reward: ProcessReward; outcome?: OutcomeReward }
  | { type: 'episode_done'; row: number; trajectory: Trajectory }
  | { type: 'rollout_done'; result: RolloutResult };

/** A bad rollout configuration or a broken contract (named value in the message). */
export class RolloutError extends Error {
  override name = 'RolloutError';
}

// ------------------------------------------------------------------------------------ the rollout

/** Everything one rollout batch needs: the tasks, the policy (a model or a sampler), the options. */
export interface RolloutRequest<T extends EnvTask> extends RolloutOptions<T> {
  tasks: readonly T[];
  tokenizer: RolloutTokenizer;
  /** The policy: a GPU model (one GenerationSession per batch)... */
  model?: QwenGpuModel;
  /** ...or any sampler factory (scripted samplers in tests). Exactly one of model / sampler. */
  sampler?: SamplerFactory;
}

interface RowState<T extends EnvTask> {
  task: T;
  env: ToolEnv;
  group: number;
  sample: number;
  tokens: TrajectoryTokens;
  promptLength: number;
  processRewards: TurnProcessReward[];
  turnRecords: TurnRecord[];
  done: boolean;
}

const DEFAULT_APPEND_BLOCK = 64;

function checkPositiveInt(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 1)
    throw new RolloutError(`rollout: ${name} must be a positive integer, got ${value}`);
}

function pushTokens(
  t: TrajectoryTokens,
  ids: readonly number[],
  source: TokenSource,
  turn: number,
  logprobs?: readonly number[],
): void {
  ids.forEach((id, i) => {
    t.ids.push(id);
    t.sources.push(source);
    t.lossMask.push(source === 'policy' ? 1 : 0);
    t.logprobs.push(logprobs ? logprobs[i] : 0);
    t.turnIndex.push(turn);
  });
}

/**
 * Appends per-row ids in blocks of at most `block`, right-aligned: every row with ids gets its last
 * ids in the final block, so its next-token logits are current when the appends are done.
 */
function appendInBlocks(sampler: TurnSampler, rows: readonly (readonly number[])[], block: number): void {
  const longest = Math.max(0, ...rows.map((r) => r.length));
  const blocks = Math.ceil(longest / block);
  for (let k = 0; k < blocks; k++) {
    const fromEnd = (blocks - k) * block; // a row's ids before this block: all but its last fromEnd
    sampler.append(
      rows.map((r) => r.slice(Math.max(0, r.length - fromEnd), Math.max(0, r.length - fromEnd + block))),
    );
  }
}

const seconds = (t0: number) => (performance.now() - t0) / 1000;

const sameIds = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((id, i) => id === b[i]);

/**
 * Plays tasks × samplesPerTask episodes together; see the file header for the token layout, budgets
 * and event order. Returns (and yields last, as 'rollout_done') the trajectories in row order.
 */
export async function* rolloutStream<T extends EnvTask>(
  request: RolloutRequest<T>,
): AsyncGenerator<RolloutEvent, RolloutResult> {
  const tStart = performance.now();
  const { tasks, tokenizer } = request;
  const G = request.samplesPerTask ?? 1;
  checkPositiveInt('samplesPerTask', G);
  checkPositiveInt('maxNewTokensPerTurn', request.maxNewTokensPerTurn);
  checkPositiveInt('maxTotalTokens', request.maxTotalTokens);
  const appendBlock = request.appendBlock ?? DEFAULT_APPEND_BLOCK;
  checkPositiveInt('appendBlock', appendBlock);
  if (tasks.length === 0) throw new RolloutError('rollout: no tasks');
  if ((request.model === undefined) === (request.sampler === undefined))
    throw new RolloutError('rollout: give exactly one of model and sampler');
  const newSampler = request.sampler ?? modelSampler(request.model!);
  const maxTotal = request.maxTotalTokens;
  const imEnd = tokenizer.specialId('imEnd');
  const endOfText = tokenizer.specialId('endOfText');
  const envOptions: ToolEnvOptions = {
    ...request.env,
    maxContextTokens: Math.min(request.env?.maxContextTokens ?? Number.POSITIVE_INFINITY, maxTotal - 3),
  };
  const maxTurns = request.maxTurns ?? request.env?.maxTurns;
  if (maxTurns !== undefined) envOptions.maxTurns = maxTurns;
  const stats: RolloutStats = {
    rows: tasks.length * G,
    batchTurns: 0,
    samplingSeconds: 0,
    envSeconds: 0,
    totalSeconds: 0,
    promptTokens: 0,
    policyTokens: 0,
    envTokens: 0,
  };

  // Rows, envs and prompts.
  let t0 = performance.now();
  const rows: RowState<T>[] = [];
  const prompts: number[][] = [];
  tasks.forEach((task, group) => {
    for (let sample = 0; sample < G; sample++) {
      const env = new ToolEnv(task, request.toolsFor(task), envOptions);
      const state = env.reset();
      const prompt = tokenizer.encodeChat(state.messages, {
        tools: env.toolSpecs,
        addGenerationPrompt: true,
      });
      // A turn needs one sampled id and one closing slot.
      if (prompt.length + 2 > maxTotal) {
        throw new RolloutError(
          `rollout: task ${task.id}'s prompt is ${prompt.length} tokens; maxTotalTokens ${maxTotal} leaves no room for a turn`,
        );
      }
      const tokens: TrajectoryTokens = { ids: [], sources: [], lossMask: [], logprobs: [], turnIndex: [] };
      pushTokens(tokens, prompt, 'prompt', -1);
      stats.promptTokens += prompt.length;
      prompts.push(prompt);
      rows.push({
        task,
        env,
        group,
        sample,
        tokens,
        promptLength: prompt.length,
        processRewards: [],
        turnRecords: [],
        done: false,
      });
    }
  });
  stats.envSeconds += seconds(t0);

  const sampler = newSampler(rows.length, maxTotal + appendBlock + 1, G);
  const trajectories: Trajectory[] = new Array(rows.length);
  try {
    if (sampler.batch !== rows.length)
      throw new RolloutError(`rollout: the sampler has ${sampler.batch} rows, the batch ${rows.length}`);
    t0 = performance.now();
    // The G samples of a task start from the same prompt: prefill it in the group's first row and
    // copy that row's cache to the others (when the sampler can; the ids are checked equal).
    const shareable =
      G > 1 && sampler.copyRow !== undefined && prompts.every((p, r) => sameIds(p, prompts[r - (r % G)]));
    appendInBlocks(sampler, shareable ? prompts.map((p, r) => (r % G === 0 ? p : [])) : prompts, appendBlock);
    if (shareable) {
      for (let r = 0; r < rows.length; r += G) {
        sampler.copyRow!(
          r,
          Array.from({ length: G - 1 }, (_, s) => r + 1 + s),
        );
      }
    }
    stats.samplingSeconds += seconds(t0);

    for (let turn = 0; rows.some((r) => !r.done); turn++) {
      const active = rows.map((r) => !r.done);
      yield { type: 'turn_started', turn, rows: rows.flatMap((r, i) => (r.done ? [] : [i])) };
      const allowed = rows.map((r) =>
        r.done ? 0 : Math.min(request.maxNewTokensPerTurn, maxTotal - r.tokens.ids.length - 1),
      );
      t0 = performance.now();
      const sampled = await sampler.sample({
        maxNewTokens: Math.max(...allowed),
        maxNewTokensPerRow: allowed,
        active,
        temperature: request.temperature ?? 1,
        topP: request.topP ?? 1,
        topK: request.topK ?? 0,
        seed: request.seed ?? 0,
        stopTokenIds: [imEnd, endOfText],
        padId: tokenizer.padTokenId,
      });
      stats.samplingSeconds += seconds(t0);
      stats.batchTurns++;

      // Record every active row's policy ids first (one batched sample produced them all).
      const actions: string[] = [];
      const policyStarts: number[] = [];
      for (let r = 0; r < rows.length; r++) {
        if (!active[r]) continue;
        const row = rows[r];
        const ids = sampled.tokens[r];
        const lps = sampled.logprobs[r];
        if (ids.length === 0 || ids.length > allowed[r] || lps.length !== ids.length) {
          throw new RolloutError(
            `rollout: the sampler returned ${ids.length} ids and ${lps.length} log-probs for row ${r} (allowed 1..${allowed[r]})`,
          );
        }
        const bad = lps.findIndex((lp) => !Number.isFinite(lp));
        if (bad !== -1) {
          throw new RolloutError(
            `rollout: row ${r} turn ${turn} sampled id ${ids[bad]} with log-prob ${lps[bad]}: the model's logits are not finite`,
          );
        }
        const last = ids[ids.length - 1];
        const body = last === imEnd || last === endOfText ? ids.slice(0, -1) : ids;
        policyStarts[r] = row.tokens.ids.length;
        pushTokens(row.tokens, ids, 'policy', turn, lps);
        stats.policyTokens += ids.length;
        actions[r] = tokenizer.decode(body);
        yield { type: 'tokens_sampled', row: r, turn, ids: [...ids], logprobs: [...lps], text: actions[r] };
      }

      // Env steps, row by row.
      const pending: number[][] = rows.map(() => []);
      for (let r = 0; r < rows.length; r++) {
        if (!active[r]) continue;
        const row = rows[r];
        const ids = sampled.tokens[r];
        const last = ids[ids.length - 1];
        const end: TurnEnd = last === imEnd ? 'im_end' : last === endOfText ? 'endoftext' : 'length';
        const closing = end === 'im_end' ? [] : [imEnd];
        const contextTokens = row.tokens.ids.length + closing.length;
        t0 = performance.now();
        const step = await row.env.step(actions[r], { contextTokens });
        let continuation: number[] = [];
        let done = step.done;
        let doneReason = step.doneReason;
        let outcome = step.outcome;
        let endedByRollout = false;
        if (!done) {
          if (step.observation.continuation === '') {
            throw new RolloutError(
              `rollout: the env continued row ${r} at turn ${turn} with no continuation`,
            );
          }
          continuation = tokenizer.encodePieces(step.observation.continuationPieces);
          if (contextTokens + continuation.length + 2 > maxTotal) {
            done = true;
            doneReason = 'context_budget';
            endedByRollout = true;
            continuation = [];
            const env = row.env;
            outcome = outcomeReward(
              env.turns,
              row.task.answers,
              env.config.maxCallsPerTurn,
              env.config.outcome,
            );
          }
        }
        stats.envSeconds += seconds(t0);
        if (step.info.calls.length > 0) yield { type: 'tool_called', row: r, turn, calls: step.info.calls };
        const envIds = [...closing, ...continuation];
        const envStart = row.tokens.ids.length;
        pushTokens(row.tokens, envIds, 'env', turn);
        stats.envTokens += envIds.length;
        if (!done) pending[r] = envIds;
        const policyEnd = policyStarts[r] + ids.length;
        row.processRewards.push({ turn, tokenIndex: policyEnd - 1, ...step.reward });
        row.turnRecords.push({
          turn,
          action: actions[r],
          end,
          policyStart: policyStarts[r],
          policyEnd,
          lastPolicyTokenIndex: policyEnd - 1,
          envStart,
          envEnd: row.tokens.ids.length,
          reward: step.reward,
          calls: step.info.calls,
          formatErrors: [...step.info.formatErrors],
          toolResultText: step.observation.text,
          resultAppended: !done,
        });
        if (step.observation.text !== '' || envIds.length > 0)
          yield { type: 'tool_result', row: r, turn, text: step.observation.text, ids: envIds };
        yield { type: 'reward', row: r, turn, reward: step.reward, outcome: done ? outcome : undefined };
        if (done) {
          row.done = true;
          if (outcome === undefined || doneReason === undefined)
            throw new RolloutError(`rollout: the env ended row ${r} without an outcome or a reason`);
          const state = row.env.snapshot();
          const trajectory: Trajectory = {
            row: r,
            group: row.group,
            sample: row.sample,
            taskId: row.task.id,
            question: row.task.question,
            answers: [...row.task.answers],
            tools: row.env.toolSpecs,
            promptLength: row.promptLength,
            ...row.tokens,
            processRewards: row.processRewards,
            outcome,
            doneReason,
            endedByRollout,
            turns: state.turn,
            toolCalls: state.toolCalls,
            prediction: outcome.prediction,
            messages: state.messages,
            turnRecords: row.turnRecords,
          };
          trajectories[r] = trajectory;
          yield { type: 'episode_done', row: r, trajectory };
        }
      }
      if (pending.some((p) => p.length > 0)) {
        t0 = performance.now();
        appendInBlocks(sampler, pending, appendBlock);
        stats.samplingSeconds += seconds(t0);
      }
    }
  } finally {
    sampler.release();
  }
  stats.totalSeconds = seconds(tStart);
  const result: RolloutResult = { trajectories, stats };
  yield { type: 'rollout_done', result };
  return result;
}

/** Drains rolloutStream; onEvent sees every event in order. */
export async function runRollouts<T extends EnvTask>(
  request: RolloutRequest<T> & { onEvent?: (event: RolloutEvent) => void },
): Promise<RolloutResult> {
  const stream = rolloutStream(request);
  for (;;) {
    const next = await stream.next();
    if (next.done) return next.value;
    request.onEvent?.(next.value);
  }
}

// ------------------------------------------------------------------------------------ JSON

export const TRAJECTORY_JSON_VERSION = 1;

/** A Trajectory as plain JSON (every field is JSON already; the version guards the layout). */
export interface TrajectoryJSON extends Trajectory {
  version: number;
}

/** A serialised trajectory that does not have the expected shape (the path names the bad value). */
export class TrajectoryFormatError extends Error {
  override name = 'TrajectoryFormatError';
  readonly path: string;
  constructor(path: string, message: string) {
    super(`trajectory JSON: ${path} ${message}`);
    this.path = path;
  }
}

/** Plain JSON (a deep copy); throws on a non-finite log-prob, which JSON cannot hold. */
export function trajectoryToJSON(trajectory: Trajectory): TrajectoryJSON {
  trajectory.logprobs.forEach((lp, i) => {
    if (!Number.isFinite(lp)) throw new TrajectoryFormatError(`logprobs[${i}]`, `is ${lp}, not finite`);
  });
  const json = JSON.parse(JSON.stringify(trajectory)) as Trajectory;
  return { ...json, version: TRAJECTORY_JSON_VERSION };
}

/** Validates and rebuilds a Trajectory from trajectoryToJSON's output (or its JSON.parse). */
export function trajectoryFromJSON(value: unknown): Trajectory {
  const obj = expectObject(value, '$');
  if (obj.version !== TRAJECTORY_JSON_VERSION)
    throw new TrajectoryFormatError(
      'version',
      `is ${JSON.stringify(obj.version)}, expected ${TRAJECTORY_JSON_VERSION}`,
    );
  const ids = expectNumbers(obj.ids, 'ids', (x) => Number.isInteger(x) && x >= 0);
  const n = ids.length;
  const sources = expectArray(obj.sources, 'sources', n).map((s, i) => {
    if (s !== 'prompt' && s !== 'policy' && s !== 'env')
      throw new TrajectoryFormatError(`sources[${i}]`, `is ${JSON.stringify(s)}`);
    return s as TokenSource;
  });
  const lossMask = expectNumbers(obj.lossMask, 'lossMask', (x) => x === 0 || x === 1, n);
  const logprobs = expectNumbers(obj.logprobs, 'logprobs', (x) => x <= 0, n);
  const turnIndex = expectNumbers(obj.turnIndex, 'turnIndex', (x) => Number.isInteger(x) && x >= -1, n);
  const doneReasons: DoneReason[] = ['answer', 'no_tool_call', 'max_turns', 'tool_budget', 'context_budget'];
  if (!doneReasons.includes(obj.doneReason as DoneReason))
    throw new TrajectoryFormatError('doneReason', `is ${JSON.stringify(obj.doneReason)}`);
  const int = (key: string) => {
    const v = obj[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0)
      throw new TrajectoryFormatError(key, `is ${JSON.stringify(v)}, not an integer >= 0`);
    return v;
  };
  const str = (key: string) => {
    const v = obj[key];
    if (typeof v !== 'string') throw new TrajectoryFormatError(key, `is ${JSON.stringify(v)}, not a string`);
    return v;
  };
  const tokenIndex = (v: JsonValue | undefined, path: string) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > n)
      throw new TrajectoryFormatError(path, `is ${JSON.stringify(v)}, not a token index (0..${n})`);
  };
  const processRewards = expectArray(obj.processRewards, 'processRewards').map((p, i) => {
    const rec = expectObject(p, `processRewards[${i}]`);
    tokenIndex(rec.tokenIndex, `processRewards[${i}].tokenIndex`);
    for (const key of ['retrieval', 'format', 'call', 'total']) {
      if (typeof rec[key] !== 'number')
        throw new TrajectoryFormatError(`processRewards[${i}].${key}`, `is ${JSON.stringify(rec[key])}`);
    }
    return rec as unknown as TurnProcessReward;
  });
  const turnRecords = expectArray(obj.turnRecords, 'turnRecords').map((t, i) => {
    const rec = expectObject(t, `turnRecords[${i}]`);
    for (const key of ['policyStart', 'policyEnd', 'lastPolicyTokenIndex', 'envStart', 'envEnd'])
      tokenIndex(rec[key], `turnRecords[${i}].${key}`);
    expectObject(rec.reward, `turnRecords[${i}].reward`);
    expectArray(rec.calls, `turnRecords[${i}].calls`);
    return rec as unknown as TurnRecord;
  });
  const prediction = obj.prediction;
  if (prediction !== null && typeof prediction !== 'string')
    throw new TrajectoryFormatError('prediction', `is ${JSON.stringify(prediction)}`);
  return {
    row: int('row'),
    group: int('group'),
    sample: int('sample'),
    taskId: str('taskId'),
    question: str('question'),
    answers: expectArray(obj.answers, 'answers').map((a, i) => {
      if (typeof a !== 'string') throw new TrajectoryFormatError(`answers[${i}]`, 'is not a string');
      return a;
    }),
    tools: expectArray(obj.tools, 'tools') as unknown as ToolSpec[],
    promptLength: int('promptLength'),
    ids,
    sources,
    lossMask,
    logprobs,
    turnIndex,
    processRewards,
    outcome: expectObject(obj.outcome, 'outcome') as unknown as OutcomeReward,
    doneReason: obj.doneReason as DoneReason,
    endedByRollout: obj.endedByRollout === true,
    turns: int('turns'),
    toolCalls: int('toolCalls'),
    prediction,
    messages: expectArray(obj.messages, 'messages') as unknown as ChatMessage[],
    turnRecords,
  };
}

function expectObject(v: unknown, path: string): Record<string, JsonValue> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    const what = v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v;
    throw new TrajectoryFormatError(path, `is ${what}, not an object`);
  }
  return v as Record<string, JsonValue>;
}

function expectArray(v: unknown, path: string, length?: number): JsonValue[] {
  if (!Array.isArray(v)) throw new TrajectoryFormatError(path, 'is not an array');
  if (length !== undefined && v.length !== length)
    throw new TrajectoryFormatError(path, `has ${v.length} entries, ids has ${length}`);
  return v;
}

function expectNumbers(v: unknown, path: string, ok: (x: number) => boolean, length?: number): number[] {
  return expectArray(v, path, length).map((x, i) => {
    if (typeof x !== 'number' || !Number.isFinite(x) || !ok(x))
      throw new TrajectoryFormatError(`${path}[${i}]`, `is ${JSON.stringify(x)}`);
    return x;
  });
}
