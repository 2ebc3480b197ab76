/**
 * One attention-DP rank of `deno task bench`, from its identity to the end of the group:
 *
 * 1. {@link DpRank.create}: who this rank is (`--dp-rank/--dp-size/--dp-master`, else
 *    Slurm, else MPI; a group of one is no group), which GPU it takes (before the
 *    adapter is opened), and its socket (rank 0 binds, the others connect). No waiting.
 * 2. {@link DpRank.connect} once the model is loaded: the hello round, which waits for
 *    every rank (up to the connect timeout) and names any rank that never came.
 * 3. {@link DpRank.plugins} for the run: the point synchronizer (READY/ARM/GO, result
 *    gather with the max wall over ranks, cleanup, boundary vote, a barrier after every
 *    step) and the capacity negotiation before the grid is planned.
 * 4. {@link DpRank.finish} (a last round, then close) or {@link DpRank.abort} (tell every
 *    rank, so none waits for this one).
 *
 * ```ts
 * const dp = await DpRank.create({ argv, env: process.env, timeoutSeconds: 10, ... });
 * if (dp) out = dp.outPath(out);
 * // ... load the model ...
 * await dp?.connect();
 * try { await run.run(inputs, dp ? dp.plugins() : {}); await dp?.finish(); }
 * catch (err) { await dp?.abort(err); throw err; }
 * ```
 */
import { availableParallelism } from "node:os";
import process from "node:process";
import type { AttentionDpSection, DpCapacity, DpRoundCost, DpRoundStats } from "../artifact.ts";
import type { BenchPlugins } from "../run_bench.ts";
import { DEFAULT_SPIN_MS, type RankIdentity, RankSynchronizer, resolveRank } from "../../dp/mod.ts";
import { agreeCapacity } from "./capacity_agreement.ts";
import { assignGpu, type GpuAssignment, localRankOf } from "./gpu_assignment.ts";
import { GroupPointSynchronizer } from "./group_point_synchronizer.ts";
import { GroupStageSettlement } from "./group_stage_settlement.ts";
import { peerInterrupt } from "./peer_interrupt.ts";
import { mergedOutPath, rankOutPath } from "./rank_out_path.ts";
import { StepRoundMeter } from "./step_round_meter.ts";

/** Back-to-back barrier rounds run after connecting, to measure a round by itself. */
export const IDLE_BARRIER_ROUNDS = 200;

/** What {@link DpRank.create} needs. */
export interface DpRankOptions {
  /** The command line (`--dp-rank`, `--dp-size`, `--dp-master` are read from it). */
  readonly argv: readonly string[];
  /** The environment (Slurm, MPI, `WEBFPM_DP_*`); GPU selection variables are set in `process.env`. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Limit on every wait for the group, s (the design's 10 s). */
  readonly timeoutSeconds: number;
  /** Limit on the hello round (ranks loading their models), s. */
  readonly connectTimeoutSeconds: number;
  /** `--dp-gpus`: `auto`, `shared` or PCI addresses. */
  readonly gpus: string;
  /** Log lines. */
  readonly log: (line: string) => void;
  /** Set GPU selection variables in this process's environment (default true). */
  readonly applyGpuEnv?: boolean;
  /**
   * How long a wait for the group spins before sleeping 1 ms between polls, ms (default
   * {@link defaultSpinMs}).
   */
  readonly spinMs?: number;
}

/**
 * The spin window for a rank that shares its host with `localRanks` ranks: the dp
 * module's default where the host has at least two cores per rank, else 0. A spinning
 * wait keeps a core busy; when the ranks' spinning threads take every core, ZeroMQ's own
 * I/O threads only run at the scheduler's next time slice, and a round that takes tens of
 * microseconds takes milliseconds (measured on a 2-core machine with two ranks: ~8 ms).
 */
export function defaultSpinMs(localRanks: number, cores = availableParallelism()): number {
  return cores >= 2 * Math.max(1, localRanks) ? DEFAULT_SPIN_MS : 0;
}

