/**
 * One attention-DP rank of `deno task bench`, from its identity to the end of the group:
 *
 * 1. {@link DpRank.create}: who this rank is (`--dp-rank/--dp-size/--dp-master`, else
 *    Slurm, else MPI; a group of one is no group) and which GPU it takes (set in the
 *    environment before the adapter is opened). No socket, no waiting.
 * 2. {@link DpRank.open} once the adapter is known: its socket (rank 0 binds, the others
 *    connect), with the wait limit for that adapter. No waiting.
 * 3. {@link DpRank.connect} once the model is loaded: the hello round, which waits for
 *    every rank (up to the connect timeout) and names any rank that never came.
 * 4. {@link DpRank.plugins} for the run: the point synchronizer (READY/ARM/GO, result
 *    gather with the max wall over ranks, cleanup, boundary vote, a barrier after every
 *    step), the capacity negotiation before the grid is planned, kvwarm's stage round.
 * 5. {@link DpRank.finish} (a last round, then close) or {@link DpRank.abort} (tell every
 *    rank, so none waits for this one).
 *
 * ```ts
 * const dp = DpRank.create({ argv, env: process.env, gpus: "auto", log });
 * if (dp) out = dp.outPath(out);
 * const gpu = await openGpu();
 * await dp?.open({ cpu: gpu.adapter.type === "cpu" });
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
  /**
   * Limit on every wait for the group, s (default {@link DEFAULT_DP_TIMEOUT_SECONDS}, or
   * {@link CPU_ADAPTER_DP_TIMEOUT_SECONDS} on a CPU adapter).
   */
  readonly timeoutSeconds?: number;
  /** Limit on the hello round (ranks loading their models), s (default 600). */
  readonly connectTimeoutSeconds?: number;
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

/** The wait limit on GPU adapters, s: the reference design's 10 s. */
export const DEFAULT_DP_TIMEOUT_SECONDS = 10;

/**
 * The wait limit on a CPU adapter (lavapipe), s: a step there takes seconds (a 32-chain
 * kvwarm stage on the tiny fixture: over 10 s per step with two ranks on two cores), and a
 * shape's first use compiles its pipelines inside the step.
 */
export const CPU_ADAPTER_DP_TIMEOUT_SECONDS = 600;

interface OpenGroup {
  readonly sync: RankSynchronizer;
  readonly points: GroupPointSynchronizer;
  readonly stages: GroupStageSettlement;
  readonly timeoutSeconds: number;
}

