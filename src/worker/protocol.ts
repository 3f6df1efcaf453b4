// The page ↔ engine protocol: what the page may ask the engine (EngineApi, one async method per
// request) and what the engine reports on its own (EngineEvent). Everything here crosses a
// postMessage boundary, so every type is structured-cloneable data (Blob and File included; no
// classes, no functions, no GPU objects).
//
// Wire format (src/worker/rpc.ts):
//   page → worker   { kind: 'call', id, method, args }
//   worker → page   { kind: 'result', id, ok: true, value } | { kind: 'result', id, ok: false, error }
//                   { kind: 'event', event }
import type { GenerationConfig, ModelConfig } from '../agent/model/config.ts';
import type { FloatDtype } from '../agent/model/safetensors.ts';
import type { AdapterFit } from '../agent/model/weights.ts';
import type { ToolSpec } from '../env/types.ts';
import type { AdapterReport } from '../gpu/device.ts';
import type { SelfCheckResult } from '../gpu/selfcheck.ts';
import type { TrainConfig } from '../rl/config.ts';
import type { RolloutEvent, Trajectory } from '../rl/rollout.ts';
import type { StepMetrics, TrainerPhase } from '../rl/trainer.ts';
import type { GenSettings, SamplingSettings } from './generation.ts';

// ---------------------------------------------------------------------------------------------
// Model

/** Where a model comes from, as the page names it. */
export type ModelSpec =
  | {
      kind: 'bundled';
      name: string;
      /** The site's base URL (import.meta.env.BASE_URL). */
      siteBase: string;
      /** File name -> bytes from index.json (progress totals when the server compresses). */
      knownSizes: Record<string, number>;
    }
  | { kind: 'hub'; repo: string; revision: string; endpoint: string }
  | { kind: 'files'; files: File[]; ignored: string[] };

export interface FileProgress {
  file: string;
  loaded: number;
  total: number | null;
}

export type LoadPhase = 'reading files' | 'building the tokenizer' | 'uploading to the GPU';

export type ModelOrigin =
  | { kind: 'bundled'; name: string }
  | { kind: 'hub'; repo: string; revision: string }
  | { kind: 'files'; names: string[] };

/** A loaded model as the page sees it (the weights stay in the worker). */
export interface ModelInfo {
  /** Increases with every load; generations remember which model they ran on. */
  id: number;
  name: string;
  label: string;
  origin: ModelOrigin;
  config: ModelConfig;
  generationConfig: GenerationConfig | null;
  tokenizerFileNames: string[];
  hasTokenizer: boolean;
  tokenizerVocabSize: number | null;
  fileDtype: FloatDtype;
  weightFiles: string[];
  bytesRead: number;
  parameters: number;
  /** Bytes of the f32 weights on the GPU. */
  gpuBytes: number;
  fit: AdapterFit;
  warnings: string[];
  ignoredFiles: string[];
  loadMs: number;
}

export interface ModelLoadError {
  label: string;
  message: string;
  /** The file the problem is in, when the loader says. */
  file: string | null;
}

export type LoadOutcome = { ok: true; model: ModelInfo } | { ok: false; error: ModelLoadError };

export type WeightsDtype = 'as-loaded' | FloatDtype;

export interface WeightsZip {
  blob: Blob;
  fileName: string;
  files: { name: string; bytes: number }[];
}

/** Whose weights an export takes: the loaded model, or the policy being trained. */
export type ExportSource = 'model' | 'train';
export type OnnxProvider = 'webgpu' | 'wasm';

/** The in-tab check of the ONNX export (src/worker/onnx-check.ts). */
export interface OnnxCheck {
  provider: OnnxProvider;
  promptTokens: number;
  /** Greedy steps compared. */
  steps: number;
  sameTokens: boolean;
  /** First step whose token differs, or null. */
  firstDifference: number | null;
  /** Largest |logit difference| over the prompt's positions. */
  maxLogitDiff: number;
  onnxText: string;
  seconds: number;
}

// ---------------------------------------------------------------------------------------------
// Generation

