import { test } from "uvu";
import { localRankOf } from "../../src/bench/dp/gpu_assignment.ts";
import * as assert from "uvu/assert";
import { DpError } from "../../src/dp/dp_error.ts";
import { DEFAULT_DP_PORT, resolveRank } from "../../src/dp/rank_identity.ts";

function configError(fn: () => unknown, why: RegExp): void {
  try {
    fn();
    assert.unreachable("no error");
  } catch (err) {
    assert.instance(err, DpError);
    assert.is((err as DpError).code, "config");
    assert.match((err as Error).message, why);
  }
}

const slurm = { SLURM_PROCID: "3", SLURM_NTASKS: "8", SLURM_JOB_NODELIST: "node[01-04,07],gpu3" };

test("explicit flags win over Slurm and MPI", () => {
  const id = resolveRank({
    argv: ["bench", "--dp-rank", "1", "--dp-size", "2", "--dp-master", "10.1.2.3:6000"],
    env: { ...slurm, OMPI_COMM_WORLD_RANK: "5", OMPI_COMM_WORLD_SIZE: "6" },
  });
  assert.equal(id, { rank: 1, size: 2, masterHost: "10.1.2.3", masterPort: 6000, source: "flags" });
});

test("flags accept --flag=value, and the master defaults to this host on WEBFPM_DP_PORT", () => {
  const id = resolveRank({ argv: ["--dp-rank=0", "--dp-size=4"], env: { WEBFPM_DP_PORT: "7100" } });
  assert.equal(id, {
    rank: 0,
    size: 4,
    masterHost: "127.0.0.1",
    masterPort: 7100,
    source: "flags",
  });
  const ipv6 = resolveRank({
    argv: ["--dp-rank", "1", "--dp-size", "2", "--dp-master", "[::1]:7000"],
    env: {},
  });
  assert.is(ipv6.masterHost, "::1");
});

test("Slurm gives rank, size and the first host of the node list", () => {
  const id = resolveRank({ argv: [], env: slurm });
  assert.equal(id, {
    rank: 3,
    size: 8,
    masterHost: "node01",
    masterPort: DEFAULT_DP_PORT,
    source: "slurm",
  });
  const port = resolveRank({ argv: [], env: { ...slurm, WEBFPM_DP_PORT: "7200" } });
  assert.is(port.masterPort, 7200);
});

test("Slurm and MPI that agree resolve to Slurm", () => {
  const id = resolveRank({ argv: [], env: { ...slurm, PMI_RANK: "3", PMI_SIZE: "8" } });
  assert.is(id.source, "slurm");
});

test("MPI's environment gives rank and size (Open MPI or PMI)", () => {
  const ompi = resolveRank({
    argv: [],
    env: { OMPI_COMM_WORLD_RANK: "2", OMPI_COMM_WORLD_SIZE: "4" },
  });
  assert.equal(ompi, {
    rank: 2,
    size: 4,
    masterHost: "127.0.0.1",
    masterPort: DEFAULT_DP_PORT,
    source: "mpi",
  });
  const pmi = resolveRank({
    argv: [],
    env: { PMI_RANK: "1", PMI_SIZE: "2", WEBFPM_DP_MASTER_HOST: "head", WEBFPM_DP_PORT: "7300" },
  });
  assert.equal(pmi, { rank: 1, size: 2, masterHost: "head", masterPort: 7300, source: "mpi" });
});

test("with nothing set the process is a single rank", () => {
  assert.equal(resolveRank({ argv: ["--out", "x.json"], env: {} }), {
    rank: 0,
    size: 1,
    masterHost: "127.0.0.1",
    masterPort: DEFAULT_DP_PORT,
    source: "single",
  });
});

