/**
 * Property tests: thousands of seeded random operation sequences over the KV cache
 * manager (admit with prefix hits, grow, cache, free, shadows with and without
 * copy-on-write, forks, steps issued and completed, prefix-cache resets), with the
 * invariants re-derived independently after every operation.
 */
import { test } from "uvu";
import * as assert from "uvu/assert";
import { blockExtraKeys, hashBlockTokens } from "../../src/kv/block_hash.ts";
import { KvCacheManager } from "../../src/kv/kv_cache_manager.ts";
import { FULL_ATTENTION_GROUP } from "../../src/kv/kv_cache_group.ts";
import { Rng } from "../../src/util/rng.ts";
import { KvTestRequest } from "./kv_test_request.ts";

const SALTS = [null, "a", "b"] as const;
const BASES = [0, 1, 2].map((k) => Array.from({ length: 40 }, (_, i) => 1 + ((i * (k + 3)) % 5)));

class World {
  readonly kv: KvCacheManager;
  readonly bs: number;
  readonly live = new Map<string, KvTestRequest>();
  /** Test-side record: request -> src block ids of its copies not yet issued. */
  readonly unissued = new Map<string, number[]>();
  /** Test-side record: request -> last step that read it. */
  readonly lastRead = new Map<string, number>();
  readonly inFlight: number[] = [];
  /** Tokens of every block hash any request computed. */
  readonly tokensOfHash = new Map<string, number[]>();
  /** (parent, hash) pairs whose sha256 was already recomputed. */
  readonly verified = new Set<string>();
  nextId = 0;
  readonly #remembered = new WeakMap<KvTestRequest, number>();

  constructor(readonly rng: Rng) {
    this.bs = [1, 2, 4][rng.int(0, 3)];
    this.kv = new KvCacheManager({
      numBlocks: rng.int(4, 26),
      blockSize: this.bs,
      enablePrefixCaching: rng.int(0, 5) > 0,
      watermark: rng.int(0, 2) * 0.1,
      groups: Array(rng.int(1, 3)).fill(FULL_ATTENTION_GROUP),
    });
  }

  pick(): KvTestRequest | undefined {
    const all = [...this.live.values()];
    return all.length ? all[this.rng.int(0, all.length)] : undefined;
  }

  snapshot() {
    return JSON.stringify({
      refs: this.kv.pool.blocks.map((b) => b.refCnt),
      free: this.kv.pool.freeBlockIds(),
      usage: this.kv.usage(),
    });
  }

  isDeferred(id: string): boolean {
    const s = this.lastRead.get(id) ?? 0;
    return this.inFlight.includes(s);
  }

  /** Records the tokens of every hash the request has; one hash never names two contents. */
  remember(req: KvTestRequest) {
    const from = this.#remembered.get(req) ?? 0;
    this.#remembered.set(req, req.blockHashes.length);
    req.blockHashes.forEach((h, i) => {
      if (i < from) return;
      const tokens = req.tokenIds.slice(i * this.bs, (i + 1) * this.bs);
      const known = this.tokensOfHash.get(h);
      if (known) assert.equal(known, tokens, "one hash, one content");
      else this.tokensOfHash.set(h, tokens);
    });
  }
}

function admit(w: World) {
  const { rng, kv } = w;
  if (w.live.size >= 8) return;
  const base = BASES[rng.int(0, 3)];
  const len = rng.int(1, 17);
  const tokens = base.slice(0, len);
  for (let i = rng.int(0, len + 1); i < len; i++) tokens[i] = rng.int(1, 6);
  const req = new KvTestRequest(`r${w.nextId++}`, tokens, SALTS[rng.int(0, 3)]);
  const hit = kv.getComputedBlocks(req);
  w.remember(req);
  assert.ok(hit.numComputedTokens <= len - 1, "a hit never covers the whole prompt");
  assert.is(hit.numComputedTokens % w.bs, 0);
  hit.blocks.forEach((blocks) =>
    blocks.forEach((b, i) => {
      assert.equal(
        Array.from(kv.pool.cachedTokens(b.blockId)),
        tokens.slice(i * w.bs, (i + 1) * w.bs),
        "a hit holds the request's tokens",
      );
    })
  );
  const numNew = rng.int(1, len - hit.numComputedTokens + 1);
  const before = w.snapshot();
  const out = kv.allocateSlots(req, numNew, rng.int(0, 3), hit);
  if (out === null) {
    assert.is(w.snapshot(), before, "a refused allocation takes nothing");
    assert.not.ok(kv.holds(req.requestId));
    return;
  }
  req.numComputedTokens = hit.numComputedTokens + numNew;
  w.live.set(req.requestId, req);
}

