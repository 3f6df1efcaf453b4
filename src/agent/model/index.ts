// The model-files API, browser-safe. Node-only helpers (directorySource, writeCheckpointFiles,
// readQwenTokenizerFiles) live in ./node-fs.ts and must be imported from there, by Node code only.

export {
  type Checkpoint,
  CONFIG_FILE,
  GENERATION_CONFIG_FILE,
  type LoadCheckpointOptions,
  type LoadedTensor,
  loadCheckpoint,
  type SaveCheckpointInput,
  saveCheckpoint,
  TOKENIZER_FILES,
  WEIGHTS_FILE,
} from './checkpoint.ts';
export {
  type Architecture,
  type GenerationConfig,
  type ModelConfig,
  parseGenerationConfig,
  parseModelConfig,
  serializeGenerationConfig,
  serializeModelConfig,
  type TorchDtype,
} from './config.ts';
export {
  bf16ToF32,
  decodeBf16,
  decodeF16,
  decodeF32,
  encodeBf16,
  encodeF16,
  encodeF32,
  f16ToF32,
  f32ToBf16,
  f32ToF16,
} from './dtype.ts';
export {
  CheckpointError,
  ModelConfigError,
  ModelFileError,
  ModelSourceError,
  type ModelSourceErrorKind,
  ModelTooLargeError,
  SafetensorsError,
  TokenizerError,
} from './errors.ts';
export {
  type ForwardActivations,
  type GenerateOptions,
  type GenerateResult,
  GenerationSession,
  packBatch,
  QwenGpuModel,
  type TokenBatch,
} from './qwen-gpu.ts';
export {
  encodeFloat32,
  type FloatDtype,
  parseSafetensors,
  parseShardIndex,
  type SafetensorsDtype,
  type SafetensorsFile,
  serializeSafetensors,
  serializeShardIndex,
  type TensorEntry,
  type TensorToWrite,
  tensorBytes,
  tensorToFloat32,
} from './safetensors.ts';
export {
  fileSource,
  hubSource,
  type ModelSource,
  memorySource,
  type NamedBlob,
  type Progress,
  type ProgressCallback,
  publicModelSource,
  type ResponseCache,
  urlSource,
} from './sources.ts';
export {
  makeTinyCheckpoint,
  TINY_CHECKPOINTS,
  type TinyCheckpointSpec,
  tinyCheckpoint,
  tinyCheckpointTensors,
  tinyModelConfig,
  tinySpec,
} from './tiny-checkpoints.ts';
export {
  type AdapterFit,
  type AdapterLimits,
  assertFitsAdapter,
  checkAdapterLimits,
  checkTensors,
  checkVocabSize,
  type ExpectedTensor,
  expectedTensors,
  parameterCount,
} from './weights.ts';
