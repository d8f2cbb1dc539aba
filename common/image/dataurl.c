/*
 * dataurl.c — base64 data URLs (dataurl.h). One pass over the text with a
 * 256-entry table; the output size (3 bytes per 4 characters, less padding)
 * is bounded before the allocation.
 */
#include "dataurl.h"

#include "error.h"
#include "image_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int8_t ifd__b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return (int8_t)(c - 'A');
    if (c >= 'a' && c <= 'z')
        return (int8_t)(c - 'a' + 26);
    if (c >= '0' && c <= '9')
        return (int8_t)(c - '0' + 52);
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int ifd_image_data_url(const char *url, size_t len, size_t max_bytes, uint8_t **out,
                       size_t *out_len, const char **mime, size_t *mime_len, char *errbuf,
                       size_t errlen)
{
    static const char b64tag[] = ";base64,";
    *out = NULL;
    *out_len = 0;
    if (len < 5 || strncasecmp(url, "data:", 5) != 0)
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                               "not a data URL: only 'data:image/...;base64,...' is accepted");
    const char *comma = memchr(url, ',', len);
    size_t hdr = comma ? (size_t)(comma - url) + 1 : 0;
    if (!comma || hdr < 5 + sizeof b64tag - 1 ||
        strncasecmp(comma + 1 - (sizeof b64tag - 1), b64tag, sizeof b64tag - 1) != 0)
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                               "data URL is not base64: expected 'data:<type>;base64,<data>'");
    if (mime) {
        *mime = url + 5;
        /* the type ends at its first parameter */
        const char *semi = memchr(url + 5, ';', hdr - 5);
        *mime_len = (size_t)(semi - (url + 5));
    }
    const char *b = url + hdr;
    size_t n = len - hdr;
    while (n && b[n - 1] == '=' && len - hdr - n < 2)
        n--;
    if (n % 4 == 1)
        return ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                               "data URL: base64 data has a bad length (%zu characters)",
                               len - hdr);
    size_t size = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    if (size > max_bytes)
        return ifd__image_fail(errbuf, errlen, IFD_ETOOBIG,
                               "data URL holds %zu bytes: over the limit of %zu", size, max_bytes);
    uint8_t *o = malloc(size ? size : 1);
    if (!o)
        return ifd__image_fail(errbuf, errlen, IFD_ENOMEM, "data URL: out of memory");
    uint32_t acc = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        int8_t v = ifd__b64_value((unsigned char)b[i]);
        if (v < 0) {
            free(o);
            return ifd__image_fail(errbuf, errlen, IFD_EFORMAT,
                                   "data URL: invalid base64 character at offset %zu", hdr + i);
        }
        acc = acc << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            o[w++] = (uint8_t)(acc >> 16);
            o[w++] = (uint8_t)(acc >> 8);
            o[w++] = (uint8_t)acc;
            acc = 0;
        }
    }
    if (n % 4 == 2) {
        o[w++] = (uint8_t)(acc >> 4);
    } else if (n % 4 == 3) {
        o[w++] = (uint8_t)(acc >> 10);
        o[w++] = (uint8_t)(acc >> 2);
    }
    IFD_ASSERT(w == size);
    *out = o;
    *out_len = size;
    return 0;
}

int ifd_image_data_url_encode(const void *data, size_t len, const char *mime, char **out)
{
    static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *b = data;
    size_t ml = strlen(mime);
    *out = malloc(5 + ml + 8 + (len + 2) / 3 * 4 + 1);
    if (!*out)
        return IFD_ENOMEM;
    char *o = *out;
    memcpy(o, "data:", 5);
    memcpy(o + 5, mime, ml);
    memcpy(o + 5 + ml, ";base64,", 8);
    o += 5 + ml + 8;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < len ? b[i + 2] : 0);
        *o++ = k[v >> 18 & 63];
        *o++ = k[v >> 12 & 63];
        *o++ = i + 1 < len ? k[v >> 6 & 63] : '=';
        *o++ = i + 2 < len ? k[v & 63] : '=';
    }
    *o = '\0';
    return 0;
}
