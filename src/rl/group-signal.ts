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
  const byGroup = new Map<number, GroupedEpisode[]>();
  for (const e of episodes) {
    const g = byGroup.get(e.group);
    if (g) g.push(e);
    else byGroup.set(e.group, [e]);
  }
  let pass = 0;
  let emSplit = 0;
  let rewardSplit = 0;
  let stdSum = 0;
  let majSum = 0;
  const withAnswers = episodes.every((e) => e.answer !== undefined);
  for (const g of byGroup.values()) {
    if (withAnswers) majSum += majorityEm(g);
    const ems = g.map((e) => e.em);
    const rs = g.map((e) => e.reward);
    if (ems.some((x) => x > 0)) pass++;
    if (Math.max(...ems) - Math.min(...ems) > eps) emSplit++;
    if (Math.max(...rs) - Math.min(...rs) > eps) rewardSplit++;
    const m = rs.reduce((s, x) => s + x, 0) / rs.length;
    stdSum += Math.sqrt(rs.reduce((s, x) => s + (x - m) ** 2, 0) / rs.length);
  }
  const k = byGroup.size;
  return {
    groups: k,
    episodes: episodes.length,
    meanEm: episodes.reduce((s, e) => s + e.em, 0) / episodes.length,
    passAtK: pass / k,
    emSplitGroups: emSplit / k,
    rewardSplitGroups: rewardSplit / k,
    meanRewardStd: stdSum / k,
    ...(withAnswers && { majAtK: majSum / k }),
  };
}

/** EM of a group's most frequent answer; tied answers count equally; no answer at all scores 0. */
function majorityEm(group: readonly GroupedEpisode[]): number {
  const votes = new Map<string, { count: number; em: number }>();
  for (const e of group) {
    if (e.answer === null || e.answer === undefined) continue;
    const v = votes.get(e.answer);
    if (v) {
      v.count++;
      v.em += e.em;
    } else votes.set(e.answer, { count: 1, em: e.em });
  }
  if (votes.size === 0) return 0;
  const top = Math.max(...[...votes.values()].map((v) => v.count));
  const modal = [...votes.values()].filter((v) => v.count === top);
  // An answer's EM is its voters' mean (equal unless a format gate zeroed some of them).
  return modal.reduce((s, v) => s + v.em / v.count, 0) / modal.length;
}
