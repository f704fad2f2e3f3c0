// The one JSON text of a value, as the Python side writes it
// (`json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True)`): every
// object's keys sorted by code point, no spaces, non-ASCII escaped; a bigint as its
// digits. Equal values give equal text, which graph fingerprints (runner/version.ts)
// and an effect's recorded arguments (effect/effect.ts) both rely on;
// vectors/canonical_json.json holds both languages to it.

// Python sorts keys by code point; JavaScript's `<` compares UTF-16 code units, which
// puts a character beyond the BMP (a surrogate pair, U+D800-DFFF) before one of
// U+E000-FFFF. At the first unit that differs, moving the surrogates above the rest
// gives code point order.
function unitRank(unit: number): number {
  return unit >= 0xe000 ? unit - 0x800 : unit >= 0xd800 ? unit + 0x2000 : unit;
}

function byKey([a]: [string, unknown], [b]: [string, unknown]): number {
  const shorter = Math.min(a.length, b.length);
  for (let i = 0; i < shorter; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      return unitRank(x) - unitRank(y);
    }
  }
  return a.length - b.length;
}

export function canonical(value: unknown): string {
  const text = JSON.stringify(value, (_key, item: unknown) => {
    if (typeof item === "bigint") {
      return item.toString();
    }
    if (item !== null && typeof item === "object" && !Array.isArray(item)) {
      return Object.fromEntries(Object.entries(item as Record<string, unknown>).sort(byKey));
    }
    return item;
  });
  return (text ?? "null").replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
