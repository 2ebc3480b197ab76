/**
 * Who this process is in a group of ranks: its rank, the group size and where rank 0
 * listens. Explicit flags win; then Slurm; then MPI; else a single rank.
 */
import { DpError } from "./dp_error.ts";
import { firstHost } from "./hostlist.ts";

/** The port rank 0 listens on when neither `--dp-master` nor `WEBFPM_DP_PORT` names one. */
export const DEFAULT_DP_PORT = 29555;

/** The master host when none is given: every rank on this host. */
export const DEFAULT_DP_HOST = "127.0.0.1";

/** Where a {@link RankIdentity} came from. */
export type RankSource = "flags" | "slurm" | "mpi" | "single";

/** This process's place in the group. */
export interface RankIdentity {
  /** 0 <= rank < size; rank 0 is the coordinator. */
  readonly rank: number;
  /** The number of ranks, >= 1. */
  readonly size: number;
  /** The host rank 0 listens on (followers connect to it). */
  readonly masterHost: string;
  /** The TCP port rank 0 listens on (0 = any free port, rank 0 only; see the synchronizer). */
  readonly masterPort: number;
  /** Which source decided the identity. */
  readonly source: RankSource;
}

/** What {@link resolveRank} reads: the command line and the environment. */
export interface RankInputs {
  /** Command-line arguments; only `--dp-rank`, `--dp-size`, `--dp-master` are read. */
  readonly argv: readonly string[];
  /** Environment variables (e.g. `process.env`). */
  readonly env: Readonly<Record<string, string | undefined>>;
}

const FLAGS = ["--dp-rank", "--dp-size", "--dp-master"] as const;
type Flag = typeof FLAGS[number];

/**
 * Resolves this process's rank identity.
 *
 * 1. `--dp-rank R --dp-size N [--dp-master HOST:PORT]` (also `--flag=value`); without
 *    `--dp-master` the master is 127.0.0.1 on `WEBFPM_DP_PORT` or {@link DEFAULT_DP_PORT}.
 * 2. Slurm: `SLURM_PROCID`, `SLURM_NTASKS`, master host = first host of
 *    `SLURM_JOB_NODELIST` (compressed syntax, e.g. `node[01-04,07]` -> `node01`).
 * 3. MPI: `OMPI_COMM_WORLD_RANK` / `OMPI_COMM_WORLD_SIZE`, or `PMI_RANK` / `PMI_SIZE`;
 *    master host = `WEBFPM_DP_MASTER_HOST` or 127.0.0.1.
 * 4. Otherwise a single rank.
 *
 * For Slurm and MPI, `WEBFPM_DP_MASTER_HOST` overrides the master host and
 * `WEBFPM_DP_PORT` names the port. Inconsistent values (rank >= size, half a pair,
 * Slurm and MPI disagreeing, a malformed flag) throw a {@link DpError} with code `config`.
 *
 * @example
 * ```ts
 * resolveRank({ argv: ["--dp-rank", "1", "--dp-size", "2", "--dp-master", "10.0.0.5:6000"], env: {} });
 * // { rank: 1, size: 2, masterHost: "10.0.0.5", masterPort: 6000, source: "flags" }
 * resolveRank({ argv: [], env: { SLURM_PROCID: "3", SLURM_NTASKS: "8", SLURM_JOB_NODELIST: "gpu[07-10]" } });
 * // { rank: 3, size: 8, masterHost: "gpu07", masterPort: 29555, source: "slurm" }
 * ```
 */
