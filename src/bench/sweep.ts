/**
 * The point loop. For each planned point, at its boundary: collect garbage, let the
 * decode seeder stage (idle steps), then READY, a discarded replica when the point's
 * shape is new, the measured shot(s) (prepared untimed, ARM -> GO, timed), the estimate
 * (one sample, or the upper median of N), the result gather, the pool balance check,
 * cleanup and the boundary vote on the soft timeout. A point that cannot be measured is
 * skipped with its reason. The warm-up runs once before the first point.
 *
 * Attention-DP plugs in through the {@link PointSynchronizer} and the step driver's
 * hooks; real-KV seeding through the {@link DecodeSeeder} and {@link PrefixSeeder}.
 *
 * ```ts
 * const stop = await runSweep({ driver, content, salts, decodeSeeder, prefixSeeder, sync,
 *   gc, builder, softTimeoutSeconds: 600, log: console.error }, planned);
 * ```
 */
import type {
  BenchResult,
  Fpm,
  IterationGroup,
  MeasuredSample,
  PromptRecord,
  SkippedPoint,
} from "./artifact.ts";
import type { ArtifactBuilder } from "./artifact_builder.ts";
import type { DecodeSeeder } from "./decode_seeder.ts";
import { estimateWall } from "./estimate.ts";
import type { BoundaryGc } from "./gc_policy.ts";
import {
  runDecodeShot,
  runPrefillShot,
  type ShotContext,
  type ShotOutcome,
  type ShotRecord,
} from "./measure_shot.ts";
import type { PlannedPoint } from "./plan.ts";
import type { PointSynchronizer } from "./point_synchronizer.ts";
import type { PrefixSeeder } from "./prefix_seeder.ts";
import { Progress } from "./progress.ts";
import type { PromptContent } from "./prompt_content.ts";
import type { SaltScheme } from "./salts.ts";
import { shapeKey } from "./shape_key.ts";
import type { StepDriver } from "./step_driver.ts";
import { warmUp, type WarmupShape } from "./warmup.ts";

/** Everything the loop needs. */
export interface SweepOptions {
  /** Steps the engine (hooks: dp barrier, kvwarm stage round). */
  readonly driver: StepDriver;
  /** Prompt tokens. */
  readonly content: PromptContent;
  /** Cache salts. */
  readonly salts: SaltScheme;
  /** Decode KV. */
  readonly decodeSeeder: DecodeSeeder;
  /** Prefill prefixes. */
  readonly prefixSeeder: PrefixSeeder;
  /** Per-point agreement with other ranks. */
  readonly sync: PointSynchronizer;
  /** Collections at boundaries. */
  readonly gc: BoundaryGc;
  /** Receives results, skips, the warm-up. */
  readonly builder: ArtifactBuilder;
  /** Soft timeout in seconds from the sweep's start, its warm-up included (null: none). */
  readonly softTimeoutSeconds: number | null;
  /** Log lines (progress, notes). */
  readonly log: (line: string) => void;
  /** Called after every finished point (checkpoints). */
  readonly onPointDone?: (finished: number) => void;
  /** The point being measured, for error reports. */
  readonly onPointStart?: (benchmarkId: number) => void;
  /** True once the run was interrupted: the loop stops at the next boundary. */
  readonly interrupted?: () => boolean;
  /** Warm-up shape, fitted to the envelope (warmupShape). */
  readonly warmup: WarmupShape;
}

/** The warm-up log's words for what ended the clock warm-up. */
const WARMUP_ENDS = {
  time: "time",
  pool: "the KV pool: no room for a request beside the parked chains",
  stop: "the group's vote or the soft timeout",
} as const;

/** How the loop ended. */
export type SweepEnd = "complete" | "soft_timeout" | "interrupted";

