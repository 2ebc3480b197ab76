/**
 * What each stage of a decode step costs inside the step, measured two ways (GpuModel.stageEdit):
 * `repeat`, the step's GPU time with one stage's dispatches issued twice in a row, less its time
 * as it is; `drop`, its time as it is less the step with that stage's dispatches left out. The
 * profile (kernel_profile.ts) times each dispatch in a pass of its own, so every kernel there
 * also pays a pass's start, most of what a small kernel reads there (H200, session 42, 64 x
 * 1024: the MoE dispatch 11.6 µs a layer in the profile, 5.0 in the step).
 *
 * Things to know when reading the figures:
 * - The repeat reads what the stage read a moment before, so weights that fit in the GPU's L2
 *   (a layer's qkv or o projection, the router) come from there the second time: for those the
 *   figure is a lower bound of the stage's first, cold run. The drop has no such bias: it takes
 *   away the stage's first run itself. But the stage after a dropped one may find in L2 what the
 *   dropped one would have evicted, and start without waiting for it: its figure can read high.
 * - At 64 x 1024 on the H200 the repeats add up to 21.2 of the step's 25.4 ms and the drops to
 *   26.8 (session 43, b13e7dd): the expert GEMMs and attention 34-36 µs a layer apart.
 * - A stage that adds to what it reads (the residual: `moe router` where it adds the o
 *   projection's partial sums, `moe combine`, batch 1's `moe down` and one-row `linear o`)
 *   adds twice, or not at all, so the step's values change (and with them, at later layers,
 *   the routing); its work does not. A dropped stage leaves the stages after it reading what
 *   its buffers held before: the same sizes, other values.
 *
 * ```ts
 * const time = () => timeSteps(new SyntheticDecode(model, 8, 1024, 14));
 * const costs = await measureStageCosts(model, time, "drop");
 * console.log(formatStageCosts(costs, cost, bw, model.config.numLayers));
 * ```
 */
import type { GpuModel } from "../model/gpu_model.ts";
import type { StepCost } from "../model/step_cost.ts";
import { formatTable } from "../util/table.ts";
import { round3 } from "../util/sample_stats.ts";

/** How a stage's cost is taken: its dispatches twice, or none of them. */
export type StageMethod = "repeat" | "drop";

export const STAGE_METHODS: readonly StageMethod[] = ["repeat", "drop"];

/** One stage: the step's GPU ms with it repeated or left out. */
export interface StageCost {
  readonly stage: string;
  /** Dispatches of the stage a step (passes asked for under its label). */
  readonly uses: number;
  /** The layers it runs in (null: a pass of it runs outside the layers). */
  readonly layers: number | null;
  readonly gpuMs: number;
  /**
   * What the stage adds to a step: gpuMs less the step's own (mean of its two runs) where
   * repeated, the step's own less gpuMs where left out.
   */
  readonly usStep: number;
}

export interface StageCosts {
  readonly method: StageMethod;
  /** The step as it is, timed before the stages and after them. */
  readonly baseMs: readonly [number, number];
  readonly stages: readonly StageCost[];
}

/**
 * Times the step as it is, then with each stage the step encodes repeated (or left out) in
 * turn (in the order the step first uses them), then as it is again. `timeSteps` runs a fresh
 * set of steps of the point and returns their GPU ms a step.
 */
export async function measureStageCosts(
  model: GpuModel,
  timeSteps: () => Promise<number>,
  method: StageMethod = "repeat",
): Promise<StageCosts> {
  model.stageEdit = null;
  model.countStages = true;
  let first: number;
  let uses: ReadonlyMap<string, number>;
  let layers: ReadonlyMap<string, number | null>;
  try {
    first = await timeSteps();
    uses = model.lastStepStageUses;
    layers = model.lastStepStageLayers;
  } finally {
    model.countStages = false;
  }
  const measured: { stage: string; uses: number; layers: number | null; gpuMs: number }[] = [];
  try {
    for (const [stage, n] of uses) {
      model.stageEdit = { stage, times: method === "repeat" ? 2 : 0 };
      measured.push({
        stage,
        uses: n,
        layers: layers.get(stage) ?? null,
        gpuMs: await timeSteps(),
      });
    }
  } finally {
    model.stageEdit = null;
  }
  const second = await timeSteps();
  const base = stepMs({ baseMs: [first, second] });
  const sign = method === "repeat" ? 1 : -1;
  return {
    method,
    baseMs: [first, second],
    stages: measured.map((m) => ({ ...m, usStep: sign * (m.gpuMs - base) * 1e3 })),
  };
}

