/**
 * UTF-8 without `TextEncoder`/`TextDecoder`: they are not in the ES library
 * a plugin's tsconfig names (`lib: ["es2022"]`), and the SDK must type-check
 * there as it does under node.
 */

/** `text` as UTF-8 (a lone surrogate becomes U+FFFD, as `TextEncoder` does). */
export function encode(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    let c = ch.codePointAt(0)!;
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 0x3f));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 0x3f), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f));
  }
  return Uint8Array.from(out);
}

/** `bytes` as text, or undefined where they are not well-formed UTF-8. */
export function decode(bytes: Uint8Array): string | undefined {
  const parts: string[] = [];
  let codes: number[] = [];
  for (let i = 0; i < bytes.length; ) {
    const b = bytes[i]!;
    let need: number;
    let c: number;
    let min: number;
    if (b < 0x80) [need, c, min] = [0, b, 0];
    else if (b >= 0xc2 && b < 0xe0) [need, c, min] = [1, b & 0x1f, 0x80];
    else if (b >= 0xe0 && b < 0xf0) [need, c, min] = [2, b & 0x0f, 0x800];
    else if (b >= 0xf0 && b < 0xf5) [need, c, min] = [3, b & 0x07, 0x10000];
    else return undefined;
    for (let k = 1; k <= need; k++) {
      const next = bytes[i + k];
      if (next === undefined || (next & 0xc0) !== 0x80) return undefined;
      c = (c << 6) | (next & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return undefined;
    codes.push(c);
    if (codes.length >= 4096) {
      parts.push(String.fromCodePoint(...codes));
      codes = [];
    }
    i += need + 1;
  }
  parts.push(String.fromCodePoint(...codes));
  return parts.join("");
}
