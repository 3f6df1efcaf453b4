// The store's shape, slice by slice. UI state only: the GPU, the model, rollouts and training live in
// the engine worker (src/worker/), and these slices hold what the page shows of them.
import type { AdapterReport } from '../../gpu/device.ts';
import type { SelfCheckResult } from '../../gpu/selfcheck.ts';
import type { TrainConfig } from '../../rl/config.ts';
import type { StepMetrics } from '../../rl/trainer.ts';
import type { GenSettings, SamplingSettings } from '../../worker/generation.ts';
import type {
  DroppedTasks,
  ExportSource,
  FileProgress,
  GenToken,
  LoadPhase,
  ModelInfo,
  ModelLoadError,
  OnnxCheck,
  OnnxProvider,
  RunSummary,
  StepperStart,
  StepperTurn,
  TrainState,
  TrajectoryView,
  WeightsDtype,
} from '../../worker/protocol.ts';

export type GpuStatus = 'idle' | 'acquiring' | 'ready' | 'unavailable' | 'error';

export interface GpuSlice {
  gpuStatus: GpuStatus;
  adapter: AdapterReport | null;
  gpuError: string | null;
  gpuLiveBytes: number;
  selfCheck: SelfCheckResult | null;
  selfCheckRunning: boolean;
  selfCheckError: string | null;
  connectGpu: () => Promise<void>;
  runSelfCheck: () => Promise<void>;
  refreshGpuBytes: () => Promise<void>;
  /** A lost device: a new one, the model and the open run restored by the engine. */
  recoverGpu: (why: string) => Promise<void>;
  /** What the last recovery did, for the banner. */
  gpuRecovery: string | null;
}

/** One entry of public/models/index.json (written by `npm run models`). */
export interface BundledModel {
  name: string;
  description: string;
  size: number;
  tokenizer: boolean;
  files: Record<string, number>;
}

export interface ModelLoading {
  label: string;
  phase: LoadPhase;
  files: FileProgress[];
  startedAt: number;
}

export interface DownloadState {
  status: 'exporting' | 'done' | 'error';
  fileName: string | null;
  bytes: number | null;
  files: { name: string; bytes: number }[];
  ms: number | null;
  error: string | null;
}

export interface ModelSlice {
  catalog: BundledModel[] | null;
  catalogError: string | null;
  modelLoading: ModelLoading | null;
  modelError: ModelLoadError | null;
  model: ModelInfo | null;
  download: DownloadState | null;
  hubEndpoint: string;
  cacheMessage: string | null;
  fetchCatalog: () => Promise<void>;
  loadBundledModel: (name: string) => Promise<void>;
  loadHubModel: (repo: string, revision?: string) => Promise<void>;
  setHubEndpoint: (url: string) => void;
  clearModelCache: () => Promise<void>;
  loadModelFiles: (files: readonly File[]) => Promise<void>;
  downloadWeights: (dtype?: WeightsDtype) => Promise<void>;
}

export interface Generation {
  modelId: number;
  modelName: string;
  status: 'running' | 'done' | 'stopped' | 'error';
  promptText: string | null;
  promptIds: number[];
  tokens: GenToken[];
  text: string | null;
  finish: 'stop' | 'length' | 'stopped' | null;
  firstTokenMs: number | null;
  tokensPerSecond: number | null;
  totalMs: number | null;
  settings: SamplingSettings;
  error: string | null;
}

export interface GenerationSlice {
  genSettings: GenSettings;
  generation: Generation | null;
  generating: boolean;
  stopRequested: boolean;
  setGenSettings: (patch: Partial<GenSettings>) => void;
  generate: () => Promise<void>;
  stopGeneration: () => void;
}

export interface TaskSlice {
  /** The config the Task and Train screens edit (a valid TrainConfig, or the last valid one). */
  trainConfig: TrainConfig;
  /** Passages the stepper's search tool returns. */
  searchTopK: number;
  droppedTasks: DroppedTasks | null;
  taskError: string | null;
  setTrainConfig: (config: TrainConfig) => void;
  setSearchTopK: (k: number) => void;
  dropTaskFile: (file: File) => Promise<void>;
}

export interface TrainSlice {
  trainState: TrainState | null;
  trainError: string | null;
  /** Episodes finished in the current rollout phase, for the live view. */
  liveEpisodes: { row: number; reward: number; doneReason: string }[];
  runs: RunSummary[];
  /** Runs drawn on the charts (ids). */
  shownRuns: string[];
  smoothing: number;
  /** Trajectories of one step of a run, for the list. */
  trajectories: { runId: string; step: number; views: TrajectoryView[] } | null;
  refreshRuns: () => Promise<void>;
  startTraining: () => Promise<void>;
  trainOneStep: () => Promise<void>;
  pauseTraining: () => Promise<void>;
  resetTraining: () => Promise<void>;
  resumeRun: (runId: string) => Promise<void>;
  deleteRun: (runId: string) => Promise<void>;
  toggleShownRun: (runId: string) => void;
  setSmoothing: (s: number) => void;
  downloadRunFile: (runId: string, what: 'metrics-jsonl' | 'metrics-csv' | 'config') => Promise<void>;
  downloadTrainedWeights: () => Promise<void>;
  loadTrajectories: (runId: string, step: number) => Promise<void>;
  appendMetrics: (runId: string, line: StepMetrics) => void;
}

export interface StepperSlice {
  stepper: {
    start: StepperStart;
    turns: StepperTurn[];
    done: boolean;
  } | null;
  stepperBusy: boolean;
  stepperError: string | null;
  /** The trajectory the inspector shows. */
  inspected: TrajectoryView | null;
  stepperStart: (
    pick: import('../../worker/protocol.ts').QuestionPick,
    temperature: number,
    seed: number,
  ) => Promise<void>;
  stepperNext: () => Promise<void>;
  stepperRun: () => Promise<void>;
  stepperReset: () => Promise<void>;
  inspect: (view: TrajectoryView | null) => void;
  /** Shows a finished trajectory (e.g. from a training step) in the stepper, all turns taken. */
  openInStepper: (view: TrajectoryView) => void;
}

export type Screen = 'model' | 'task' | 'stepper' | 'train' | 'inspector' | 'gpu';

export interface UiSlice {
  screen: Screen;
  setScreen: (s: Screen) => void;
}

/** The ONNX export of one source (the loaded model or the trained policy): its download and check. */
export interface OnnxState {
  source: ExportSource;
  status: 'exporting' | 'checking' | 'done' | 'error';
  download: { fileName: string; bytes: number; files: { name: string; bytes: number }[] } | null;
  check: OnnxCheck | null;
  error: string | null;
}

export interface OnnxSlice {
  onnx: OnnxState | null;
  downloadOnnx: (source: ExportSource) => Promise<void>;
  checkOnnx: (source: ExportSource, provider: OnnxProvider) => Promise<void>;
}

export type LabState = GpuSlice &
  ModelSlice &
  OnnxSlice &
  GenerationSlice &
  TaskSlice &
  TrainSlice &
  StepperSlice &
  UiSlice;
