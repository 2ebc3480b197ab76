/**
 * How a point's life agrees with the other attention-DP ranks: READY -> prepare ->
 * ARM -> GO (timing starts after GO) -> result gather (iteration wall = max over ranks)
 * -> cleanup -> boundary vote (the soft timeout is an OR over ranks), and a barrier
 * after every engine step. The dp module's `RankSynchronizer` has exactly these
 * methods; one rank uses {@link LocalSynchronizer}, which settles everything locally.
 *
 * ```ts
 * const sync: PointSynchronizer = dpSize > 1 ? rankSynchronizer : new LocalSynchronizer();
 * await sync.ready(id, key);
 * // ... prepare: inject the point's requests ...
 * await sync.arm(id, shape);
 * // ... the timed steps ...
 * const { iteration_walls } = await sync.gatherResult(id, walls, null);
 * ```
 */

/** The group's answer to a result gather. */
export interface GatheredWalls {
  /** Per sample, the slowest rank's wall, s. */
  readonly iteration_walls: readonly number[];
}

/** The per-point agreement (see the module doc above). */
export interface PointSynchronizer {
  /** This rank. */
  readonly rank: number;
  /** Ranks in the group. */
  readonly size: number;
  /** Every rank planned the same grid; returns the agreed digest. */
  agreeGridDigest(digest: string): Promise<string>;
  /** READY -> PREPARE: every rank is at the same point. */
  ready(benchmarkId: number, pointKey: string): Promise<void>;
  /** ARM -> GO: every rank prepared an equal scheduled shape; timing starts after this. */
  arm(benchmarkId: number, shape: Readonly<Record<string, number>>): Promise<void>;
  /** Result gather: the iteration walls (max over ranks, per sample). */
  gatherResult(
    benchmarkId: number,
    wallTimes: readonly number[],
    data: unknown,
  ): Promise<GatheredWalls>;
  /** Every rank released the point. */
  cleanup(benchmarkId: number): Promise<void>;
  /** The boundary vote: true when any rank's soft timeout has passed. */
  boundaryVote(benchmarkId: number, softTimeout: boolean): Promise<boolean>;
  /** The per-step barrier (`seq` equal on every rank). */
  barrier(seq: number): Promise<void>;
}

/** The group of one rank: every round settles locally at once. */
export class LocalSynchronizer implements PointSynchronizer {
  /** Always 0. */
  readonly rank = 0;
  /** Always 1. */
  readonly size = 1;

  /** Returns `digest`. */
  agreeGridDigest(digest: string): Promise<string> {
    return Promise.resolve(digest);
  }

  /** Settles at once. */
  ready(_benchmarkId: number, _pointKey: string): Promise<void> {
    return Promise.resolve();
  }

  /** Settles at once. */
  arm(_benchmarkId: number, _shape: Readonly<Record<string, number>>): Promise<void> {
    return Promise.resolve();
  }

  /** This rank's walls are the group's. */
  gatherResult(
    _benchmarkId: number,
    wallTimes: readonly number[],
    _data: unknown,
  ): Promise<GatheredWalls> {
    return Promise.resolve({ iteration_walls: [...wallTimes] });
  }

  /** Settles at once. */
  cleanup(_benchmarkId: number): Promise<void> {
    return Promise.resolve();
  }

  /** This rank's soft timeout decides. */
  boundaryVote(_benchmarkId: number, softTimeout: boolean): Promise<boolean> {
    return Promise.resolve(softTimeout);
  }

  /** Settles at once. */
  barrier(_seq: number): Promise<void> {
    return Promise.resolve();
  }
}