export interface GenToken {
  id: number;
  /** What this token added to the decoded text (null without a tokenizer). */
  piece: string | null;
  /** The token decoded on its own (may be part of a character). */
  alone: string | null;
  logprob: number;
}

export interface GenerationStart {
  modelId: number;
  promptText: string | null;
  promptIds: number[];
  settings: SamplingSettings;
}

export interface GenerationEnd {
  finish: 'stop' | 'length' | 'stopped';
  /** The last token's piece when the text ended inside a character (held-back rest). */
  lastPiece: string | null;
  text: string | null;
}

// ---------------------------------------------------------------------------------------------
// Tasks and the rollout stepper

/** Where the stepper's question comes from. */
export type QuestionPick =
  | { kind: 'split'; split: 'train' | 'test'; index: number }
  | { kind: 'dropped'; index: number }
  | { kind: 'custom'; question: string; answer: string };

export interface StepperRequest {
  /** The task world and rollout budgets (task, rollout, reward sections). */
  config: TrainConfig;
  pick: QuestionPick;
  /** Sampling temperature (0 = greedy) and seed of this episode. */
  temperature: number;
  seed: number;
  /** Passages the search tool returns. */
  searchTopK: number;
}

export interface StepperStart {
  question: string;
  answers: string[];
  systemPrompt: string;
  tools: ToolSpec[];
  /** The policy the stepper samples from: the loaded model, or the trainer's current policy. */
  policy: string;
}

/** One MDP step as the stepper shows it: the action, the tool's result, the env's reading. */
export interface StepperTurn {
  turn: number;
  /** The model's action text (thinking and tool call), decoded. */
  action: string;
  actionIds: number[];
  calls: { name: string; arguments: string; ok: boolean; error?: string }[];
  /** The tool's raw result as appended to the context ('' when none). */
  toolResult: string;
  reward: { total: number; parts: Record<string, number> } | null;
  outcome: { outcome: number; em: number; f1: number; formatValid: boolean } | null;
  done: boolean;
}

export interface StepperAdvance {
  turns: StepperTurn[];
  /** Set when the episode ended. */
  trajectory: TrajectoryView | null;
}

/** A trajectory with what the inspector needs beside it. */
export interface TrajectoryView {
  trajectory: Trajectory;
  /** Each token decoded on its own. */
  tokenTexts: string[];
  /** The training step it came from (null: the stepper). */
  step: number | null;
  /** Per token (index j), after a training step: advantage, ratio π/π_sampler and k1 KL to the reference. */
  trained: { advantage: number[]; ratio: number[]; kl: number[] } | null;
}

export interface DroppedTasks {
  fileName: string;
  kind: 'hotpotqa' | '2wiki' | 'musique';
  count: number;
  skipped: number;
  /** Skipped and repaired records by reason, one line (null when every record loaded as is). */
  summary: string | null;
  sample: string[];
}

// ---------------------------------------------------------------------------------------------
// Training runs

export type RunStatus = 'running' | 'paused' | 'done' | 'interrupted';

/** lab-run.json in a run's folder: what the page lists. */
export interface RunMeta {
  id: string;
  name: string;
  algorithm: string;
  /** The bundled model the run started from (reloaded to resume). */
  model: string;
  createdAt: string;
  status: RunStatus;
  step: number;
  steps: number;
}

export interface RunSummary {
  meta: RunMeta;
  metrics: StepMetrics[];
  checkpoints: number[];
}

export interface TrainSetup {
  config: TrainConfig;
  /** null: a new run; an id: resume that run from its last checkpoint. */
  resumeId: string | null;
}

export interface TrainState {
  runId: string;
  step: number;
  steps: number;
  running: boolean;
  phase: TrainerPhase | null;
  /** Fraction of the current phase done (rollout: episodes finished / episodes). */
  phaseProgress: number;
  lastStepSeconds: number | null;
  /** What happened last, in words ("resumed from the checkpoint of step 2; steps 3–4 are redone"). */
  message: string | null;
}

// ---------------------------------------------------------------------------------------------
// The API

