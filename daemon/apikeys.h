/*
 * apikeys.h — the API keys TCP clients authenticate with, each with a name:
 * the identity that owns what its holder stores (respstore.h), "key:NAME".
 *
 * Sources (ifd_apikeys_load): the api_key_file setting, else api_key (one
 * key, named "default"). The file holds one key per line:
 *
 *     # comment lines and blank lines are ignored
 *     alice  sk-4f9c…        NAME KEY: the key's name, then the key
 *     sk-77ab…               a bare KEY: named by its line number ("2")
 *
 * Fields are separated by spaces or tabs; a line ending in CR LF is read
 * without the CR. A name is 1 to 64 bytes, a key 1 to 511, neither with a
 * space or a control byte (a Bearer token cannot carry them, so a key
 * holding one would lock its holder out). Two lines may share a name (one
 * identity with two keys, as while rotating a key), never a key. A file
 * with no key, a line with more than two fields or a bad byte is an error
 * naming the file and the line. A file of one bare key on its first line —
 * the format before names — keeps working.
 *
 * Ownership: a key set is one allocation (ifd_apikeys_destroy); the names
 * ifd_apikeys_match returns live as long as it. Threading: load and parse
 * anywhere; a set is read-only once made, the daemon's lives on its loop
 * (replaced as a whole on reload).
 */
#ifndef IFD_DAEMON_APIKEYS_H
#define IFD_DAEMON_APIKEYS_H

#include "config.h"

#include <stddef.h>

typedef struct ifd_apikeys ifd_apikeys_t;

#define IFD_APIKEY_MAX       511       /* bytes of one key */
#define IFD_APIKEY_NAME_MAX  64        /* bytes of one name */
#define IFD_APIKEYS_FILE_MAX (1 << 20) /* bytes of api_key_file */

/* The keys of a key file's text (len bytes, not NUL-terminated), named
 * as above. 0; IFD_EINVAL with err saying why and on which line (from
 * line 1); IFD_ENOMEM. */
int ifd_apikeys_parse(const char *text, size_t len, ifd_apikeys_t **out, char *err, size_t errlen);

/* One key named "default" (the api_key setting). 0, IFD_EINVAL (err), IFD_ENOMEM. */
int ifd_apikeys_one(const char *key, ifd_apikeys_t **out, char *err, size_t errlen);

/* The keys cfg sets: api_key_file when set, else api_key; *out NULL when
 * neither is. Failures are logged (naming the setting and the file): 0,
 * -errno (the file cannot be read), IFD_ETOOBIG (over IFD_APIKEYS_FILE_MAX),
 * IFD_EINVAL, IFD_ENOMEM. */
int ifd_apikeys_load(const ifd_config_t *cfg, ifd_apikeys_t **out);

/* The name of the key an Authorization header value carries ("Bearer KEY",
 * the scheme's case ignored), or NULL (no header, another scheme, no such
 * key; k NULL). Every key is compared, each in time constant in its own
 * length, whether or not an earlier one matched. */
const char *ifd_apikeys_match(const ifd_apikeys_t *k, const char *authorization);

/* Keys in k (0 for NULL). */
size_t ifd_apikeys_count(const ifd_apikeys_t *k);

void ifd_apikeys_destroy(ifd_apikeys_t *k); /* NULL is fine */

#endif