/** Ranks on this host: the launcher's, Slurm's or MPI's count, else 1. */
export function localRanksOf(env: Readonly<Record<string, string | undefined>>): number {
  for (
    const name of [
      "WEBFPM_DP_LOCAL_SIZE",
      "SLURM_NTASKS_PER_NODE",
      "OMPI_COMM_WORLD_LOCAL_SIZE",
      "MPI_LOCALNRANKS",
    ]
  ) {
    const v = env[name]?.trim();
    if (v !== undefined && /^\d+$/.test(v)) return Number(v);
  }
  return 1;
}

/** One rank of a group of two or more (see the module doc above). */
export class DpRank {
  /** This rank's identity. */
  readonly identity: RankIdentity;
  /** How its adapter was chosen. */
  readonly gpu: GpuAssignment;
  /** The point synchronizer over the group. */
  readonly points: GroupPointSynchronizer;
  /** The kvwarm stage round over the group. */
  readonly stages: GroupStageSettlement;
  readonly #sync: RankSynchronizer;
  readonly #timeoutSeconds: number;
  readonly #spinMs: number;
  readonly #log: (line: string) => void;
  #envelope: DpCapacity | null = null;
  #negotiated: DpCapacity | null = null;
  #idle: DpRoundStats | null = null;
  /**
   * Called when a round fails because another rank was interrupted (`why`: e.g.
   * `SIGINT on rank 1`): the run should end as interrupted, not failed.
   */
  onPeerInterrupt: ((why: string) => void) | null = null;

  private constructor(
    identity: RankIdentity,
    gpu: GpuAssignment,
    sync: RankSynchronizer,
    o: DpRankOptions,
    spinMs: number,
  ) {
    this.identity = identity;
    this.gpu = gpu;
    this.#sync = sync;
    this.points = new GroupPointSynchronizer(sync, (err) => {
      const why = peerInterrupt(err);
      if (why !== null) this.onPeerInterrupt?.(why);
    });
    this.stages = new GroupStageSettlement(this.points);
    this.#timeoutSeconds = o.timeoutSeconds;
    this.#spinMs = spinMs;
    this.#log = o.log;
  }

  /**
   * This process's rank, or null when it is a group of one. Throws a `DpError` (code
   * `config`) on an inconsistent identity or a socket that cannot be opened, and a
   * `GpuAssignmentError` on a GPU selection this host cannot make.
   */
  static async create(o: DpRankOptions): Promise<DpRank | null> {
    const identity = resolveRank({ argv: o.argv, env: o.env });
    if (identity.size === 1) return null;
    for (
      const [name, v] of [["timeout", o.timeoutSeconds], [
        "connect timeout",
        o.connectTimeoutSeconds,
      ]] as const
    ) {
      if (!(Number.isFinite(v) && v > 0)) {
        throw new RangeError(`the dp ${name} must be > 0 s, got ${v}`);
      }
    }
    const gpu = assignGpu({ mode: o.gpus, localRank: localRankOf(identity, o.env), env: o.env });
    if (o.applyGpuEnv ?? true) Object.assign(process.env, gpu.env);
    const spinMs = o.spinMs ?? defaultSpinMs(localRanksOf(o.env));
    const sync = await RankSynchronizer.create(identity, {
      timeoutMs: o.timeoutSeconds * 1000,
      connectTimeoutMs: o.connectTimeoutSeconds * 1000,
      spinMs,
      log: (line) => o.log(`kvwarm: ${line}`),
    });
    const rank = new DpRank(identity, gpu, sync, o, spinMs);
    o.log(
      `dp: rank ${identity.rank} of ${identity.size} (${identity.source}), rank 0 at ` +
        `${identity.masterHost}:${identity.masterPort}; waits spin ${spinMs} ms; ${gpu.note}`,
    );
    return rank;
  }

  /** This rank. */
  get rank(): number {
    return this.identity.rank;
  }

  /** Ranks in the group. */
  get size(): number {
    return this.identity.size;
  }