export interface EngineApi {
  /** Acquires the GPU device (idempotent). */
  init(): Promise<AdapterReport>;
  /**
   * After 'gpu-lost': a new device, the loaded model uploaded again from the checkpoint kept in memory,
   * and the open run resumed from its last checkpoint (saying how many steps were lost).
   */
  recoverGpu(): Promise<GpuRecovery>;
  selfCheck(): Promise<SelfCheckResult>;
  gpuLiveBytes(): Promise<number>;

  loadModel(spec: ModelSpec, label: string): Promise<LoadOutcome>;
  clearModelCache(): Promise<string>;
  exportWeights(dtype: WeightsDtype): Promise<WeightsZip>;
  /** The folder transformers.js loads (onnx/model.onnx, config, tokenizer), zipped. */
  exportOnnx(source: ExportSource): Promise<WeightsZip>;
  /** Runs the ONNX export with onnxruntime-web in this tab and compares it with the engine. */
  checkOnnx(source: ExportSource, provider: OnnxProvider): Promise<OnnxCheck>;

  generate(settings: GenSettings): Promise<GenerationEnd>;
  stopGeneration(): Promise<void>;

  loadTaskFile(file: File): Promise<DroppedTasks>;
  /** Questions of a split, for the stepper's picker. */
  listQuestions(config: TrainConfig, split: 'train' | 'test' | 'dropped', limit: number): Promise<string[]>;
  stepperStart(request: StepperRequest): Promise<StepperStart>;
  /** One turn (stopAtTurn) or to the end of the episode. */
  stepperAdvance(untilDone: boolean): Promise<StepperAdvance>;
  stepperReset(): Promise<void>;

  trainSetup(setup: TrainSetup): Promise<TrainState>;
  /** Runs steps until paused or done. Resolves when the loop stops. */
  trainRun(): Promise<TrainState>;
  trainOneStep(): Promise<TrainState>;
  trainPause(): Promise<void>;
  /** Releases the trainer (the run's files stay). */
  trainReset(): Promise<void>;
  trainWeightsZip(): Promise<WeightsZip>;
  trajectoriesOf(runId: string, step: number): Promise<TrajectoryView[]>;

  listRuns(): Promise<RunSummary[]>;
  readRunFile(runId: string, path: string): Promise<Uint8Array | null>;
  deleteRun(runId: string): Promise<void>;
}

export interface GpuRecovery {
  adapter: AdapterReport;
  /** The model loaded before the loss, on the new device (null: none was loaded). */
  model: ModelInfo | null;
  /** The open run, resumed (null: none was open). */
  train: TrainState | null;
}

export type EngineMethod = keyof EngineApi;

export type EngineEvent =
  | { type: 'gpu-lost'; message: string }
  | { type: 'model-progress'; label: string; phase: LoadPhase; files: FileProgress[] }
  | { type: 'generation-start'; start: GenerationStart }
  | {
      type: 'generation-tokens';
      tokens: GenToken[];
      text: string | null;
      firstTokenMs: number;
      totalMs: number;
    }
  | { type: 'train-state'; state: TrainState }
  | { type: 'train-metrics'; runId: string; line: StepMetrics }
  | { type: 'train-rollout'; runId: string; event: RolloutEventSummary }
  | { type: 'runs-changed' };

/** A rollout event without its heavy payloads (the page's live view of a training step). */
export type RolloutEventSummary =
  | Exclude<RolloutEvent, { type: 'episode_done' } | { type: 'rollout_done' } | { type: 'tokens_sampled' }>
  | { type: 'tokens_sampled'; row: number; turn: number; count: number }
  | { type: 'episode_done'; row: number; reward: number; doneReason: string }
  | { type: 'rollout_done'; rows: number };

export type CallMessage = { kind: 'call'; id: number; method: EngineMethod; args: unknown[] };
export type ResultMessage =
  | { kind: 'result'; id: number; ok: true; value: unknown }
  | { kind: 'result'; id: number; ok: false; error: { name: string; message: string } };
export type EventMessage = { kind: 'event'; event: EngineEvent };
export type WorkerMessage = ResultMessage | EventMessage;
