// The training loop around Trainer.trainStep, shared by `npm run train` and the browser lab: evaluate,
// step, log metrics.jsonl, save sample trajectories and checkpoints, stop on the step or time budget.
//
// Run folder (RunStorage):
//   config.json                 the resolved config
//   metrics.jsonl               one line per step ({"step": n, ...}); evaluation lines carry "eval/*"
//   samples/step-XXXXXX.json    the first train.saveTrajectories trajectories of a step
//   arrays/step-XXXXXX.json     with train.saveArrays, the step's per-token arrays (step-arrays.ts)
//   checkpoints/step-XXXXXX/    policy (HF layout), optimizer state, trainer state (resume)
// On resume, metrics.jsonl is cut back to the restored step, so the file of a resumed run equals that
// of an uninterrupted one (timing fields aside).

import { GpuOutOfMemoryError } from '../gpu/errors.ts';
import { type Trajectory, trajectoryToJSON } from './rollout.ts';
import { stepArraysFile } from './step-arrays.ts';
import { type RunStorage, readText } from './storage.ts';
import type { StepMetrics, Trainer, TrainerHooks, UpdateArrays } from './trainer.ts';

export interface RunHooks extends TrainerHooks {
  /** Every metrics line, as written. */
  onMetrics?: (line: StepMetrics) => void;
  /** Asked between steps; true ends the run after saving a checkpoint. */
  shouldStop?: () => boolean;
  /** Free-form progress messages (CLI status line, UI). */
  onMessage?: (text: string) => void;
}

export const METRICS_FILE = 'metrics.jsonl';

/** Cuts metrics.jsonl back to lines with step <= `step` (resume). */
export async function truncateMetrics(storage: RunStorage, step: number): Promise<void> {
  const text = await readText(storage, METRICS_FILE);
  if (text === null) return;
  const kept = text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .filter((l) => {
      try {
        return (JSON.parse(l) as { step: number }).step <= step;
      } catch {
        return false;
      }
    });
  await storage.write(METRICS_FILE, kept.map((l) => `${l}\n`).join(''));
}

async function logLine(storage: RunStorage, line: StepMetrics, hooks: RunHooks): Promise<void> {
  await storage.append(METRICS_FILE, `${JSON.stringify(line)}\n`);
  hooks.onMetrics?.(line);
}

/** Evaluates the trainer's policy on the held-out split: the metrics line and the trajectories. */
export async function evaluationLine(
  trainer: Trainer,
): Promise<{ line: StepMetrics; trajectories: Trajectory[] }> {
  const t0 = performance.now();
  const r = await trainer.evaluate();
  const line: StepMetrics = {
    step: trainer.step,
    'eval/em': r.em,
    'eval/f1': r.f1,
    'eval/reward': r.reward,
    'eval/turns': r.turns,
    'eval/tool_calls': r.toolCalls,
    'eval/format_valid': r.formatValid,
    'eval/truncated_turns': r.truncatedTurns,
    'eval/n': r.n,
    'eval/modal_answer_share': r.modalAnswer.share,
    ...Object.fromEntries(Object.entries(r.byType).map(([type, s]) => [`eval/em/${type}`, s.em])),
    ...Object.fromEntries(
      Object.entries(r.byOutcome).map(([outcome, share]) => [`eval/outcome/${outcome}`, share]),
    ),
    'eval/supporting_recall': r.supportingRecall,
    'time/eval_s': (performance.now() - t0) / 1000,
  };
  return { line, trajectories: r.trajectories };
}

async function evaluateLine(trainer: Trainer, storage: RunStorage, hooks: RunHooks): Promise<void> {
  if (trainer.config.train.evalSize === 0) return;
  hooks.onPhase?.('evaluate', trainer.step);
  const { line, trajectories } = await evaluationLine(trainer);
  await logLine(storage, line, hooks);
  await storage.write(
    `samples/eval-step-${String(trainer.step).padStart(6, '0')}.json`,
    JSON.stringify(trajectories.slice(0, 8).map(trajectoryToJSON)),
  );
}