/** The step's own GPU ms: the mean of its two runs. */
function stepMs(costs: Pick<StageCosts, "baseMs">): number {
  return (costs.baseMs[0] + costs.baseMs[1]) / 2;
}

/** One stage's figures as the table and the JSON give them. */
interface StageRow extends StageCost {
  /** µs a layer of the layers it runs in (null where a pass of it runs outside them). */
  readonly usLayer: number | null;
  /** Its share of the step's own time. */
  readonly share: number;
  /** Its bytes at the read roof, µs a step (null where the cost model has none). */
  readonly roofUs: number | null;
}

function stageRows(
  costs: StageCosts,
  cost: StepCost | null,
  bytesPerSecond: number,
): StageRow[] {
  const baseUs = stepMs(costs) * 1e3;
  return costs.stages.map((s) => {
    const c = cost?.byLabel.get(s.stage);
    return {
      ...s,
      usLayer: s.layers ? s.usStep / s.layers : null,
      share: s.usStep / baseUs,
      roofUs: c && c.bytes > 0 ? (c.bytes / bytesPerSecond) * 1e6 : null,
    };
  });
}

/** The stages' figures added up, µs a step. */
export function stagesSumUs(costs: StageCosts): number {
  return costs.stages.reduce((a, s) => a + s.usStep, 0);
}

/**
 * The stages as a table, largest first: µs a step; µs a layer of the layers the stage runs in
 * (none where a pass of it runs outside them); its share of the step; and against the bytes the step cost model gives it, its time at
 * the read roof and how many times that it takes. Then how much of the step they add up to.
 */
export function formatStageCosts(
  costs: StageCosts,
  cost: StepCost | null,
  bytesPerSecond: number,
): string {
  const base = stepMs(costs);
  const rows = stageRows(costs, cost, bytesPerSecond)
    .sort((a, b) => b.usStep - a.usStep)
    .map((r) => [
      r.stage,
      String(r.uses),
      r.usStep.toFixed(1),
      r.usLayer === null ? "-" : r.usLayer.toFixed(1),
      (r.share * 100).toFixed(1) + "%",
      r.roofUs === null ? "-" : r.roofUs.toFixed(1),
      r.roofUs ? (r.usStep / r.roofUs).toFixed(2) + "x" : "-",
    ]);
  const sum = stagesSumUs(costs);
  return formatTable(
    ["stage", "dispatches", "µs a step", "µs a layer", "share", "roof µs", "× roof"],
    rows,
  ) +
    `\nthe stages add up to ${(sum / 1e3).toFixed(3)} of the step's ${base.toFixed(3)} ms ` +
    `(${((sum / (base * 1e3)) * 100).toFixed(0)}%): the rest no stage's ${
      costs.method === "repeat" ? "repeat" : "absence"
    } shows`;
}

/** The stages as JSON fields (µs rounded to 0.001). */
export function stageCostsJson(
  costs: StageCosts,
  cost: StepCost | null,
  bytesPerSecond: number,
): Record<string, unknown> {
  return {
    method: costs.method,
    base_gpu_ms: costs.baseMs.map(round3),
    stages_sum_us: round3(stagesSumUs(costs)),
    stages: stageRows(costs, cost, bytesPerSecond).map((r) => ({
      stage: r.stage,
      dispatches: r.uses,
      layers: r.layers,
      gpu_ms: round3(r.gpuMs),
      us_step: round3(r.usStep),
      us_layer: r.usLayer === null ? null : round3(r.usLayer),
      roof_us: r.roofUs === null ? null : round3(r.roofUs),
    })),
  };
}