test("inconsistent values are refused with a clear error", () => {
  configError(
    () => resolveRank({ argv: ["--dp-rank", "2", "--dp-size", "2"], env: {} }),
    /rank 2 is not below the group size 2/,
  );
  configError(() => resolveRank({ argv: ["--dp-rank", "1"], env: {} }), /without --dp-size/);
  configError(() => resolveRank({ argv: ["--dp-master", "h:1"], env: {} }), /without --dp-rank/);
  configError(
    () => resolveRank({ argv: ["--dp-rank", "-1", "--dp-size", "2"], env: {} }),
    /--dp-rank must be a non-negative integer, got '-1'/,
  );
  configError(
    () => resolveRank({ argv: ["--dp-rank", "x", "--dp-size", "2"], env: {} }),
    /--dp-rank must be a non-negative integer, got 'x'/,
  );
  configError(
    () => resolveRank({ argv: ["--dp-rank", "0", "--dp-size", "0"], env: {} }),
    /at least 1/,
  );
  configError(
    () => resolveRank({ argv: ["--dp-rank", "0", "--dp-rank", "1", "--dp-size", "2"], env: {} }),
    /given twice/,
  );
  configError(
    () =>
      resolveRank({ argv: ["--dp-rank", "0", "--dp-size", "2", "--dp-master", "host"], env: {} }),
    /HOST:PORT/,
  );
  configError(
    () =>
      resolveRank({
        argv: ["--dp-rank", "0", "--dp-size", "2", "--dp-master", "h:70000"],
        env: {},
      }),
    /1\.\.65535/,
  );
  configError(
    () => resolveRank({ argv: [], env: { SLURM_PROCID: "0" } }),
    /SLURM_PROCID is set but SLURM_NTASKS is not/,
  );
  configError(
    () =>
      resolveRank({
        argv: [],
        env: { SLURM_PROCID: "4", SLURM_NTASKS: "4", SLURM_JOB_NODELIST: "n1" },
      }),
    /rank 4 is not below/,
  );
  configError(
    () => resolveRank({ argv: [], env: { SLURM_PROCID: "1", SLURM_NTASKS: "4" } }),
    /neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set/,
  );
  configError(
    () => resolveRank({ argv: [], env: { ...slurm, SLURM_JOB_NODELIST: "node[01-" } }),
    /unclosed/,
  );
  configError(
    () =>
      resolveRank({
        argv: [],
        env: { OMPI_COMM_WORLD_RANK: "1", OMPI_COMM_WORLD_SIZE: "2", PMI_RANK: "0", PMI_SIZE: "2" },
      }),
    /disagrees with itself/,
  );
  configError(
    () => resolveRank({ argv: [], env: { PMI_SIZE: "2" } }),
    /PMI_SIZE is set but PMI_RANK is not/,
  );
  configError(() => resolveRank({ argv: [], env: { WEBFPM_DP_PORT: "http" } }), /WEBFPM_DP_PORT/);
  configError(
    () => resolveRank({ argv: ["--dp-size", "2", "--dp-rank"], env: {} }),
    /--dp-rank needs a value/,
  );
});

test("mpirun inside an sbatch allocation: MPI's rank wins over the batch step's inherited Slurm one", () => {
  // what `#SBATCH --ntasks=2` + `mpirun -np 2 deno task bench ...` gives MPI rank 1: the batch
  // shell's SLURM_PROCID=0 / SLURM_NTASKS=2 / SLURM_LOCALID=0, plus Open MPI's own variables
  const env = {
    SLURM_JOB_ID: "77",
    SLURM_PROCID: "0",
    SLURM_LOCALID: "0",
    SLURM_NTASKS: "2",
    SLURM_JOB_NODELIST: "node01",
    OMPI_COMM_WORLD_RANK: "1",
    OMPI_COMM_WORLD_SIZE: "2",
    OMPI_COMM_WORLD_LOCAL_RANK: "1",
  };
  const id = resolveRank({ argv: [], env });
  assert.equal([id.rank, id.size, id.source], [1, 2, "mpi"]);
  assert.is(localRankOf(id, env), 1, "its local rank is MPI's, not the inherited SLURM_LOCALID");
});

test("mpirun inside an sbatch allocation without --ntasks: SLURM_PROCID alone does not stop an MPI rank", () => {
  const env = {
    SLURM_JOB_ID: "78",
    SLURM_PROCID: "0",
    SLURM_JOB_NODELIST: "node01",
    PMI_RANK: "1",
    PMI_SIZE: "2",
  };
  const id = resolveRank({ argv: [], env });
  assert.equal([id.rank, id.size, id.source], [1, 2, "mpi"]);
});

test("srun on part of the allocation: rank 0's host is the step's first host, not the job's", () => {
  // e.g. two concurrent steps, `srun -N1 -n2 -r1 ...` on the second node of a 2-node job
  const id = resolveRank({
    argv: [],
    env: {
      SLURM_PROCID: "1",
      SLURM_NTASKS: "2",
      SLURM_JOB_NODELIST: "gpu[07-08]",
      SLURM_STEP_NODELIST: "gpu08",
    },
  });
  assert.is(id.masterHost, "gpu08");
});

test.run();
