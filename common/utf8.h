/*
 * utf8.h — the UTF-8 primitives every text path shares (tokenizer, grammar,
 * Jinja string literals, the OpenAI response sanitizer): validate one
 * sequence, decode one code point, encode one code point; sanitize a text
 * and count its characters.
 *
 * Pure functions on caller memory: no allocation, no state, thread-safe.
 * Validation follows Unicode's "maximal subpart" rule (as Python's
 * errors="replace" and WHATWG decoders do), so callers that substitute
 * U+FFFD agree with those decoders byte for byte.
 */
#ifndef IFD_UTF8_H
#define IFD_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * Validates the sequence at p[0..n) (n ≥ 1): > 0 its length when complete
 * and valid; 0 when p is a valid but unfinished prefix; < 0 when invalid,
 * minus the number of bytes to replace by one U+FFFD (the maximal subpart,
 * ≥ 1).
 */
int ifd_utf8_check(const uint8_t *p, size_t n);

/* Decodes the code point at p[0..n): *len gets its length. An invalid or
 * unfinished sequence gives 0xFFFFFFFF with *len = 1. */
uint32_t ifd_utf8_get(const uint8_t *p, size_t n, size_t *len);

/* Encodes cp (≤ 0x10FFFF) into out, which has room for 4 bytes; returns
 * the length (1–4). */
size_t ifd_utf8_put(uint8_t *out, uint32_t cp);

/* Copies in[0..n) to out with every invalid or unfinished sequence replaced
 * by U+FFFD (one per maximal subpart, as Python's errors="replace"); out has
 * room for 3 * n bytes. Returns the bytes written (no terminator). */
size_t ifd_utf8_sanitize(char *out, const char *in, size_t n);

/* The characters ifd_utf8_sanitize writes for in[0..n) (each U+FFFD counts
 * one): the length OpenAI's text offsets count, without the copy. */
size_t ifd_utf8_count(const char *in, size_t n);

#endif