  /** This rank's artifact beside `out`. */
  outPath(out: string): string {
    return rankOutPath(out, this.rank);
  }

  /** The group's merged view beside `out`. */
  mergedPath(out: string): string {
    return mergedOutPath(out);
  }

  /**
   * The hello round: returns once every rank has connected. Then
   * {@link IDLE_BARRIER_ROUNDS} back-to-back barriers measure what a round costs by itself.
   */
  async connect(): Promise<void> {
    const t0 = performance.now();
    await this.#sync.connect();
    const connected = (performance.now() - t0) / 1000;
    const meter = new StepRoundMeter();
    for (let seq = 0; seq < IDLE_BARRIER_ROUNDS; seq++) {
      const t = performance.now();
      await this.#sync.barrier(seq);
      meter.record((performance.now() - t) * 1000);
    }
    const { rounds, mean_us, p50_us, p90_us, max_us } = meter.summary();
    this.#idle = { rounds, mean_us, p50_us, p90_us, max_us };
    this.#log(
      `dp: all ${this.size} ranks connected in ${connected.toFixed(1)} s; an idle barrier ` +
        `round takes ${p50_us.toFixed(0)} µs (median of ${rounds}, p90 ${p90_us.toFixed(0)})`,
    );
  }

  /**
   * The run's plugins: the group's point synchronizer, the capacity negotiation and the
   * kvwarm stage round over the group.
   */
  plugins(): Required<Pick<BenchPlugins, "sync" | "negotiate" | "stageSettlement">> {
    return {
      sync: this.points,
      stageSettlement: this.stages,
      negotiate: async (own, seeder) => {
        this.points.otherRound();
        const agreed = await agreeCapacity(this.#sync, own, seeder);
        this.#envelope = agreed.envelope;
        this.#negotiated = agreed.negotiated;
        const n = agreed.negotiated;
        this.#log(
          `dp: capacity agreed: ${n.usable_blocks} usable blocks (this rank ` +
            `${agreed.envelope.usable_blocks}), max_model_len ${n.max_model_len}, max_num_seqs ` +
            `${n.max_num_seqs}, max_batched_tokens ${n.max_batched_tokens}; kvwarm ` +
            (n.kvwarm_eligible ? "eligible on every rank" : `off (${n.kvwarm_skip_reason}` +
              (agreed.firstIneligible
                ? `; first: rank ${agreed.firstIneligible.rank} ` +
                  `${agreed.firstIneligible.reason})`
                : ")")),
        );
        return agreed.capacity;
      },
    };
  }

  /** The artifact's attention_dp section as of now. */
  section(): AttentionDpSection {
    const rounds: Record<string, DpRoundCost> = {};
    for (const [type, c] of Object.entries(this.#sync.roundCosts())) {
      if (c) {
        rounds[type] = {
          rounds: c.rounds,
          mean_us: c.mean_us,
          max_us: c.max_us,
          total_us: c.total_us,
        };
      }
    }
    return {
      rank: this.rank,
      size: this.size,
      source: this.identity.source,
      master: `${this.identity.masterHost}:${this.identity.masterPort}`,
      gpu_select: this.gpu.select,
      timeout_seconds: this.#timeoutSeconds,
      spin_ms: this.#spinMs,
      envelope: this.#envelope,
      negotiated: this.#negotiated,
      step_round: this.points.stepRound(),
      idle_barrier: this.#idle,
      rounds,
      stages_settled: [...this.stages.settled()],
      merged_ranks: null,
    };
  }

  /** The orderly end: a last round with every rank, then the sockets close. */
  async finish(): Promise<void> {
    this.points.otherRound();
    await this.#sync.finish();
  }

  /** This rank failed: tell every rank (a no-op when the group already failed), then close. */
  async abort(reason: unknown): Promise<void> {
    await this.#sync.abort(reason);
  }

  /** Closes the sockets now. */
  close(): void {
    this.#sync.close();
  }
}
