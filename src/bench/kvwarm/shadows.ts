/**
 * Shadows: the measured requests of a real-KV decode point, registered in the untimed
 * admission window. Slot i's shadow borrows parked chain i: its prompt is the chain's
 * first `computed + 1` tokens with the slot's own cache_salt and `ignore_eos`; the
 * chain's full blocks below `computed` are shared by refcount; a private tail covers
 * `computed + 1 + headroom` tokens, where headroom is the point's steady steps (its
 * first block a copy-on-write fork of the chain's partial block, whose GPU copy rides
 * the admission step, or zero-filled without CoW). Registration is all or nothing, over
 * KV groups (the engine) and over slots (here): a slot that does not fit sheds the ones
 * registered before it. Steady steps then allocate nothing; releasing a shadow drops
 * its shared references and frees only its tail.
 *
 * ```ts
 * const outcome = registerShadows(engine, (i) => chainSalt(0, i), requests, { cow: true });
 * ```
 */
import type { Engine } from "../../engine/engine.ts";
import type { Request } from "../../engine/request.ts";
import type { DecodeSeedOutcome, DecodeSeedRequest } from "../decode_seeder.ts";

/** The preparation method of real-KV points in the artifact. */
export const SHADOW_METHOD = "kvwarm_shadow";

/** Registers one shadow per request on chain `chainOf(slot)` (see the module doc above). */
export function registerShadows(
  engine: Engine,
  chainOf: (slot: number) => string,
  requests: readonly DecodeSeedRequest[],
  options: { readonly cow: boolean },
): DecodeSeedOutcome {
  const inUse = engine.kvUsage().inUse;
  const done: Request[] = [];
  for (const r of requests) {
    const chainId = chainOf(r.slot);
    const shadow = engine.registerShadow(chainId, r.computed, {
      maxTokens: r.maxTokens,
      ignoreEos: true,
      cacheSalt: r.cacheSalt,
    }, { requestId: r.requestId, headroomTokens: r.maxTokens - 1, cow: options.cow });
    if (shadow === null) {
      const u = engine.kvUsage();
      for (const d of done) engine.shed(d.requestId);
      return {
        ok: false,
        reason: `shadow_registration_failed: slot ${r.slot} on ${chainId} (${r.computed} ` +
          `computed tokens) does not fit its tail: ${u.free} blocks free, watermark ` +
          `${u.watermarkBlocks}`,
      };
    }
    done.push(shadow);
  }
  return {
    ok: true,
    requests: done,
    method: SHADOW_METHOD,
    blocks: engine.kvUsage().inUse - inUse,
  };
}
