/** bench's engine flags for subprocess tests: a few sequences, short steps, a 10 MiB KV cache. */
export const SMALL_ENGINE = [
  "--max-num-seqs",
  "4",
  "--max-num-batched-tokens",
  "64",
  "--max-model-len",
  "256",
  "--kv-cache-gb",
  "0.01",
];
