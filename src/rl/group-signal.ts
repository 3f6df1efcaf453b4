// What a batch of sampled groups offers a group-relative method (GRPO, RLOO): pass@k, and how many
// groups have rewards that differ at all. A group whose G rewards are equal has zero advantage on
// every token under GRPO and RLOO, so it teaches nothing but the KL term; when most groups are like
// that, the step is mostly noise. bench/pass-at-k.ts prints these for a checkpoint at a few
// temperatures before a long run is spent on it.
//
// maj@k, the EM of each group's most frequent answer, is what greedy decoding would score if RL only
// sharpened the policy towards the answers it already samples most (RL on a small budget mostly
// does that); pass@k bounds what it could reach by learning which of its answers are right.
//
// Input: one row per episode, with its group (question) index. Groups may be ragged.

export interface GroupedEpisode {
  group: number;
  /** Exact match of the episode's answer (0 or 1). */
  em: number;
  /** Its token F1, where the caller has it (groupScores then gives F1 beside each EM). */
  f1?: number;
  /** The scalar reward a group method compares (outcome + process rewards). */
  reward: number;
  /**
   * The answer as EM compares it (normalised, so equal answers have equal EM); null when the episode
   * gave none. maj@k is computed when every episode has one.
   */
  answer?: string | null;
}

export interface GroupSignal {
  groups: number;
  episodes: number;
  /** Mean EM over episodes (pass@1 estimated from every sample). */
  meanEm: number;
  /** Share of groups with at least one episode of EM 1. */
  passAtK: number;
  /** Share of groups whose EM differs between samples: the groups the outcome alone separates. */
  emSplitGroups: number;
  /** Share of groups whose rewards are not all equal (|max − min| > eps): any signal at all. */
  rewardSplitGroups: number;
  /** Mean over groups of the rewards' population std. */
  meanRewardStd: number;
  /**
   * Mean over groups of the EM of the group's most frequent answer (episodes without one do not vote;
   * a tie counts each tied answer's EM equally; a group with no answer scores 0). Undefined unless
   * every episode has `answer`.
   */
  majAtK?: number;
}

export function groupSignal(episodes: readonly GroupedEpisode[], eps = 1e-9): GroupSignal {
  if (episodes.length === 0) throw new Error('groupSignal: no episodes');
  const scores = groupScores(episodes, eps);
  let emSplit = 0;
  let rewardSplit = 0;
  let stdSum = 0;
  for (const g of groupsOf(episodes).values()) {
    const ems = g.map((e) => e.em);
    const rs = g.map((e) => e.reward);
    if (Math.max(...ems) - Math.min(...ems) > eps) emSplit++;
    if (Math.max(...rs) - Math.min(...rs) > eps) rewardSplit++;
    const m = rs.reduce((s, x) => s + x, 0) / rs.length;
    stdSum += Math.sqrt(rs.reduce((s, x) => s + (x - m) ** 2, 0) / rs.length);
  }
  const k = scores.length;
  const withAnswers = scores.every((g) => g.majEm !== undefined);
  return {
    groups: k,
    episodes: episodes.length,
    meanEm: episodes.reduce((s, e) => s + e.em, 0) / episodes.length,
    passAtK: scores.reduce((s, g) => s + g.pass, 0) / k,
    emSplitGroups: emSplit / k,
    rewardSplitGroups: rewardSplit / k,
    meanRewardStd: stdSum / k,
    ...(withAnswers && { majAtK: scores.reduce((s, g) => s + (g.majEm ?? 0), 0) / k }),
  };
}

/** One group's (one question's) scores over its samples: the per-question rows behind pass@k and maj@k. */
export interface GroupScore {
  group: number;
  /** Its episodes' mean EM and F1 (F1 when every episode has one). */
  meanEm: number;
  meanF1?: number;
  /** 1 when some episode is right (EM > eps), else 0; bestF1 is its episodes' highest F1. */
  pass: number;
  bestF1?: number;
  /** The EM and F1 of its most frequent answer, as in maj@k; undefined unless every episode has `answer`. */
  majEm?: number;
  majF1?: number;
}

/**
 * Each group's scores, in the order its first episode comes: what `npm run bench:passk -- --json` writes
 * per question, so that two checkpoints' pass@k and maj@k can be compared question by question.
 */
export function groupScores(episodes: readonly GroupedEpisode[], eps = 1e-9): GroupScore[] {
  const withAnswers = episodes.every((e) => e.answer !== undefined);
  const withF1 = episodes.every((e) => e.f1 !== undefined);
  return [...groupsOf(episodes)].map(([group, g]) => {
    const f1s = g.map((e) => e.f1 ?? 0);
    const maj = withAnswers ? majority(g) : undefined;
    return {
      group,
      meanEm: g.reduce((s, e) => s + e.em, 0) / g.length,
      pass: g.some((e) => e.em > eps) ? 1 : 0,
      ...(withF1 && { meanF1: f1s.reduce((s, x) => s + x, 0) / g.length, bestF1: Math.max(...f1s) }),
      ...(maj && { majEm: maj.em }),
      ...(maj && withF1 && { majF1: maj.f1 }),
    };
  });
}

function groupsOf(episodes: readonly GroupedEpisode[]): Map<number, GroupedEpisode[]> {
  const byGroup = new Map<number, GroupedEpisode[]>();
  for (const e of episodes) {
    const g = byGroup.get(e.group);
    if (g) g.push(e);
    else byGroup.set(e.group, [e]);
  }
  return byGroup;
}

/**
 * EM and F1 of a group's most frequent answer; tied answers count equally; no answer at all scores 0.
 * An answer's EM is its voters' mean (equal unless a format gate zeroed some of them), and so its F1.
 */
function majority(group: readonly GroupedEpisode[]): { em: number; f1: number } {
  const votes = new Map<string, { count: number; em: number; f1: number }>();
  for (const e of group) {
    if (e.answer === null || e.answer === undefined) continue;
    const v = votes.get(e.answer);
    if (v) {
      v.count++;
      v.em += e.em;
      v.f1 += e.f1 ?? 0;
    } else votes.set(e.answer, { count: 1, em: e.em, f1: e.f1 ?? 0 });
  }
  if (votes.size === 0) return { em: 0, f1: 0 };
  const top = Math.max(...[...votes.values()].map((v) => v.count));
  const modal = [...votes.values()].filter((v) => v.count === top);
  return {
    em: modal.reduce((s, v) => s + v.em / v.count, 0) / modal.length,
    f1: modal.reduce((s, v) => s + v.f1 / v.count, 0) / modal.length,
  };
}