function grow(w: World) {
  const req = w.pick();
  if (!req) return;
  if (req.numComputedTokens === req.tokenIds.length) {
    for (let k = w.rng.int(1, 4); k > 0; k--) req.tokenIds.push(w.rng.int(1, 6));
  }
  const numNew = w.rng.int(1, req.tokenIds.length - req.numComputedTokens + 1);
  const before = w.snapshot();
  let out;
  try {
    out = w.kv.allocateSlots(req, numNew);
  } catch (err) {
    assert.match(String(err), /fork the shared tail first/);
    const index = Math.floor(req.numComputedTokens / w.bs);
    const shared = w.kv.blockIds(req.requestId).some((t) => w.kv.pool.blocks[t[index]]?.refCnt > 1);
    assert.ok(shared, "a write is refused only for a shared block");
    const tables = w.kv.blockIds(req.requestId);
    const copies = w.kv.forkTail(req);
    if (copies === null) {
      assert.is(w.snapshot(), before, "a refused fork takes nothing");
      return;
    }
    for (const [src, dst] of copies) {
      assert.ok(tables.some((t) => t[index] === src));
      assert.is(w.kv.pool.blocks[dst].refCnt, 1);
      w.unissued.set(req.requestId, [...(w.unissued.get(req.requestId) ?? []), src]);
    }
    return;
  }
  if (out === null) {
    assert.is(w.snapshot(), before, "a refused allocation takes nothing");
    return;
  }
  req.numComputedTokens += numNew;
  w.remember(req);
}

function free(w: World) {
  const req = w.pick();
  if (!req) return;
  const { kv } = w;
  const id = req.requestId;
  const tables = kv.blockIds(id);
  const refsBefore = kv.pool.blocks.map((b) => b.refCnt);
  const deferred = w.isDeferred(id);
  const pendingBefore = kv.usage().pendingFree;
  const expectDrop = new Map<number, number>();
  for (const src of w.unissued.get(id) ?? []) expectDrop.set(src, (expectDrop.get(src) ?? 0) + 1);
  if (!deferred) {
    for (const t of tables) for (const b of t) expectDrop.set(b, (expectDrop.get(b) ?? 0) + 1);
  }
  kv.free(id);
  w.live.delete(id);
  w.unissued.delete(id);
  kv.pool.blocks.forEach((b, i) => {
    assert.is(refsBefore[i] - b.refCnt, expectDrop.get(i) ?? 0, `block ${i} after freeing ${id}`);
  });
  const n = tables.reduce((s, t) => s + t.length, 0);
  assert.is(kv.usage().pendingFree, pendingBefore + (deferred ? n : 0));
  if (!deferred) {
    // the request's blocks that reached refcount 0 joined the back of the queue, tail first
    const freed = tables.flatMap((t) => [...t].reverse()).filter((b) =>
      kv.pool.blocks[b].refCnt === 0
    );
    assert.equal(kv.pool.freeBlockIds().slice(-freed.length || Infinity), freed);
  }
}

function shadow(w: World) {
  const chain = w.pick();
  if (!chain || chain.numComputedTokens < 1 || w.live.size >= 8) return;
  const { rng, kv, bs } = w;
  const maxCtx = Math.min(chain.numComputedTokens, chain.tokenIds.length - 1);
  if (maxCtx < 1) return;
  const ctx = rng.int(1, maxCtx + 1);
  const hold = ctx + 1 + rng.int(0, 4);
  const cow = rng.int(0, 2) === 1;
  const s = new KvTestRequest(
    `s${w.nextId++}`,
    chain.tokenIds.slice(0, ctx + 1),
    `shadow${w.nextId}`,
  );
  const tail = Math.ceil(hold / bs) - Math.floor(ctx / bs);
  const u = kv.usage();
  const fits = tail * kv.numGroups <= u.free - u.watermarkBlocks;
  const chainTables = kv.blockIds(chain.requestId);
  const before = w.snapshot();
  assert.is(kv.registerShadow(s, chain, ctx, hold, cow), fits);
  if (!fits) {
    assert.is(w.snapshot(), before, "a refused shadow takes nothing");
    return;
  }
  const tables = kv.blockIds(s.requestId);
  const shared = Math.floor(ctx / bs);
  tables.forEach((t, g) => {
    assert.equal(t.slice(0, shared), chainTables[g].slice(0, shared), "full blocks are shared");
    assert.is(t.length, shared + tail);
    for (const b of t.slice(shared)) assert.is(kv.pool.blocks[b].refCnt, 1, "the tail is private");
  });
  if (cow && ctx % bs !== 0) w.unissued.set(s.requestId, chainTables.map((t) => t[shared]));
  s.numComputedTokens = ctx;
  w.live.set(s.requestId, s);
}

function beginStep(w: World) {
  if (w.inFlight.length >= 3) return;
  const readers = [...w.live.keys()].filter(() => w.rng.int(0, 2) === 1);
  const expected = [...w.unissued.values()].flat().sort((a, b) => a - b);
  const { stepId, blockCopies } = w.kv.beginStep(readers);
  assert.equal(blockCopies.map(([src]) => src).sort((a, b) => a - b), expected);
  for (const id of [...readers, ...w.unissued.keys()]) w.lastRead.set(id, stepId);
  w.unissued.clear();
  w.inFlight.push(stepId);
}

