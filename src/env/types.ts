/**
 * The MDP vocabulary shared by the environment, the rollout engine and the UI.
 *
 * An episode is a multi-turn chat. The model's text for one assistant turn is the Action; the environment
 * answers with an Observation (tool responses, appended as a `user` turn by Qwen's chat template); the
 * State is the whole history. Nothing here depends on the GPU, React or the DOM.
 */

/** Roles of the OpenAI / Hugging Face chat format. `tool` messages carry tool responses. */
export type ChatRole = 'system' | 'user' | 'assistant' | 'tool';

/** A JSON value as produced by JSON.parse. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A JSON object, e.g. the `arguments` of a tool call. */
export type JsonObject = { [key: string]: JsonValue };

/** One tool call in OpenAI function-calling format, as chat templates expect in `message.tool_calls`. */
export interface ChatToolCall {
  type: 'function';
  function: { name: string; arguments: JsonObject };
}

/** One chat message, in the shape `apply_chat_template` consumes. */
export interface ChatMessage {
  role: ChatRole;
  content: string;
  /**
   * Structured tool calls of an assistant message. The ToolEnv stores the model's raw text in `content`
   * instead (so re-rendering reproduces the generated tokens exactly) and leaves this unset.
   */
  tool_calls?: ChatToolCall[];
  /** Reasoning text of an assistant message, when kept apart from `content` (Qwen3 template field). */
  reasoning_content?: string;
}

/**
 * A JSON Schema (draft-07 subset) describing tool parameters. The validator in json-schema.ts
 * supports the keywords listed here; others are carried to the model but not enforced.
 */
export interface JsonSchema {
  type?: JsonSchemaType | JsonSchemaType[];
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  items?: JsonSchema;
  enum?: JsonValue[];
  const?: JsonValue;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  minItems?: number;
  maxItems?: number;
  default?: JsonValue;
}

export type JsonSchemaType = 'string' | 'number' | 'integer' | 'boolean' | 'object' | 'array' | 'null';

/** A tool as offered to the model: OpenAI function format, dropped as-is into the chat template's `tools`. */
export interface ToolSpec {
  type: 'function';
  function: { name: string; description: string; parameters: JsonSchema };
}

/** The model's text for one assistant turn (decoded, without the trailing `<|im_end|>`). */
export type Action = string;

/** Why an episode ended. */
export type DoneReason =
  /** The turn gave a well-formed `<answer>…</answer>`. */
  | 'answer'
  /** The turn had neither a tool call nor a malformed tag: the model stopped without answering. */
  | 'no_tool_call'
  /** The turn limit was reached. */
  | 'max_turns'
  /** The episode's tool-call budget was used up. */
  | 'tool_budget'
  /** The context (characters or tokens) outgrew its budget. */
  | 'context_budget';

/** The whole multi-turn history of one episode. */
export interface State {
  /** Id of the task being solved. */
  taskId: string;
  /** The question, as posed in the user message (policies read it here rather than parsing the prompt). */
  question: string;
  /** system, user, then alternating assistant / tool messages. */
  messages: ChatMessage[];
  /** Token ids of the rendered history; owned and filled by the rollout engine, untouched by the env. */
  tokenIds?: number[];
  /** Assistant turns taken so far. */
  turn: number;
  /** Tool calls that ran so far (refused, invalid and over-budget calls are not counted). */
  toolCalls: number;
  done: boolean;
  doneReason?: DoneReason;
}

/** What the environment appends after an assistant turn. */
export interface Observation {
  /** `tool` messages for the chat history (one per executed call or error), for apply_chat_template. */
  messages: ChatMessage[];
  /**
   * Exactly what Qwen's chat template renders for `messages`:
   * `<|im_start|>user\n<tool_response>\n…\n</tool_response><|im_end|>\n` (empty when there are none).
   */
  text: string;
  /**
   * What to append after the model's generated `<|im_end|>` to reach the next generation point:
   * `'\n' + text + '<|im_start|>assistant\n'`; empty when the episode is done. Lets the rollout engine
   * extend its token buffer without re-rendering the history.
   */
  continuation: string;
  /**
   * `continuation` split into the template's glue (`data: false`) and the tool messages' contents
   * (`data: true`: passages, tool output, error text quoting the model), so a tokenizer can encode the
   * data as plain text: a passage spelling `<|im_end|>` must not become the special token.
   */
  continuationPieces: TextPiece[];
}

/** A stretch of text that is either template markup or data (see Observation.continuationPieces). */
export interface TextPiece {
  text: string;
  data: boolean;
}

/**
 * Process reward of one step, each part reported separately so the UI can chart them and the trainer
 * can weight them. `total` is their sum.
 */
export interface ProcessReward {
  /** Bonus for tool calls that retrieved a gold passage not seen before in the episode. */
  retrieval: number;
  /** Penalty for a malformed turn (bad tags, invalid JSON, too many calls, empty or huge text). */
  format: number;
  /** Penalty for failed calls (unknown tool, invalid arguments, tool error, over budget) and ineffective ones. */
  call: number;
  total: number;
}

/** The episode-level reward, computed when the episode ends (see reward.ts for the formula). */
export interface OutcomeReward {
  /** Format score f in [0, 1]: how well-formed the assistant turns are. */
  formatScore: number;
  /** True when f = 1: every turn well-formed, the last one a final answer. */
  formatValid: boolean;
  /** The extracted final answer, or null when the last turn has none. */
  prediction: string | null;
  /** EM / F1 / substring EM of the prediction against the gold answers (max over aliases). */
  em: number;
  f1: number;
  subEm: number;
  /** The metric the outcome uses (configurable), before gating. */
  answerScore: number;
  /** The outcome reward: format gates the answer score. */
  outcome: number;
}

/** Diagnostics of one step, for logs and the UI. */
export interface StepInfo {
  /** Calls parsed from the turn (before the per-turn limit), with their validation result. */
  calls: StepCallInfo[];
  /** Format problems found in the turn; empty when well-formed. */
  formatErrors: string[];
  /** The answer given in this turn, if any. */
  answer: string | null;
  /** True when the turn is a well-formed tool-call turn or a well-formed answer turn. */
  wellFormed: boolean;
}

export interface StepCallInfo {
  name: string;
  arguments: JsonObject | null;
  /** 'executed' ran; 'refused' exceeded the per-turn limit; the others failed before running. */
  status: 'executed' | 'refused' | 'unknown_tool' | 'invalid_arguments' | 'tool_error' | 'budget';
  success: boolean;
  /** Passage ids a retrieval tool returned. */
  retrievedIds?: string[];
  /** Gold passages first retrieved by this call. */
  newGoldIds?: string[];
  /** True for a successful call that brought nothing new (see ToolEnv). */
  ineffective?: boolean;
}

/** Result of ToolEnv.step. */
export interface StepResult {
  observation: Observation;
  reward: ProcessReward;
  done: boolean;
  doneReason?: DoneReason;
  /** Present on the step that ends the episode. */
  outcome?: OutcomeReward;
  info: StepInfo;
}
