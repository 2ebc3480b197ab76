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
import { closeSync, mkdirSync, openSync, rmSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import process from "node:process";
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

  /**
   * Throws, naming the reason, when the artifact cannot be written at `path` (a folder there,
   * a folder that cannot be made or written to): checked before any work, so a run never
   * measures for hours only to lose its points at the first write.
   */
  check(): void {
    const dir = dirname(this.path);
    try {
      if (statSync(this.path, { throwIfNoEntry: false })?.isDirectory()) {
        throw new Error("it is a folder");
      }
      mkdirSync(dir, { recursive: true });
      // the atomic write's temporary file goes beside the artifact: try one there
      const probe = join(dir, `.${basename(this.path)}.${process.pid}.check`);
      closeSync(openSync(probe, "w"));
      rmSync(probe);
    } catch (err) {
      throw new Error(`cannot write the artifact ${this.path}: ${(err as Error).message}`);
    }
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