/**
 * Runs `trainer` until config.train.steps (or maxMinutes, or shouldStop), starting from its current
 * step (0, or the restored one). Returns the last step's metrics.
 */
export async function runTraining(
  trainer: Trainer,
  storage: RunStorage,
  hooks: RunHooks = {},
): Promise<void> {
  const c = trainer.config.train;
  await storage.write('config.json', `${JSON.stringify(trainer.config, null, 2)}\n`);
  await truncateMetrics(storage, trainer.step);
  const t0 = performance.now();
  // The step last evaluated: a run stopped (time budget, shouldStop) right after an evaluation step
  // does not evaluate the same weights again at the end.
  let evaluated = -1;
  const evaluate = async () => {
    await evaluateLine(trainer, storage, hooks);
    evaluated = trainer.step;
  };
  if (trainer.step === 0) await evaluate();
  while (trainer.step < c.steps) {
    if (hooks.shouldStop?.()) break;
    if (c.maxMinutes > 0 && (performance.now() - t0) / 60000 >= c.maxMinutes) {
      hooks.onMessage?.(`time budget of ${c.maxMinutes} min reached at step ${trainer.step}`);
      break;
    }
    let arrays: UpdateArrays | null = null;
    const line = await trainer.trainStep(
      c.saveArrays
        ? {
            ...hooks,
            onUpdateArrays: (a) => {
              arrays = a;
              hooks.onUpdateArrays?.(a);
            },
          }
        : hooks,
    );
    await logLine(storage, line, hooks);
    if (arrays !== null)
      await storage.write(
        `arrays/step-${String(trainer.step).padStart(6, '0')}.json`,
        JSON.stringify(stepArraysFile(trainer.step, arrays)),
      );
    const samples = trainer.lastTrajectories.slice(0, c.saveTrajectories);
    if (samples.length > 0) {
      await storage.write(
        `samples/step-${String(trainer.step).padStart(6, '0')}.json`,
        JSON.stringify(samples.map(trajectoryToJSON)),
      );
    }
    const last = trainer.step === c.steps;
    if (c.evalEvery > 0 && trainer.step % c.evalEvery === 0 && !last) await evaluate();
    if (c.checkpointEvery > 0 && trainer.step % c.checkpointEvery === 0 && !last) {
      hooks.onPhase?.('checkpoint', trainer.step);
      await trainer.saveCheckpoint();
    }
  }
  if (evaluated !== trainer.step) await evaluate();
  hooks.onPhase?.('checkpoint', trainer.step);
  const steps = await trainer.checkpointSteps();
  if (steps.at(-1) !== trainer.step) await trainer.saveCheckpoint();
}

/**
 * What a person reads when a run stops on an error in the middle of training: the last step done,
 * what to change, and where --resume starts. The failed step left nothing behind: its weights and
 * optimizer state may be half-updated, so nothing is saved from them, and --resume cuts
 * metrics.jsonl back to the last checkpoint.
 */
export function runFailureMessage(error: unknown, step: number, lastCheckpoint: number | undefined): string {
  const what = error instanceof Error ? error.message : String(error);
  const lines = [`the run failed after step ${step}: ${what}`];
  if (error instanceof GpuOutOfMemoryError) {
    lines.push(
      'The GPU ran out of memory. Other programs on the same GPU (other training runs too) hold memory ' +
        "the memory planner does not see: set train.memoryBudgetMiB (--memory-budget) to this run's share of the GPU " +
        '(the planner then splits the update into micro-batches), or lower train.microBatchRows, ' +
        'rollout.questionsPerStep × rollout.samplesPerQuestion or rollout.maxTotalTokens.',
    );
  }
  lines.push(
    lastCheckpoint === undefined
      ? 'No checkpoint was saved yet: the run starts over (--force).'
      : `The last checkpoint is step ${lastCheckpoint}: --resume continues from it.`,
  );
  return lines.join('\n');
}
