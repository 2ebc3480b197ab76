/**
 * kvwarm's plan: which decode points read real KV, on which rung's chains, and how deep
 * those chains are. Points come batch desc, KV desc; each batch B is a rung of B chains
 * (slot i of a point reads chain i). A point's slot with context ctx is admitted at
 * `computed = max(1, ctx - 1)` and, over `samples` steady steps, holds
 * `computed + 1 + samples` tokens: its shadow shares the chain's full blocks below
 * `computed` and owns a private tail of `ceil(hold / bs) - floor(computed / bs)` blocks.
 *
 * A rung's depth is `min(max need, max_model_len - 4)` over its points, where a point
 * needs `computed + 1 + samples` tokens of its deepest slot (the full steady span), and
 * is shrunk (to the next shallower point's need) until
 * `B * blocks(depth) + tail blocks of its largest point` fits the usable pool. A point
 * reads real KV when its deepest slot's prompt lies in the chain (`computed + 1 <= depth`;
 * steady tokens past the chain live in the private tail). A rung that never fits is a
 * capacity fallback. Real-KV points run first, rung by rung; every other decode point
 * runs after them (`fake_fallback`: fake injection floods the pool and would evict the
 * chains' blocks).
 *
 * ```
 * B=2, samples 3, bs 16, L 256: point K=200 -> ctx [100, 100], computed 99, need 103;
 * depth 103 -> 2 x 7 chain blocks + 2 x (7 - 6) tail blocks = 16 <= usable: warm
 * ```
 *
 * ```ts
 * const plan = planKvwarm(orderDecode(points), capacity, 3);
 * plan.order; // rung points first, then fallbacks
 * ```
 */
import type { BenchCapacity, DecodePoint } from "../artifact.ts";
import { blocksFor } from "../capacity.ts";
import { decodePlan } from "../partition.ts";
import { pointKey } from "../point.ts";
import { CHAIN_DEPTH_MARGIN } from "./gate.ts";

/** One batch size's chains and the points that read them. */
export interface Rung {
  /** Batch size = number of chains. */
  readonly batch: number;
  /** Tokens each chain prefills. */
  readonly depth: number;
  /** Points on these chains, KV desc. */
  readonly points: readonly DecodePoint[];
  /** Blocks the chains hold: batch x blocks(depth). */
  readonly chainBlocks: number;
  /** Tail blocks of the rung's largest point (reserved beside the chains). */
  readonly tailBlocks: number;
}

/** The plan (see the module doc above). */
export interface KvwarmPlan {
  /** Rungs in execution order (batch desc). */
  readonly rungs: readonly Rung[];
  /** Every decode point in execution order: rung points first, then the fallbacks. */
  readonly order: readonly DecodePoint[];
  /** Why each point that is not on a rung uses fake KV, by point key. */
  readonly fallbacks: ReadonlyMap<string, string>;
  /** Rungs whose chains cannot fit. */
  readonly capacityFallbacks: readonly { readonly batch: number; readonly reason: string }[];
  /** The rung a point reads, or null (fake KV). */
  rungOf(point: DecodePoint): Rung | null;
}

/** The private tail blocks of one slot admitted at `computed` over `samples` steady steps. */
export function slotTailBlocks(computed: number, samples: number, blockSize: number): number {
  return blocksFor(computed + 1 + samples, blockSize) - Math.floor(computed / blockSize);
}

/** Tail blocks of every shadow of `point` together. */
export function pointTailBlocks(point: DecodePoint, samples: number, blockSize: number): number {
  return decodePlan(point.total_kv_read_tokens, point.batch_size)
    .reduce((s, slot) => s + slotTailBlocks(slot.computed, samples, blockSize), 0);
}

/** The deepest slot's computed tokens. */
function deepest(point: DecodePoint): number {
  return decodePlan(point.total_kv_read_tokens, point.batch_size)[0].computed;
}

