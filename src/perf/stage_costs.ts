/**
 * What each stage of a decode step costs inside the step: the step's GPU time with one stage's
 * dispatches issued twice in a row (GpuModel.repeatStage), less its time as it is. The profile
 * (kernel_profile.ts) times each dispatch in a pass of its own, so every kernel there also pays
 * a pass's start, most of what a small kernel reads there (H200, session 42, 64 x 1024: the
 * MoE dispatch 11.6 µs a layer in the profile, 5.0 in the step).
 *
 * Two things to know when reading the figures:
 * - The repeat reads what the stage read a moment before, so weights that fit in the GPU's L2
 *   (a layer's qkv or o projection, the router) come from there the second time: for those the
 *   figure is a lower bound of the stage's first, cold run.
 * - A stage that adds to what it reads (the residual: `moe router` where it adds the o
 *   projection's partial sums, `moe combine`, batch 1's `moe down` and one-row `linear o`)
 *   adds twice, so the step's values change (and with them, at later layers, the routing);
 *   its work does not.
 *
 * ```ts
 * const costs = await measureStageCosts(model, () => time(new SyntheticDecode(model, 8, 1024, 14)));
 * console.log(formatStageCosts(costs, cost, bw, model.config.numLayers));
 * ```
 */
import type { GpuModel } from "../model/gpu_model.ts";
import type { StepCost } from "../model/step_cost.ts";
import { formatTable } from "../util/table.ts";
import { round3 } from "../util/sample_stats.ts";

/** One stage: the step's GPU ms with it repeated. */
export interface StageCost {
  readonly stage: string;
  /** Dispatches of the stage a step (passes asked for under its label). */
  readonly uses: number;
  readonly gpuMs: number;
  /** What the stage adds to a step: gpuMs less the step's own (mean of its two runs). */
  readonly usStep: number;
}

export interface StageCosts {
  /** The step as it is, timed before the stages and after them. */
  readonly baseMs: readonly [number, number];
  readonly stages: readonly StageCost[];
}

/**
 * Times the step as it is, then with each stage the step encodes repeated in turn (in the
 * order the step first uses them), then as it is again. `timeSteps` runs a fresh set of steps
 * of the point and returns their GPU ms a step.
 */
export async function measureStageCosts(
  model: GpuModel,
  timeSteps: () => Promise<number>,
): Promise<StageCosts> {
  model.repeatStage = null;
  const first = await timeSteps();
  const uses = model.lastStepStageUses;
  const measured: { stage: string; uses: number; gpuMs: number }[] = [];
  try {
    for (const [stage, n] of uses) {
      model.repeatStage = stage;
      measured.push({ stage, uses: n, gpuMs: await timeSteps() });
    }
  } finally {
    model.repeatStage = null;
  }
  const second = await timeSteps();
  const base = (first + second) / 2; // stepMs of the result
  return {
    baseMs: [first, second],
    stages: measured.map((m) => ({ ...m, usStep: (m.gpuMs - base) * 1e3 })),
  };
}

/** The step's own GPU ms: the mean of its two runs. */
function stepMs(costs: StageCosts): number {
  return (costs.baseMs[0] + costs.baseMs[1]) / 2;
}

/** One stage's figures as the table and the JSON give them. */
interface StageRow extends StageCost {
  /** µs a layer where the stage runs in every layer (at least `layers` dispatches a step). */
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
  layers: number,
): StageRow[] {
  const baseUs = stepMs(costs) * 1e3;
  return costs.stages.map((s) => {
    const c = cost?.byLabel.get(s.stage);
    return {
      ...s,
      usLayer: s.uses >= layers ? s.usStep / layers : null,
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
 * The stages as a table, largest first: µs a step; µs a layer where the stage runs in every
 * layer; its share of the step; and against the bytes the step cost model gives it, its time at
 * the read roof and how many times that it takes. Then how much of the step they add up to.
 */
export function formatStageCosts(
  costs: StageCosts,
  cost: StepCost | null,
  bytesPerSecond: number,
  layers: number,
): string {
  const base = stepMs(costs);
  const rows = stageRows(costs, cost, bytesPerSecond, layers)
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
    `(${((sum / (base * 1e3)) * 100).toFixed(0)}%): the rest no stage's repeat shows`;
}

/** The stages as JSON fields (µs rounded to 0.001). */
export function stageCostsJson(
  costs: StageCosts,
  cost: StepCost | null,
  bytesPerSecond: number,
  layers: number,
): Record<string, unknown> {
  return {
    base_gpu_ms: costs.baseMs.map(round3),
    stages_sum_us: round3(stagesSumUs(costs)),
    stages: stageRows(costs, cost, bytesPerSecond, layers).map((r) => ({
      stage: r.stage,
      dispatches: r.uses,
      gpu_ms: round3(r.gpuMs),
      us_step: round3(r.usStep),
      us_layer: r.usLayer === null ? null : round3(r.usLayer),
      roof_us: r.roofUs === null ? null : round3(r.roofUs),
    })),
  };
}
