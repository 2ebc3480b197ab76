/**
 * The identity of a prompt in the artifact: sha256 (hex) of its token ids as uint32
 * little-endian, so two runs can prove they measured the same tokens.
 *
 * ```ts
 * promptDigest([1, 2, 3]); // sha256 of 01000000 02000000 03000000
 * ```
 */
import { createHash } from "node:crypto";

/** sha256 hex of the ids as uint32 little-endian. */
export function promptDigest(ids: ArrayLike<number>): string {
  const bytes = new Uint8Array(ids.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < ids.length; i++) view.setUint32(i * 4, ids[i] >>> 0, true);
  return createHash("sha256").update(bytes).digest("hex");
}
