// Typed errors for everything that reads model files. Each one carries the file it is about and the
// problem in words, so the UI can show "config.json: num_attention_heads (14) is not a multiple of
// num_key_value_heads (3)" and callers can branch on the class, never on message text.

export class ModelFileError extends Error {
  /** The file the problem is in, as named in the checkpoint (e.g. `model.safetensors`). */
  readonly file: string;
  /** The problem alone, without the file name. */
  readonly problem: string;
  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super(`${file}: ${problem}`, options);
    this.file = file;
    this.problem = problem;
    this.name = 'ModelFileError';
  }
}

/** A safetensors file (or its shard index) is malformed. */
export class SafetensorsError extends ModelFileError {
  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super(file, problem, options);
    this.name = 'SafetensorsError';
  }
}

/** config.json / generation_config.json is malformed or describes a model we do not support. */
export class ModelConfigError extends ModelFileError {
  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super(file, problem, options);
    this.name = 'ModelConfigError';
  }
}

/**
 * The files parse, but do not fit together: a tensor is missing, has the wrong shape for the config,
 * is not expected at all, or the tokenizer has more tokens than the embedding has rows.
 */
export class CheckpointError extends ModelFileError {
  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super(file, problem, options);
    this.name = 'CheckpointError';
  }
}

/** The model is valid but does not fit this GPU adapter's buffer limits. */
export class ModelTooLargeError extends ModelFileError {
  constructor(file: string, problem: string) {
    super(file, problem);
    this.name = 'ModelTooLargeError';
  }
}

export type ModelSourceErrorKind =
  | 'not-found' // HTTP 404, no such file in the folder, or a dev server's index.html fallback
  | 'unauthorized' // HTTP 401/403: gated or private repository (the Hub also says 401 for unknown repos)
  | 'http' // any other non-2xx status
  | 'network' // fetch itself failed: offline, DNS, CORS, connection reset
  | 'truncated' // the body ended before Content-Length bytes arrived
  | 'io'; // reading a local file failed

/** A file could not be fetched or read from a model source. */
export class ModelSourceError extends ModelFileError {
  readonly kind: ModelSourceErrorKind;
  /** HTTP status when there was a response, else null. */
  readonly status: number | null;
  constructor(
    kind: ModelSourceErrorKind,
    file: string,
    problem: string,
    options?: { cause?: unknown; status?: number },
  ) {
    super(file, problem, options);
    this.kind = kind;
    this.status = options?.status ?? null;
    this.name = 'ModelSourceError';
  }
}

/** tokenizer.json / tokenizer_config.json is malformed or not a Qwen tokenizer. */
export class TokenizerError extends ModelFileError {
  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super(file, problem, options);
    this.name = 'TokenizerError';
  }
}