/** One rank of a group of two or more (see the module doc above). */
export class DpRank {
  /** This rank's identity. */
  readonly identity: RankIdentity;
  /** How its adapter was chosen. */
  readonly gpu: GpuAssignment;
  readonly #o: DpRankOptions;
  readonly #spinMs: number;
  #group: OpenGroup | null = null;
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
    o: DpRankOptions,
    spinMs: number,
  ) {
    this.identity = identity;
    this.gpu = gpu;
    this.#o = o;
    this.#spinMs = spinMs;
  }

  /**
   * This process's rank, or null when it is a group of one; its GPU selection is set in
   * the environment (before the adapter is opened). No socket yet: {@link open}. Throws a
   * `DpError` (code `config`) on an inconsistent identity and a `GpuAssignmentError` on a
   * GPU selection this host cannot make.
   */
  static create(o: DpRankOptions): DpRank | null {
    const identity = resolveRank({ argv: o.argv, env: o.env });
    if (identity.size === 1) return null;
    for (
      const [name, v] of [["timeout", o.timeoutSeconds], [
        "connect timeout",
        o.connectTimeoutSeconds,
      ]] as const
    ) {
      if (v !== undefined && !(Number.isFinite(v) && v > 0)) {
        throw new RangeError(`the dp ${name} must be > 0 s, got ${v}`);
      }
    }
    const gpu = assignGpu({ mode: o.gpus, localRank: localRankOf(identity, o.env), env: o.env });
    if (o.applyGpuEnv ?? true) Object.assign(process.env, gpu.env);
    const spinMs = o.spinMs ?? defaultSpinMs(localRanksOf(o.env));
    o.log(
      `dp: rank ${identity.rank} of ${identity.size} (${identity.source}), rank 0 at ` +
        `${identity.masterHost}:${identity.masterPort}; waits spin ${spinMs} ms; ${gpu.note}`,
    );
    return new DpRank(identity, gpu, o, spinMs);
  }

  /** This rank. */
  get rank(): number {
    return this.identity.rank;
  }

  /** Ranks in the group. */
  get size(): number {
    return this.identity.size;
  }

  /** The point synchronizer over the group (once {@link open}). */
  get points(): GroupPointSynchronizer {
    return this.#opened().points;
  }

  /** The kvwarm stage round over the group (once {@link open}). */
  get stages(): GroupStageSettlement {
    return this.#opened().stages;
  }

  #opened(): OpenGroup {
    if (this.#group === null) throw new Error("the rank's group is not open: call open() first");
    return this.#group;
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
   * Opens this rank's socket (rank 0 binds, the others connect) without waiting for anyone;
   * idempotent. Every wait for the group is limited to the `timeoutSeconds` option, or by
   * default {@link DEFAULT_DP_TIMEOUT_SECONDS} ({@link CPU_ADAPTER_DP_TIMEOUT_SECONDS} on a
   * CPU adapter). A taken port on rank 0 is a `DpError` with code `config`.
   */
  async open(adapter: { readonly cpu: boolean } = { cpu: false }): Promise<void> {
    if (this.#group !== null) return;
    const o = this.#o;
    const timeoutSeconds = o.timeoutSeconds ??
      (adapter.cpu ? CPU_ADAPTER_DP_TIMEOUT_SECONDS : DEFAULT_DP_TIMEOUT_SECONDS);
    const sync = await RankSynchronizer.create(this.identity, {
      timeoutMs: timeoutSeconds * 1000,
      connectTimeoutMs: (o.connectTimeoutSeconds ?? 600) * 1000,
      spinMs: this.#spinMs,
      log: (line) => o.log(`kvwarm: ${line}`),
    });
    const points = new GroupPointSynchronizer(sync, (err) => {
      const why = peerInterrupt(err);
      if (why !== null) this.onPeerInterrupt?.(why);
    });
    this.#group = { sync, points, stages: new GroupStageSettlement(points), timeoutSeconds };
  }

  /**
   * The hello round ({@link open} first if needed): returns once every rank has connected.
   * Then {@link IDLE_BARRIER_ROUNDS} back-to-back barriers measure what a round costs by itself.
   */
  async connect(): Promise<void> {
    await this.open();
    const { sync } = this.#opened();
    const t0 = performance.now();
    await sync.connect();
    const connected = (performance.now() - t0) / 1000;
    const meter = new StepRoundMeter();
    for (let seq = 0; seq < IDLE_BARRIER_ROUNDS; seq++) {
      const t = performance.now();
      await sync.barrier(seq);
      meter.record((performance.now() - t) * 1000);
    }
    const { rounds, mean_us, p50_us, p90_us, max_us } = meter.summary();
    this.#idle = { rounds, mean_us, p50_us, p90_us, max_us };
    this.#o.log(
      `dp: all ${this.size} ranks connected in ${connected.toFixed(1)} s; an idle barrier ` +
        `round takes ${p50_us.toFixed(0)} µs (median of ${rounds}, p90 ${p90_us.toFixed(0)}); ` +
        `waits for the group time out after ${this.#group!.timeoutSeconds} s`,
    );
  }

  /**
   * The run's plugins: the group's point synchronizer, the capacity negotiation and the
   * kvwarm stage round over the group.
   */
  plugins(): Required<Pick<BenchPlugins, "sync" | "negotiate" | "stageSettlement">> {
    const { sync, points, stages } = this.#opened();
    return {
      sync: points,
      stageSettlement: stages,
      negotiate: async (own, seeder) => {
        points.otherRound();
        const agreed = await agreeCapacity(sync, own, seeder);
        this.#envelope = agreed.envelope;
        this.#negotiated = agreed.negotiated;
        const n = agreed.negotiated;
        this.#o.log(
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
    const g = this.#group;
    const rounds: Record<string, DpRoundCost> = {};
    for (const [type, c] of Object.entries(g?.sync.roundCosts() ?? {})) {
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
      timeout_seconds: g?.timeoutSeconds ?? this.#o.timeoutSeconds ?? DEFAULT_DP_TIMEOUT_SECONDS,
      spin_ms: this.#spinMs,
      envelope: this.#envelope,
      negotiated: this.#negotiated,
      step_round: g?.points.stepRound() ?? new StepRoundMeter().summary(),
      idle_barrier: this.#idle,
      rounds,
      stages_settled: [...(g?.stages.settled() ?? [])],
      merged_ranks: null,
    };
  }

  /** The orderly end: a last round with every rank, then the sockets close. */
  async finish(): Promise<void> {
    const { sync, points } = this.#opened();
    points.otherRound();
    await sync.finish();
  }

  /**
   * This rank failed: tell every rank (a no-op when the group already failed), then close.
   * A rank that has not opened its socket yet opens it to tell the others.
   */
  async abort(reason: unknown): Promise<void> {
    try {
      await this.open();
    } catch {
      return; // no socket to tell anyone through; their own timeouts name this rank
    }
    await this.#opened().sync.abort(reason);
  }

  /** Closes the sockets now. */
  close(): void {
    this.#group?.sync.close();
  }
}