export function resolveRank(inputs: RankInputs): RankIdentity {
  const flags = readFlags(inputs.argv);
  const env = inputs.env;
  const port = envPort(env);
  if (flags.size > 0) return fromFlags(flags, port);

  const ompi = pair(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  const pmi = pair(env, "PMI_RANK", "PMI_SIZE");
  const mpi = ompi ?? pmi;
  // mpirun inside sbatch/salloc: each MPI rank inherits the batch step's SLURM_PROCID=0 (and
  // SLURM_NTASKS, SLURM_LOCALID). A Slurm identity is srun's own only where it agrees with
  // MPI's (srun --mpi sets both); else MPI, which started this process, says who it is.
  let slurm: { rank: number; size: number } | undefined;
  try {
    slurm = pair(env, "SLURM_PROCID", "SLURM_NTASKS");
  } catch (err) {
    if (!mpi) throw err;
  }
  if (slurm && mpi && (slurm.rank !== mpi.rank || slurm.size !== mpi.size)) slurm = undefined;
  if (ompi && pmi && (ompi.rank !== pmi.rank || ompi.size !== pmi.size)) {
    throw config(
      `MPI's environment disagrees with itself: OMPI_COMM_WORLD says rank ${ompi.rank} of ` +
        `${ompi.size}, PMI says rank ${pmi.rank} of ${pmi.size}; pass --dp-rank/--dp-size/--dp-master`,
    );
  }
  const hostOverride = nonEmpty(env, "WEBFPM_DP_MASTER_HOST");
  if (slurm) {
    let host = hostOverride ?? DEFAULT_DP_HOST;
    if (hostOverride === undefined && slurm.size > 1) {
      // the step's hosts (srun on part of the allocation), else the job's
      const nodelist = nonEmpty(env, "SLURM_STEP_NODELIST") ?? nonEmpty(env, "SLURM_JOB_NODELIST");
      if (nodelist === undefined) {
        throw config(
          `SLURM_NTASKS=${slurm.size} but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is ` +
            `set: cannot find rank 0's host`,
        );
      }
      host = firstHost(nodelist);
    }
    return identity(slurm.rank, slurm.size, host, port, "slurm");
  }
  if (mpi) return identity(mpi.rank, mpi.size, hostOverride ?? DEFAULT_DP_HOST, port, "mpi");
  return identity(0, 1, DEFAULT_DP_HOST, port, "single");
}

function config(message: string): DpError {
  return new DpError("config", message);
}

function nonEmpty(env: RankInputs["env"], name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === "" ? undefined : v.trim();
}

function parseCount(text: string, what: string): number {
  if (!/^\d+$/.test(text)) throw config(`${what} must be a non-negative integer, got '${text}'`);
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw config(`${what} is too large: '${text}'`);
  return n;
}

function parsePort(text: string, what: string): number {
  const port = parseCount(text, what);
  if (port < 1 || port > 65535) throw config(`${what} must be a TCP port in 1..65535, got ${port}`);
  return port;
}

function envPort(env: RankInputs["env"]): number {
  const text = nonEmpty(env, "WEBFPM_DP_PORT");
  return text === undefined ? DEFAULT_DP_PORT : parsePort(text, "WEBFPM_DP_PORT");
}

function pair(
  env: RankInputs["env"],
  rankVar: string,
  sizeVar: string,
): { rank: number; size: number } | undefined {
  const r = nonEmpty(env, rankVar);
  const s = nonEmpty(env, sizeVar);
  if (r === undefined && s === undefined) return undefined;
  if (r === undefined || s === undefined) {
    throw config(
      `${r === undefined ? sizeVar : rankVar} is set but ${
        r === undefined ? rankVar : sizeVar
      } is not`,
    );
  }
  const rank = parseCount(r, rankVar);
  const size = parseCount(s, sizeVar);
  checkRank(rank, size, `${rankVar}=${rank}, ${sizeVar}=${size}`);
  return { rank, size };
}

function checkRank(rank: number, size: number, where: string): void {
  if (size < 1) throw config(`the group size must be at least 1 (${where})`);
  if (rank >= size) throw config(`rank ${rank} is not below the group size ${size} (${where})`);
}

function readFlags(argv: readonly string[]): Map<Flag, string> {
  const found = new Map<Flag, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.indexOf("=");
    const name = eq >= 0 ? arg.slice(0, eq) : arg;
    if (!(FLAGS as readonly string[]).includes(name)) continue;
    const flag = name as Flag;
    let value: string | undefined;
    if (eq >= 0) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      if (value === undefined || value.startsWith("--")) throw config(`${flag} needs a value`);
      i++;
    }
    if (found.has(flag)) throw config(`${flag} is given twice`);
    if (value.trim() === "") throw config(`${flag} needs a value`);
    found.set(flag, value.trim());
  }
  return found;
}

function fromFlags(flags: Map<Flag, string>, envPortValue: number): RankIdentity {
  const r = flags.get("--dp-rank");
  const s = flags.get("--dp-size");
  if (r === undefined || s === undefined) {
    const given = [...flags.keys()].join(", ");
    throw config(
      `${given} given without ${
        r === undefined ? "--dp-rank" : "--dp-size"
      }: explicit ranks need --dp-rank R --dp-size N`,
    );
  }
  const rank = parseCount(r, "--dp-rank");
  const size = parseCount(s, "--dp-size");
  checkRank(rank, size, `--dp-rank ${rank} --dp-size ${size}`);
  const master = flags.get("--dp-master");
  if (master === undefined) return identity(rank, size, DEFAULT_DP_HOST, envPortValue, "flags");
  const { host, port } = parseMaster(master);
  return identity(rank, size, host, port, "flags");
}

/**
 * Splits `HOST:PORT` (or `[IPv6]:PORT`) as given to `--dp-master`.
 *
 * @example
 * ```ts
 * parseMaster("node01:29555"); // { host: "node01", port: 29555 }
 * ```
 */
export function parseMaster(text: string): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:\s[\]]+)):(\d+)$/.exec(text.trim());
  if (!m) throw config(`--dp-master must be HOST:PORT, got '${text}'`);
  return { host: m[1] ?? m[2], port: parsePort(m[3], "the --dp-master port") };
}

function identity(
  rank: number,
  size: number,
  masterHost: string,
  masterPort: number,
  source: RankSource,
): RankIdentity {
  return Object.freeze({ rank, size, masterHost, masterPort, source });
}
