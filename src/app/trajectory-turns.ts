// A finished trajectory's turns in the stepper's shape (StepperTurn), so a training step's rollout
// opens in the stepper and the inspector as an episode stepped live does.
import type { Trajectory } from '../rl/rollout.ts';
import type { StepperTurn } from '../worker/protocol.ts';

export function trajectoryTurns(t: Trajectory): StepperTurn[] {
  const last = t.turnRecords.length - 1;
  return t.turnRecords.map((r) => ({
    turn: r.turn,
    action: r.action,
    actionIds: t.ids.slice(r.policyStart, r.policyEnd),
    calls: r.calls.map((c) => ({
      name: c.name,
      arguments: c.arguments === null ? '(unparsable)' : JSON.stringify(c.arguments),
      ok: c.success,
      ...(c.success ? {} : { error: c.status }),
    })),
    toolResult: r.resultAppended ? r.toolResultText : '',
    reward: {
      total: r.reward.total,
      parts: { retrieval: r.reward.retrieval, format: r.reward.format, call: r.reward.call },
    },
    outcome:
      r.turn === last && t.outcome
        ? {
            outcome: t.outcome.outcome,
            em: t.outcome.em,
            f1: t.outcome.f1,
            formatValid: t.outcome.formatValid,
          }
        : null,
    done: r.turn === last,
  }));
}
