/**
 * A cache of loaded values that keeps none of them alive: a value someone still holds is
 * handed out again instead of loaded a second time; once nobody holds it, the garbage collector
 * may take it and the next call loads it anew. For large host objects that should not outlive
 * their users (a tokenizer's vocabulary, a corpus) but that several parts of one run load.
 *
 * ```ts
 * const tokenizerOf = heldCache((spec: string) => loadTokenizer(spec));
 * tokenizerOf("a") === tokenizerOf("a"); // true while the first one is held
 * ```
 */
export function heldCache<K, V extends object>(load: (key: K) => V): (key: K) => V {
  const held = new Map<K, WeakRef<V>>();
  return (key) => {
    const alive = held.get(key)?.deref();
    if (alive) return alive;
    const value = load(key);
    held.set(key, new WeakRef(value));
    return value;
  };
}