/** Runs the warm-up and every planned point (see the module doc above). */
export async function runSweep(
  o: SweepOptions,
  planned: readonly PlannedPoint[],
): Promise<SweepEnd> {
  const { driver, builder, sync } = o;
  builder.sweepStartedMs = performance.now();
  const deadline = o.softTimeoutSeconds === null
    ? null
    : builder.sweepStartedMs + o.softTimeoutSeconds * 1000;
  const late = () => deadline !== null && performance.now() > deadline;
  // the clock warm-up ends when any rank's time is up: the group's boundary vote (point 0);
  // the first point's kvwarm stage builds inside it, its seconds counted (warmup.ts)
  const first = planned[0];
  builder.warmup = await warmUp(
    driver,
    o.content,
    o.salts,
    o.warmup,
    (done) => sync.boundaryVote(0, done || late()),
    first ? () => o.decodeSeeder.beforePoint(first.point, driver) : undefined,
  );
  const clock = builder.warmup.clock;
  if (clock) {
    const counted = clock.counted_seconds ?? 0;
    const stage = counted >= 0.01
      ? ` after ${counted.toFixed(2)} s of the first point's kvwarm stage`
      : "";
    const total = (builder.warmup.seconds + counted).toFixed(2);
    o.log(
      `warm-up: ${clock.requests} request(s) of up to ${clock.prompt_tokens} tokens for the ` +
        `clocks${stage}, ${total} s in all (--warmup-s ${clock.min_seconds}; ended by ` +
        `${WARMUP_ENDS[clock.ended ?? "time"]})`,
    );
  }
  const t0 = performance.now();
  builder.loopStartedMs = t0;
  const progress = new Progress(planned.length, {
    prefill: planned.filter((p) => p.point.kind === "prefill").length,
    decode: planned.filter((p) => p.point.kind === "decode").length,
  });
  const shapes = new Set<string>();
  const ctx: ShotContext = o;
  for (const p of planned) {
    o.onPointStart?.(p.benchmark_id);
    // a kvwarm stage built here is not the point's time: the ETA's pace leaves it out (on the
    // H200 the B32 rung's 5.8 s of chains made the first point's ETA 4:44 with 4.5 s to go)
    await o.decodeSeeder.beforePoint(p.point, driver);
    progress.start(p.benchmark_id, p.key);
    o.gc.collect();
    let outcome: PointOutcome;
    try {
      outcome = await measurePoint(ctx, sync, p, shapes);
    } finally {
      // A point that throws must not leave the driver measuring (nor collections held).
      driver.activePoint = null;
    }
    if (outcome.ok) builder.addResult(outcome.result, outcome.group);
    else builder.addSkipped(outcome.skipped);
    progress.finish(p.point.kind, outcome.ok ? outcome.result.kv_seed_regime : `skip`);
    o.log(outcome.ok ? progress.line() : `${progress.line()} (skipped: ${outcome.skipped.reason})`);
    o.onPointDone?.(progress.finished);
    if (o.interrupted?.()) {
      await o.decodeSeeder.finish(driver);
      return "interrupted";
    }
    // every rank votes at every boundary (lockstep); after the last point there is nothing
    // left for the soft timeout to save, so a run that measured every point is complete
    const stop = await sync.boundaryVote(p.benchmark_id, late());
    if (stop && p !== planned[planned.length - 1]) {
      await o.decodeSeeder.finish(driver);
      return "soft_timeout";
    }
  }
  await o.decodeSeeder.finish(driver);
  return "complete";
}

type PointOutcome =
  | { readonly ok: true; readonly result: BenchResult; readonly group: IterationGroup }
  | { readonly ok: false; readonly skipped: SkippedPoint };

function shotRunner(p: PlannedPoint) {
  return p.point.kind === "decode" ? runDecodeShot : runPrefillShot;
}