function completeStep(w: World) {
  const s = w.inFlight.shift();
  if (s !== undefined) w.kv.completeStep(s);
}

/** Fails with `message()` unless `ok` (the message is built only on failure). */
function check(ok: boolean, message: () => string) {
  if (!ok) assert.unreachable(message());
}

function checkInvariants(w: World) {
  const { kv, bs } = w;
  const pool = kv.pool;
  const freeIds = pool.freeBlockIds();
  const isFree = new Uint8Array(pool.numBlocks);
  for (const id of freeIds) {
    check(isFree[id] === 0, () => `block ${id} is in the free queue twice`);
    isFree[id] = 1;
  }
  check(isFree[0] === 0, () => "the null block is never free");
  const occ = new Int32Array(pool.numBlocks);
  const groupOf = new Int32Array(pool.numBlocks).fill(-1);
  for (const id of w.live.keys()) {
    kv.blockIds(id).forEach((t, g) => {
      for (const b of t) {
        check(b !== 0, () => "the null block is never in a table");
        occ[b]++;
        check(groupOf[b] === -1 || groupOf[b] === g, () => `block ${b} is in two groups`);
        groupOf[b] = g;
      }
    });
  }
  let extra = 0;
  for (let i = 1; i < pool.numBlocks; i++) {
    const ref = pool.blocks[i].refCnt;
    check(ref >= 0, () => `block ${i}: refcount ${ref} is negative`);
    check((ref === 0) === (isFree[i] === 1), () => `block ${i}: free iff refcount 0 (${ref})`);
    check(ref >= occ[i], () => `block ${i}: refcount ${ref} < ${occ[i]} tables holding it`);
    extra += ref - occ[i];
  }
  for (const req of w.live.values()) w.remember(req);
  const u = kv.usage();
  assert.is(extra, u.pendingFree + u.pendingCopies, "every other reference is a fence or a copy");
  assert.is(u.free, freeIds.length);
  assert.is(u.total, u.free + u.inUse);
  let cached = 0, cachedFree = 0;
  for (const [g, hash, block] of pool.cachedEntries()) {
    cached++;
    if (block.refCnt === 0) cachedFree++;
    check(block.blockHash === hash && block.groupId === g, () => `cache entry ${hash} mislabelled`);
    const tokens = pool.cachedTokens(block.blockId);
    const expected = w.tokensOfHash.get(hash);
    check(
      expected !== undefined && tokens.every((t, i) => t === expected[i]),
      () => `cached hash ${hash} holds [${tokens}], computed from [${expected}]`,
    );
    const entry = `${block.parentHash}>${hash}`;
    if (!w.verified.has(entry)) {
      const keys = block.parentHash === null ? SALTS.map((s) => blockExtraKeys(0, s)) : [[]];
      assert.ok(
        keys.some((k) => hashBlockTokens(block.parentHash, tokens, 0, bs, k) === hash),
        "the hash is sha256 of its parent, tokens and keys",
      );
      w.verified.add(entry);
    }
  }
  assert.is(u.cached, cached);
  assert.is(u.cachedFree, cachedFree);
}

const OPS: [number, (w: World) => void][] = [
  [4, admit],
  [5, grow],
  [2, (w) => w.pick() && w.kv.cacheBlocks(w.pick()!, w.pick()!.numComputedTokens)],
  [3, free],
  [2, shadow],
  [3, beginStep],
  [3, completeStep],
  [1, (w) => {
    const u = w.kv.usage();
    assert.is(w.kv.resetPrefixCache(), u.inUse === 0 && u.pendingFree === 0);
  }],
];
const TOTAL = OPS.reduce((s, [wgt]) => s + wgt, 0);

function runSequence(seed: number, numOps: number) {
  const rng = Rng.fromSeed(`kv-property:${seed}`);
  const w = new World(rng);
  for (let i = 0; i < numOps; i++) {
    let r = rng.int(0, TOTAL);
    const op = OPS.find(([wgt]) => (r -= wgt) < 0)![1];
    op(w);
    checkInvariants(w);
  }
  // drain: every step completes, every request is freed -> every block is back
  while (w.inFlight.length) completeStep(w);
  for (const id of [...w.live.keys()]) {
    w.kv.free(id);
    w.live.delete(id);
  }
  checkInvariants(w);
  const u = w.kv.usage();
  assert.is(u.free, u.total, "after the drain every block is free");
  assert.equal([u.inUse, u.pendingFree, u.pendingCopies, u.numRequests], [0, 0, 0, 0]);
  assert.ok(w.kv.pool.blocks.every((b) => b.refCnt === 0));
}

test("2000 random operation sequences keep every KV invariant and drain to a full pool", () => {
  for (let seed = 0; seed < 2000; seed++) {
    try {
      runSequence(seed, 60);
    } catch (err) {
      throw new Error(`sequence seed ${seed}: ${(err as Error).message}`, { cause: err });
    }
  }
});

test.run();
