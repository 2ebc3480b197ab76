/**
 * kvwarm's gate: whether decode points can read real KV, decided before any capacity
 * decision (the envelope a group of ranks negotiates carries the verdict). The checks
 * run cheapest first and the first failure names the skip reason of the design:
 *
 * ```
 * flag_off                          --kvwarm off
 * dense_model_content_insensitive   no MoE layer: routing, hence cost, does not depend on KV content
 * prefix_caching_disabled           chains extend each other through the prefix cache
 * dataset_unavailable:<why>         the real-text dataset is missing or fails its sha256
 * tokenizer_unavailable:<why>       no tokenizer for the model, or ids outside its vocabulary
 * content_too_shallow               a chain cannot reach max_model_len - 4 tokens
 * peer_ineligible                   (attention-DP) this rank can, another cannot
 * ```
 *
 * The content probe (parse the dataset, load the tokenizer, tokenize chain 0 to
 * `max_model_len - 4` tokens) is real work, and its tokens are kept: the chains that
 * follow reuse them. (`hybrid_state_layers_unsupported` cannot arise: the engine has
 * full-attention KV groups only.)
 *
 * ```ts
 * const gate = probeKvwarmGate({ requested: "auto", moe: true, prefixCaching: true,
 *   maxModelLen: 4096, vocabSize, contentSeed: "0", rank: 0, tokenizer: () => tok });
 * if (!gate.eligible) console.log(`kvwarm: ${gate.skipReason}`);
 * ```
 */
import type { TextPoolInfo } from "../artifact.ts";
import {
  collectionOf,
  loadCollection,
  type PoolTokenizer,
  TEXT_DATASET_PACKAGE,
  TEXT_DATASET_SHA256,
  TextPoolError,
} from "../text_pool.ts";
import { ChainContent } from "./chain_content.ts";
import type { KvwarmRequest } from "./section.ts";

/** Tokens a chain must be able to reach below max_model_len. */
export const CHAIN_DEPTH_MARGIN = 4;

/** The fixed skip reasons (the dataset and tokenizer ones carry `:<why>`). */
export const KVWARM_SKIP = Object.freeze(
  {
    flagOff: "flag_off",
    dense: "dense_model_content_insensitive",
    noPrefixCaching: "prefix_caching_disabled",
    tooShallow: "content_too_shallow",
    peerIneligible: "peer_ineligible",
  } as const,
);

/** What the gate looks at. */
export interface KvwarmGateInputs {
  /** `--kvwarm`: `auto` is on for MoE models. */
  readonly requested: KvwarmRequest;
  /** Whether the model has MoE layers. */
  readonly moe: boolean;
  /** Whether the engine caches prefixes. */
  readonly prefixCaching: boolean;
  /** The engine's max_model_len. */
  readonly maxModelLen: number;
  /** The model's vocabulary size. */
  readonly vocabSize: number;
  /** The content seed. */
  readonly contentSeed: string;
  /** This rank. */
  readonly rank: number;
  /** The model's tokenizer; throws a TextPoolError `tokenizer_unavailable:<why>` when none. */
  readonly tokenizer: () => PoolTokenizer;
  /** The dataset's bodies, verified (default: the pinned nlp-corpus). */
  readonly bodies?: () => { readonly bodies: readonly string[]; readonly version: string };
}

/** The gate's verdict. */
export interface KvwarmGate {
  /** `--kvwarm` as asked. */
  readonly requested: KvwarmRequest;
  /** True when decode points may read real KV. */
  readonly eligible: boolean;
  /** The first failed check (see the module doc above), or null. */
  readonly skipReason: string | null;
  /** For people: why not, or what passed. */
  readonly message: string;
  /** The chains' content (eligible only). */
  readonly content: ChainContent | null;
  /** Dataset provenance, as far as the probe got. */
  readonly dataset: (() => TextPoolInfo) | null;
  /** Tokens the depth probe asked of chain 0. */
  readonly probeDepth: number;
  /** Seconds the content probe took. */
  readonly probeSeconds: number;
}

function refuse(
  inputs: KvwarmGateInputs,
  skipReason: string,
  message: string,
  probeSeconds = 0,
): KvwarmGate {
  return {
    requested: inputs.requested,
    eligible: false,
    skipReason,
    message,
    content: null,
    dataset: null,
    probeDepth: Math.max(0, inputs.maxModelLen - CHAIN_DEPTH_MARGIN),
    probeSeconds,
  };
}

/** Runs every check in order (see the module doc above). */
export function probeKvwarmGate(inputs: KvwarmGateInputs): KvwarmGate {
  if (inputs.requested === "off") return refuse(inputs, KVWARM_SKIP.flagOff, "--kvwarm off");
  if (!inputs.moe) {
    return refuse(
      inputs,
      KVWARM_SKIP.dense,
      "the model has no MoE layer: a dense step's cost does not depend on the KV content, " +
        "so decode points use fake KV",
    );
  }
  if (!inputs.prefixCaching) {
    return refuse(
      inputs,
      KVWARM_SKIP.noPrefixCaching,
      "prefix caching is off: chains cannot extend each other's cached blocks",
    );
  }
  const t0 = performance.now();
  const depth = inputs.maxModelLen - CHAIN_DEPTH_MARGIN;
  const seconds = () => (performance.now() - t0) / 1000;
  try {
    const { collection, bodies, version } = inputs.bodies
      ? collectionOf(inputs.bodies())
      : loadCollection();
    const tokenizer = inputs.tokenizer();
    const tokenizerPath = tokenizer.path;
    const collectionBodies = collection.length;
    const content = new ChainContent({
      bodies: collection,
      tokenizer,
      contentSeed: inputs.contentSeed,
      rank: inputs.rank,
      vocabSize: inputs.vocabSize,
    });
    if (depth < 1) {
      throw new TextPoolError(
        KVWARM_SKIP.tooShallow,
        `max_model_len ${inputs.maxModelLen} leaves no chain depth`,
      );
    }
    content.tokens(0, depth);
    // counts only: the bodies and the tokenizer go once the chains' content is prepared
    const dataset = (): TextPoolInfo => ({
      package: TEXT_DATASET_PACKAGE,
      version,
      sha256: TEXT_DATASET_SHA256,
      collection_pool: "sha256(body)[0] even",
      bodies,
      collection_bodies: collectionBodies,
      bodies_used: content.conversationsTokenized,
      tokens: content.tokensTokenized,
      tokenizer: tokenizerPath,
    });
    return {
      requested: inputs.requested,
      eligible: true,
      skipReason: null,
      message: `real KV from ${collectionBodies} ${TEXT_DATASET_PACKAGE} conversations ` +
        `(chain 0 reaches ${depth} tokens)`,
      content,
      dataset,
      probeDepth: depth,
      probeSeconds: seconds(),
    };
  } catch (err) {
    if (!(err instanceof TextPoolError)) throw err;
    return refuse(inputs, err.skipReason, err.message, seconds());
  }
}

/**
 * The gate after the group's verdict (attention-DP: eligible only when every rank is):
 * an eligible rank whose peer is not becomes ineligible with `reason` (the group's
 * `peer_ineligible`).
 */
export function withGroupVerdict(
  gate: KvwarmGate,
  reason: string = KVWARM_SKIP.peerIneligible,
): KvwarmGate {
  if (!gate.eligible) return gate;
  return {
    ...gate,
    eligible: false,
    skipReason: reason,
    message: "another rank cannot seed real KV; every rank uses fake KV",
    content: null,
  };
}
