/*
 * utf8.c — UTF-8 validation, decoding and encoding (see utf8.h).
 */
#include "utf8.h"

#include <string.h>

int ifd_utf8_check(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* ≤ U+10FFFF */
    } else {
        return -1;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n)
            return 0;
        uint8_t b = p[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h)
            return -(int)i;
    }
    return (int)need + 1;
}

uint32_t ifd_utf8_get(const uint8_t *p, size_t n, size_t *len)
{
    int k = ifd_utf8_check(p, n);
    if (k <= 0) {
        *len = 1;
        return 0xFFFFFFFFu;
    }
    *len = (size_t)k;
    static const uint8_t lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t cp = p[0] & lead_mask[k];
    for (int i = 1; i < k; i++)
        cp = (cp << 6) | (p[i] & 0x3F);
    return cp;
}

size_t ifd_utf8_put(uint8_t *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    size_t n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (size_t i = n - 1; i > 0; i--) {
        out[i] = (uint8_t)(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    out[0] = (uint8_t)(lead[n] | cp);
    return n;
}

size_t ifd_utf8_sanitize(char *out, const char *in, size_t n)
{
    const uint8_t *p = (const uint8_t *)in;
    size_t i = 0, o = 0;
    while (i < n) {
        int k = ifd_utf8_check(p + i, n - i);
        if (k > 0) {
            memcpy(out + o, in + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += k < 0 ? (size_t)-k : n - i; /* unfinished at the end: the rest */
        }
    }
    return o;
}

size_t ifd_utf8_count(const char *in, size_t n)
{
    const uint8_t *p = (const uint8_t *)in;
    size_t i = 0, chars = 0;
    while (i < n) {
        int k = ifd_utf8_check(p + i, n - i);
        /* the steps of ifd_utf8_sanitize: a character, or one replaced subpart */
        i += k > 0 ? (size_t)k : k < 0 ? (size_t)-k : n - i;
        chars++;
    }
    return chars;
}