/** Measures one point, from READY to cleanup. */
async function measurePoint(
  ctx: ShotContext,
  sync: PointSynchronizer,
  p: PlannedPoint,
  shapes: Set<string>,
): Promise<PointOutcome> {
  const { driver } = ctx;
  const engine = driver.engine;
  const freeBefore = engine.kvUsage().free;
  const id = p.benchmark_id;
  const run = shotRunner(p);
  const shape = shapeKey(p.point);
  const armShape = {
    batch_size: p.point.batch_size,
    total_prefill_tokens: p.point.kind === "prefill" ? p.point.total_prefill_tokens : 0,
    total_kv_read_tokens: p.point.total_kv_read_tokens,
    samples: p.samples,
  };
  await sync.ready(id, p.key);
  driver.activePoint = id;
  let armed = false;
  const arm = async () => {
    if (armed) return;
    armed = true;
    await sync.arm(id, armShape);
  };
  // The regime as of the measurement: a decode point whose kvwarm stage failed at run
  // time falls back to fake KV (fake_fallback) though it was planned real_kv.
  const regime = () => p.point.kind === "decode" ? ctx.decodeSeeder.regime(p.point) : p.regime;
  const skip = async (reason: string): Promise<PointOutcome> => {
    await arm();
    await sync.gatherResult(id, [], { skipped: reason });
    driver.activePoint = null;
    checkBalance(engine.kvUsage(), freeBefore, id);
    await sync.cleanup(id);
    return {
      ok: false,
      skipped: {
        benchmark_id: id,
        point: p.point,
        point_key: p.key,
        kv_seed_regime: regime(),
        reason,
      },
    };
  };

  let replicaSeconds = 0;
  const replica = !shapes.has(shape);
  if (replica) {
    const t0 = performance.now();
    const r = await run(ctx, p, "replica", 0);
    replicaSeconds = (performance.now() - t0) / 1000;
    if (!r.ok) return await skip(`replica: ${r.reason}`);
    shapes.add(shape);
  }
  const shots: ShotRecord[] = [];
  const numShots = p.point.kind === "decode" ? 1 : p.samples;
  for (let shot = 0; shot < numShots; shot++) {
    const r: ShotOutcome = await run(ctx, p, "measure", shot, arm);
    if (!r.ok) return await skip(r.reason);
    shots.push(r.shot);
  }
  const samples: MeasuredSample[] = shots.flatMap((s) => s.samples).map((s, index) => ({
    index,
    ...s,
  }));
  const prompts: PromptRecord[] = shots.flatMap((s) => s.prompts);
  const walls = samples.map((s) => s.wall_time);
  const est = estimateWall(walls);
  const chosen = samples[est.index];
  const fpm: Fpm = {
    rank: sync.rank,
    num_requests: chosen.num_requests,
    num_scheduled_tokens: chosen.num_scheduled_tokens,
    num_prefill_requests: chosen.num_prefill_requests,
    sum_prefill_tokens: chosen.sum_prefill_tokens,
    sum_prefill_kv_tokens: chosen.sum_prefill_kv_tokens,
    num_decode_requests: chosen.num_decode_requests,
    sum_decode_kv_tokens: chosen.sum_decode_kv_tokens,
    num_preempted: chosen.num_preempted,
    num_block_copies: chosen.num_block_copies,
    wall_time: est.wall,
    gpu_time: chosen.gpu_time,
    benchmark_measurement: {
      benchmark_id: id,
      point_key: p.key,
      kind: p.point.kind,
      prompts,
      preparation: {
        method: shots[0].method,
        seconds: shots.reduce((s, x) => s + x.seconds, 0),
        blocks: shots.reduce((s, x) => s + x.blocks, 0),
        prefix_hit_tokens: Math.min(...shots.map((s) => s.prefixHitTokens)),
        replica,
        shape_key: shape,
        replica_seconds: replicaSeconds,
      },
      admission: shots[0].admission,
      samples,
      estimate: {
        method: est.method,
        median_of: est.median_of,
        sample_indices: [est.index],
        wall_time: est.wall,
        gpu_time: chosen.gpu_time,
      },
    },
  };
  const gathered = await sync.gatherResult(id, walls, {
    wall_time: fpm.wall_time,
    gpu_time: fpm.gpu_time,
  });
  driver.activePoint = null;
  const usage = engine.kvUsage();
  checkBalance(usage, freeBefore, id);
  await sync.cleanup(id);
  const groupEst = estimateWall(gathered.iteration_walls);
  return {
    ok: true,
    result: {
      benchmark_id: id,
      point: p.point,
      point_key: p.key,
      kv_seed_regime: regime(),
      repeats: p.samples,
      kv_pool: {
        blocks_total: usage.total,
        blocks_free_before: freeBefore,
        blocks_free_after: usage.free,
      },
      fpms: [fpm],
    },
    group: {
      benchmark_id: id,
      point_key: p.key,
      ranks: sync.size,
      iteration_walls: [...gathered.iteration_walls],
      wall_time: groupEst.wall,
    },
  };
}

/** The pool must hold as many free blocks after a point as before it, with no free pending. */
function checkBalance(
  usage: { free: number; pendingFree: number },
  freeBefore: number,
  id: number,
): void {
  if (usage.free !== freeBefore || usage.pendingFree !== 0) {
    throw new Error(
      `KV pool does not balance after benchmark_id=${id}: ${freeBefore} blocks free before, ` +
        `${usage.free} after (${usage.pendingFree} frees pending)`,
    );
  }
}
