import { test } from "uvu";
import * as assert from "uvu/assert";
import { Rng } from "../../src/util/rng.ts";
import {
  MOE_NO_ROW,
  moeDispatchParams,
  moeMaxWorkItems,
  sampleRouting,
  spec,
} from "../../kernels/moe_dispatch.ts";
import * as routeDispatch from "../../kernels/moe_route_dispatch.ts";
import { MOE_MAX_TOPK } from "../../kernels/moe_router.ts";
import { sharedGpu } from "../shared_gpu.ts";
import { dispatchOnce } from "./dispatch_once.ts";

async function dispatch(
  ids: Int32Array,
  tokens: number,
  topK: number,
  experts: number,
  blockM: number,
) {
  const p = moeDispatchParams({ tokens, topK, experts, blockM, gridXGateUp: 7, gridXDown: 9 });
  const n = tokens * topK;
  const maxItems = moeMaxWorkItems(n, experts, blockM);
  // row_of starts out holding neither a row nor MOE_NO_ROW (the outputs' 0xff poison is
  // MOE_NO_ROW itself): every entry the test reads back was written by the kernel
  const stale = new Uint32Array(Math.max(1, n)).fill(0xdeadbeef);
  const out = await dispatchOnce(await sharedGpu(), spec, "f32", p, {
    topk_ids: ids,
    row_of: stale,
  }, {
    expert_offsets: (experts + 1) * 4,
    sorted_token: Math.max(4, n * 4),
    row_of: Math.max(4, n * 4),
    work_items: (1 + maxItems) * 16,
    dispatch_args: 24,
  });
  const items = new Uint32Array(out.work_items);
  return {
    offsets: [...new Uint32Array(out.expert_offsets)],
    sortedToken: [...new Uint32Array(out.sorted_token)].slice(0, n),
    rowOf: [...new Uint32Array(out.row_of)].slice(0, n),
    items: Array.from({ length: items[0] }, (_, i) => [...items.subarray(4 + 4 * i, 7 + 4 * i)]),
    header: [...items.subarray(0, 2)],
    args: [...new Uint32Array(out.dispatch_args)],
  };
}

test("an expert that receives no token gets no work item; one that receives all gets ceil(n / block_m)", async () => {
  // 37 tokens, top-2, 8 experts: expert 0 is every token's first choice, 4..7 get none.
  const ids = sampleRouting(Rng.fromSeed("skewed"), 37, 8, 2, "skewed");
  const r = await dispatch(ids, 37, 2, 8, 4);
  assert.equal(r.offsets.slice(0, 2), [0, 37]);
  assert.equal(r.offsets.slice(4), [74, 74, 74, 74, 74]);
  const perExpert = (e: number) => r.items.filter((it) => it[0] === e);
  assert.is(perExpert(0).length, 10); // 9 tiles of 4 rows and one of 1
  assert.equal(perExpert(0)[9], [0, 36, 37]);
  for (const e of [4, 5, 6, 7]) assert.is(perExpert(e).length, 0);
  assert.equal(r.header, [r.items.length, 74]);
  assert.equal(r.args, [7, r.items.length, 1, 9, r.items.length, 1]);
});

test("each expert's rows list its tokens in token order, and row_of inverts sorted_token", async () => {
  const tokens = 300, topK = 3, experts = 8;
  const ids = sampleRouting(Rng.fromSeed("spread"), tokens, experts, topK, "spread");
  const r = await dispatch(ids, tokens, topK, experts, 16);
  for (let i = 0; i < tokens * topK; i++) {
    const row = r.rowOf[i];
    const e = ids[i];
    assert.ok(row >= r.offsets[e] && row < r.offsets[e + 1], `assignment ${i} outside expert ${e}`);
    assert.is(r.sortedToken[row], Math.floor(i / topK));
  }
  for (let e = 0; e < experts; e++) {
    const rows = r.sortedToken.slice(r.offsets[e], r.offsets[e + 1]);
    assert.equal(rows, [...rows].sort((a, b) => a - b), `expert ${e} rows out of token order`);
  }
  // Work items tile every expert's rows exactly, in expert order.
  let next = 0;
  for (const [e, start, end] of r.items) {
    assert.is(start, next);
    assert.ok(end > start && end - start <= 16 && end <= r.offsets[e + 1]);
    next = end;
  }
  assert.is(next, tokens * topK);
});

test("an expert id out of range is dropped: no row, row_of = MOE_NO_ROW", async () => {
  const ids = new Int32Array([1, 0, 9, 1, -1, 1]); // 3 tokens, top-2, 2 experts
  const r = await dispatch(ids, 3, 2, 2, 64);
  assert.equal(r.offsets, [0, 1, 4]);
  assert.equal(r.rowOf, [1, 0, MOE_NO_ROW, 2, MOE_NO_ROW, 3]);
  assert.equal(r.sortedToken.slice(0, 4), [0, 0, 1, 2]);
});

test("zero tokens make zero work items, so the GEMMs launch nothing", async () => {
  const r = await dispatch(new Int32Array(1), 0, 2, 8, 64);
  assert.equal(r.header, [0, 0]);
  assert.equal(r.args, [7, 0, 1, 9, 0, 1]);
  assert.equal(r.offsets, [0, 0, 0, 0, 0, 0, 0, 0, 0]);
});

test("dispatch params refuse more work items than a grid dimension holds", () => {
  assert.throws(
    () =>
      moeDispatchParams({
        tokens: 600_000,
        topK: 8,
        experts: 128,
        blockM: 64,
        gridXGateUp: 1,
        gridXDown: 1,
      }),
    /work items exceed a grid dimension/,
  );
  assert.is(moeMaxWorkItems(8 * 1024, 128, 64), 128 + 128 - 1);
});

test("moe_route_dispatch declares its workgroup memory: the dispatch's arrays and the router's", () => {
  const v = routeDispatch.spec.variants[0];
  const { WG: wg, MAX_E: e, ROW_LOGITS: rows, TOP_SLOTS: tops } = v.consts!;
  assert.is(wg, spec.variants[0].consts!.WG);
  // expert_count, expert_next, expert_first_item, lane_bits, the scan's two arrays
  const dispatchBytes = 3 * e * 4 + e * (wg / 32) * 4 + 2 * wg * 4;
  // rows_logit, rows_top
  const routerBytes = rows * 4 + tops * 4;
  assert.is(v.workgroupBytes, dispatchBytes + routerBytes);
  assert.is(v.workgroupBytes, 29184);
  // a chunk holds at least 2 tokens of the most experts and top-k (router_rows_chunk)
  assert.ok(rows / e >= 2 && tops / MOE_MAX_TOPK >= 2);
  assert.throws(
    () =>
      routeDispatch.moeRouteDispatchParams({ tokens: 2, experts: 8, topK: 2, normTopk: true }, {
        tokens: 1,
        topK: 2,
        experts: 8,
        gridXGateUp: 1,
        gridXDown: 1,
      }),
    /disagree/,
  );
});

test.run();
