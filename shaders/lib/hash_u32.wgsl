// Counter-based 32-bit integer hash (the "lowbias32" mixer: xor-shift, multiply, twice).
// A bijection on u32 with good avalanche; TypeScript twin: hashU32 in kernels/sample.ts.
fn hash_u32(value: u32) -> u32 {
  var h = value;
  h ^= h >> 16u;
  h *= 0x7feb352du;
  h ^= h >> 15u;
  h *= 0x846ca68bu;
  h ^= h >> 16u;
  return h;
}
