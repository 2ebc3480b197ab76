/**
 * Writes a rank's artifact atomically (temp file, flush, rename: a reader or a crash
 * never sees half a file) and checkpoints a run every few points, so a killed run
 * still leaves its measured points behind.
 *
 * ```ts
 * const writer = new ArtifactWriter("results/bench.json", 5);
 * writer.maybeCheckpoint(finishedPoints, () => builder.build("partial", "checkpoint", null));
 * ```
 */
import type { BenchArtifact } from "./artifact.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";

/** The artifact file of one rank. */
export class ArtifactWriter {
  #lastCheckpoint = 0;
  #writes = 0;

  /**
   * @param path where the artifact goes
   * @param checkpointEvery points between checkpoints (0: none)
   */
  constructor(readonly path: string, readonly checkpointEvery: number) {}

  /** Files written so far (checkpoints and final). */
  get writes(): number {
    return this.#writes;
  }

  /** Writes `artifact` atomically. */
  write(artifact: BenchArtifact): void {
    writeJsonAtomic(this.path, artifact);
    this.#writes++;
  }

  /** Writes a checkpoint when `checkpointEvery` points finished since the last one. */
  maybeCheckpoint(finishedPoints: number, build: () => BenchArtifact): boolean {
    if (this.checkpointEvery <= 0) return false;
    if (finishedPoints - this.#lastCheckpoint < this.checkpointEvery) return false;
    this.#lastCheckpoint = finishedPoints;
    this.write(build());
    return true;
  }
}
