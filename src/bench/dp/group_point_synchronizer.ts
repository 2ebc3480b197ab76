/**
 * The benchmark's point synchronizer over a group of attention-DP ranks: every call is
 * one round of the dp module's {@link RankSynchronizer}, plus two things the sweep needs
 * from a real group.
 *
 * - A skipped point. The wire format wants at least one wall per rank, so a rank that
 *   could not measure the point sends {@link SKIPPED_WALL} once per planned sample (the
 *   count ARM announced). Every rank then sees the sentinel in the iteration walls: when
 *   every rank skipped, the point is skipped everywhere; a rank that measured a point
 *   another rank skipped fails the group ("ranks are not in lockstep"), so no artifact
 *   holds a group wall that mixes a measurement with a skip. (A rank that skips before
 *   stepping, e.g. its replica, takes fewer steps than the others: the next round already
 *   fails as out of lockstep.)
 * - The cost of the per-step barrier, against the steps it ends ({@link StepRoundMeter}).
 *
 * ```ts
 * const sync = new GroupPointSynchronizer(await RankSynchronizer.open(identity));
 * await runSweep({ ...options, sync }, planned); // through BenchRun's `sync` plugin
 * sync.stepRound(); // { rounds, mean_us, p50_us, ..., mean_step_ms, share }
 * ```
 */
import type { DpStepRound } from "../artifact.ts";
import type { GatheredWalls, PointSynchronizer } from "../point_synchronizer.ts";
import {
  DpError,
  type RankSynchronizer,
  type StagePhase,
  type StageVerdict,
} from "../../dp/mod.ts";
import { StepRoundMeter } from "./step_round_meter.ts";

/** The wall a rank reports for each sample of a point it skipped (never a real wall). */
export const SKIPPED_WALL = 1e300;

/** A {@link PointSynchronizer} over a {@link RankSynchronizer} (see the module doc above). */
export class GroupPointSynchronizer implements PointSynchronizer {
  readonly #sync: RankSynchronizer;
  readonly #meter = new StepRoundMeter();
  readonly #samples = new Map<number, number>();
  readonly #onFailure: (err: unknown) => void;

  /** Rounds over `sync` (connected); `onFailure` sees any round's error before it is thrown. */
  constructor(sync: RankSynchronizer, onFailure: (err: unknown) => void = () => {}) {
    this.#sync = sync;
    this.#onFailure = onFailure;
  }

  async #round<T>(round: Promise<T>): Promise<T> {
    try {
      return await round;
    } catch (err) {
      this.#onFailure(err);
      throw err;
    }
  }

  /** This rank. */
  get rank(): number {
    return this.#sync.rank;
  }

  /** Ranks in the group. */
  get size(): number {
    return this.#sync.size;
  }

  /** The underlying synchronizer. */
  get group(): RankSynchronizer {
    return this.#sync;
  }

  /** Every rank planned the same grid. */
  agreeGridDigest(digest: string): Promise<string> {
    this.#meter.interrupt();
    return this.#round(this.#sync.agreeGridDigest(digest));
  }

  /** READY -> PREPARE. */
  ready(benchmarkId: number, pointKey: string): Promise<void> {
    this.#meter.interrupt();
    return this.#round(this.#sync.ready(benchmarkId, pointKey));
  }

  /** ARM -> GO; remembers the planned sample count (`shape.samples`) for a skip. */
  arm(benchmarkId: number, shape: Readonly<Record<string, number>>): Promise<void> {
    this.#meter.interrupt();
    this.#samples.set(benchmarkId, Math.max(1, shape.samples ?? 1));
    return this.#round(this.#sync.arm(benchmarkId, shape));
  }

  /**
   * Result gather. Empty `wallTimes` means this rank skipped the point: it returns empty
   * walls. A rank that measured the point gets the max over ranks, or a
   * {@link DpError} when another rank skipped it.
   */
  async gatherResult(
    benchmarkId: number,
    wallTimes: readonly number[],
    data: unknown,
  ): Promise<GatheredWalls> {
    this.#meter.interrupt();
    const skipped = wallTimes.length === 0;
    const samples = this.#samples.get(benchmarkId) ?? 1;
    this.#samples.delete(benchmarkId);
    const sent = skipped ? new Array<number>(samples).fill(SKIPPED_WALL) : wallTimes;
    const gathered = await this.#round(this.#sync.gatherResult(benchmarkId, sent, data));
    if (skipped) return { iteration_walls: [] };
    if (gathered.iteration_walls.some((w) => w >= SKIPPED_WALL)) {
      // Rank 0 knows who skipped and why; the other ranks only that someone did.
      const skippers = gathered.ranks?.filter((r) => r.wall_times.some((w) => w >= SKIPPED_WALL));
      const who = skippers
        ? skippers.map((r) => `rank ${r.rank} (${reasonOf(r.data)})`).join(", ")
        : "another rank";
      throw new DpError(
        "lockstep",
        `ranks are not in lockstep: rank ${this.rank} measured benchmark_id=${benchmarkId} ` +
          `but ${who} skipped it`,
        skippers?.map((r) => r.rank) ?? [],
      );
    }
    return { iteration_walls: gathered.iteration_walls };
  }

  /** Every rank released the point. */
  cleanup(benchmarkId: number): Promise<void> {
    this.#meter.interrupt();
    return this.#round(this.#sync.cleanup(benchmarkId));
  }

  /** The soft-timeout vote (OR over ranks). */
  boundaryVote(benchmarkId: number, softTimeout: boolean): Promise<boolean> {
    this.#meter.interrupt();
    return this.#round(this.#sync.boundaryVote(benchmarkId, softTimeout));
  }

  /** The per-step barrier, timed with the step before it. */
  barrier(seq: number): Promise<void> {
    return this.#round(this.#meter.measure(() => this.#sync.barrier(seq)));
  }

  /** Tells the meter that a round outside any step ran (e.g. capacity, the last round). */
  otherRound(): void {
    this.#meter.interrupt();
  }

  /**
   * kvwarm's stage round, run inside an idle step (after its barrier): its time is taken
   * out of the step's.
   */
  async stageRound(
    seq: number,
    batch: number | null,
    phase: StagePhase,
    ok: boolean | null,
  ): Promise<StageVerdict> {
    const t0 = performance.now();
    try {
      return await this.#round(this.#sync.stageRound(seq, batch, phase, ok));
    } finally {
      this.#meter.exclude(performance.now() - t0);
    }
  }

  /** The per-step barrier's cost so far. */
  stepRound(): DpStepRound {
    return this.#meter.summary();
  }
}

function reasonOf(data: unknown): string {
  const reason = (data as { skipped?: unknown } | null)?.skipped;
  return typeof reason === "string" ? reason : "no reason given";
}
