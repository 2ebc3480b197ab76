/**
 * Test helpers: a group of ranks as separate synchronizer objects in one process, over
 * real ZeroMQ sockets on 127.0.0.1 (rank 0 binds a free port).
 */
import { createServer } from "node:net";
import { DpError } from "../../src/dp/dp_error.ts";
import { type RankIdentity } from "../../src/dp/rank_identity.ts";
import { RankSynchronizer, type SynchronizerOptions } from "../../src/dp/rank_synchronizer.ts";

/** The identity of `rank` in a group of `size` whose rank 0 listens on 127.0.0.1:`port`. */
export function identity(rank: number, size: number, port: number): RankIdentity {
  return { rank, size, masterHost: "127.0.0.1", masterPort: port, source: "flags" };
}

/**
 * Creates (does not connect) ranks of a group of `size`; `present` picks which ranks
 * exist (default all). Rank 0 is always created first, on a free port.
 */
export async function createGroup(
  size: number,
  options: SynchronizerOptions = {},
  present: readonly number[] = [...Array(size).keys()],
): Promise<RankSynchronizer[]> {
  const rank0 = await RankSynchronizer.create(identity(0, size, 0), options);
  const group = [rank0];
  for (const rank of present) {
    if (rank !== 0) {
      group.push(await RankSynchronizer.create(identity(rank, size, rank0.port!), options));
    }
  }
  return group;
}

/** A connected group of `size` ranks (index = rank). */
export async function openGroup(
  size: number,
  options: SynchronizerOptions = {},
): Promise<RankSynchronizer[]> {
  const group = await createGroup(size, options);
  await Promise.all(group.map((s) => s.connect()));
  return group;
}

/** Closes every rank (safe on failed or closed ranks). */
export function closeAll(group: readonly RankSynchronizer[]): void {
  for (const s of group) s.close();
}

/** The outcome of a promise that should fail with a DpError. */
export async function failureOf(promise: Promise<unknown>): Promise<DpError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof DpError) return err;
    throw err;
  }
  throw new Error("expected a DpError, but the call succeeded");
}

/** Waits `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
