/*
 * dataurl.h — the bytes of a base64 `data:` URL, as OpenAI clients send an
 * image (`data:image/png;base64,iVBOR…`). The declared media type is handed
 * back for messages only: the image's format is sniffed from the bytes
 * (image.h), so a wrong type with real image bytes still works.
 *
 * Threading: reentrant.
 */
#ifndef IFD_IMAGE_DATAURL_H
#define IFD_IMAGE_DATAURL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decodes `url` (len bytes, no NUL needed): "data:" [media type and
 * parameters] ";base64," then standard base64 (RFC 4648 alphabet, '='
 * padding optional, no whitespace). The decoded size is known from the
 * text's length and checked against max_bytes before anything is allocated.
 * On success *out is malloc'd (the caller frees it), *out_len its size, and
 * *mime / *mime_len the media type inside url (may be empty).
 * Returns 0; IFD_EFORMAT for a URL that is not a base64 data URL or a bad
 * character (the message names its offset); IFD_ETOOBIG; IFD_ENOMEM.
 */
int ifd_image_data_url(const char *url, size_t len, size_t max_bytes, uint8_t **out,
                       size_t *out_len, const char **mime, size_t *mime_len, char *errbuf,
                       size_t errlen);

/*
 * The other way: "data:" mime ";base64," and the base64 of data[0..len)
 * (standard alphabet, '=' padding), NUL-terminated, into *out (malloc'd:
 * the caller frees it). 0 or IFD_ENOMEM (*out NULL).
 */
int ifd_image_data_url_encode(const void *data, size_t len, const char *mime, char **out);

#endif