/** Plans `points` (batch desc, KV desc) for real-KV points of `samples` steady steps. */
export function planKvwarm(
  points: readonly DecodePoint[],
  capacity: BenchCapacity,
  samples: number,
): KvwarmPlan {
  const bs = capacity.block_size;
  const L = capacity.max_model_len;
  const cap = L - CHAIN_DEPTH_MARGIN;
  const fallbacks = new Map<string, string>();
  const capacityFallbacks: { batch: number; reason: string }[] = [];
  const rungs: Rung[] = [];
  const byBatch = new Map<number, DecodePoint[]>();
  for (const p of points) {
    const c = deepest(p);
    // prompt computed + 1 tokens, then 1 + samples outputs: the engine stops a request
    // whose tokens reach max_model_len, so the steady steps need computed + 2 + samples
    if (c + 2 + samples > L) {
      fallbacks.set(
        pointKey(p),
        `steady_span_exceeds_max_model_len: ${samples} steady steps after ${c} computed ` +
          `tokens need ${c + 2 + samples} > ${L}`,
      );
    } else if (c + 1 > cap) {
      fallbacks.set(
        pointKey(p),
        `deeper_than_chain_cap: a prompt of ${c + 1} tokens is deeper than max_model_len - ` +
          `${CHAIN_DEPTH_MARGIN} = ${cap}`,
      );
    } else {
      const list = byBatch.get(p.batch_size) ?? [];
      list.push(p);
      byBatch.set(p.batch_size, list);
    }
  }
  for (const [batch, group] of byBatch) {
    const need = (p: DecodePoint) => Math.min(deepest(p) + 1 + samples, cap);
    // each point's full depth, and its prompt's alone (the point is warm at it, its steady
    // steps' tokens in the shadow's private tail): the deepest that fits the pool is the rung's
    const depths = [...new Set(group.flatMap((p) => [need(p), deepest(p) + 1]))].sort((a, b) =>
      b - a
    );
    let chosen: Rung | null = null;
    let tried = "";
    for (const depth of depths) {
      const warm = group.filter((p) => deepest(p) + 1 <= depth);
      const chainBlocks = batch * blocksFor(depth, bs);
      const tailBlocks = Math.max(...warm.map((p) => pointTailBlocks(p, samples, bs)));
      if (chainBlocks + tailBlocks <= capacity.usable_blocks) {
        chosen = { batch, depth, points: warm, chainBlocks, tailBlocks };
        break;
      }
      tried ||= `${batch} chains of ${depth} tokens need ${chainBlocks} blocks plus ` +
        `${tailBlocks} shadow tail blocks`;
    }
    if (chosen === null) {
      const reason = `capacity_fallback: ${tried}; even the shallowest depth ` +
        `${depths[depths.length - 1]} does not fit the ${capacity.usable_blocks} usable blocks`;
      capacityFallbacks.push({ batch, reason });
      for (const p of group) fallbacks.set(pointKey(p), reason);
      continue;
    }
    rungs.push(chosen);
    for (const p of group) {
      if (!chosen.points.includes(p)) {
        fallbacks.set(
          pointKey(p),
          `chain_depth_capped: the rung's chains were shrunk to ${chosen.depth} tokens to fit ` +
            `the pool; this point's prompt needs ${deepest(p) + 1}`,
        );
      }
    }
  }
  const rungByKey = new Map<string, Rung>();
  for (const r of rungs) for (const p of r.points) rungByKey.set(pointKey(p), r);
  const order = [
    ...rungs.flatMap((r) => r.points),
    ...points.filter((p) => !rungByKey.has(pointKey(p))),
  ];
  return {
    rungs,
    order,
    fallbacks,
    capacityFallbacks,
    rungOf: (point) => rungByKey.get(pointKey(point)) ?? null,
  };
}

/** Tokens each chain reads over the rungs: chain i, the deepest rung with more than i chains. */
export function chainLengths(rungs: readonly Rung[]): number[] {
  const lengths: number[] = [];
  for (const rung of rungs) {
    for (let i = 0; i < rung.batch; i++) lengths[i] = Math.max(lengths[i] ?? 0, rung.depth);
  }
  return lengths;
}
