/*
 * apikeys.c — see apikeys.h. A set is an array of (name, key) held in fixed
 * buffers, so a set is one allocation and a name outlives nothing.
 */
#include "apikeys.h"

#include "error.h"
#include "log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    char name[IFD_APIKEY_NAME_MAX + 1];
    char key[IFD_APIKEY_MAX + 1];
    size_t key_len;
} ifd__apikey_t;

struct ifd_apikeys {
    size_t n;
    ifd__apikey_t v[];
};

void ifd_apikeys_destroy(ifd_apikeys_t *k)
{
    free(k);
}

size_t ifd_apikeys_count(const ifd_apikeys_t *k)
{
    return k ? k->n : 0;
}

/* A byte no Bearer token (nor a name in the owner's string and the logs)
 * may carry: whitespace and control characters. */
static bool ifd__bad_byte(unsigned char ch)
{
    return ch <= 0x20 || ch == 0x7f;
}

/* Checks one field (what: "API key" or "key name"); 0 or IFD_EINVAL with
 * err. at: "line N: " or "". */
static int ifd__check_field(const char *what, const char *at, const char *s, size_t n, size_t max,
                            char *err, size_t errlen)
{
    if (n > max) {
        snprintf(err, errlen, "%sthe %s is longer than %zu bytes", at, what, max);
        return IFD_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ifd__bad_byte(ch)) {
            snprintf(err, errlen,
                     "%sthe %s contains %s (byte 0x%02x at %zu): a Bearer token cannot carry "
                     "it, so no client could authenticate",
                     at, what, ch == ' ' ? "a space" : "whitespace or a control character", ch, i);
            return IFD_EINVAL;
        }
    }
    return 0;
}

/* Splits line[0..n) into at most 3 fields separated by spaces and tabs;
 * returns how many there are (3: three or more). */
static int ifd__fields(const char *line, size_t n, const char *f[3], size_t fl[3])
{
    int k = 0;
    size_t i = 0;
    while (i < n && k < 3) {
        while (i < n && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i == n)
            break;
        f[k] = line + i;
        while (i < n && line[i] != ' ' && line[i] != '\t')
            i++;
        fl[k] = (size_t)(line + i - f[k]);
        k++;
    }
    return k;
}

/* Adds line `no`'s fields to k (room made by the caller). 0 or IFD_EINVAL. */
static int ifd__add_line(ifd_apikeys_t *k, size_t no, const char *f[3], const size_t fl[3], int nf,
                         char *err, size_t errlen)
{
    char at[48];
    snprintf(at, sizeof at, "line %zu: ", no);
    if (nf > 2) {
        snprintf(err, errlen,
                 "%sexpected 'NAME KEY' or 'KEY', but found more than two fields (an API key "
                 "cannot contain a space)",
                 at);
        return IFD_EINVAL;
    }
    const char *key = f[nf - 1];
    size_t kl = fl[nf - 1];
    int rc = ifd__check_field("API key", at, key, kl, IFD_APIKEY_MAX, err, errlen);
    if (!rc && nf == 2)
        rc = ifd__check_field("key name", at, f[0], fl[0], IFD_APIKEY_NAME_MAX, err, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; i < k->n; i++) {
        if (k->v[i].key_len == kl && !memcmp(k->v[i].key, key, kl)) {
            snprintf(err, errlen,
                     "%sthe same API key as the one named '%s' (each key names one "
                     "identity)",
                     at, k->v[i].name);
            return IFD_EINVAL;
        }
    }
    ifd__apikey_t *e = &k->v[k->n++];
    memcpy(e->key, key, kl);
    e->key[kl] = '\0';
    e->key_len = kl;
    if (nf == 2) {
        memcpy(e->name, f[0], fl[0]);
        e->name[fl[0]] = '\0';
    } else {
        snprintf(e->name, sizeof e->name, "%zu", no);
    }
    return 0;
}

int ifd_apikeys_parse(const char *text, size_t len, ifd_apikeys_t **out, char *err, size_t errlen)
{
    *out = NULL;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    ifd_apikeys_t *k = malloc(sizeof *k + lines * sizeof k->v[0]);
    if (!k)
        return IFD_ENOMEM;
    k->n = 0;
    size_t no = 0;
    for (const char *p = text, *end = text + len; p < end || no == 0;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        size_t n = (size_t)(le - p);
        no++;
        if (n && p[n - 1] == '\r')
            n--;
        const char *f[3];
        size_t fl[3];
        int nf = ifd__fields(p, n, f, fl);
        if (nf > 0 && f[0][0] != '#') {
            int rc = ifd__add_line(k, no, f, fl, nf, err, errlen);
            if (rc) {
                free(k);
                return rc;
            }
        }
        p = nl ? nl + 1 : end;
        if (!nl)
            break;
    }
    if (!k->n) {
        snprintf(err, errlen, "no API key in it (only blank lines and comments)");
        free(k);
        return IFD_EINVAL;
    }
    *out = k;
    return 0;
}

int ifd_apikeys_one(const char *key, ifd_apikeys_t **out, char *err, size_t errlen)
{
    *out = NULL;
    size_t kl = strlen(key);
    int rc = kl ? ifd__check_field("API key", "", key, kl, IFD_APIKEY_MAX, err, errlen) : 0;
    if (!kl) {
        snprintf(err, errlen, "the API key is empty");
        rc = IFD_EINVAL;
    }
    if (rc)
        return rc;
    ifd_apikeys_t *k = malloc(sizeof *k + sizeof k->v[0]);
    if (!k)
        return IFD_ENOMEM;
    k->n = 1;
    snprintf(k->v[0].name, sizeof k->v[0].name, "default");
    memcpy(k->v[0].key, key, kl + 1);
    k->v[0].key_len = kl;
    *out = k;
    return 0;
}

/* The whole of path into *text (malloc'ed, *len bytes). 0, -errno, IFD_ETOOBIG,
 * IFD_ENOMEM; logged. */
static int ifd__read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        IFD_ERROR("api_key_file %s: %s", path, strerror(e));
        return -e;
    }
    char *buf = malloc(IFD_APIKEYS_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, IFD_APIKEYS_FILE_MAX + 1, f) : 0;
    int rc = !buf ? IFD_ENOMEM : ferror(f) ? -EIO : n > IFD_APIKEYS_FILE_MAX ? IFD_ETOOBIG : 0;
    fclose(f);
    if (rc) {
        IFD_ERROR("api_key_file %s: %s", path,
                  rc == IFD_ETOOBIG ? "larger than 1 MiB" : ifd_strerror(rc));
        free(buf);
        return rc;
    }
    *text = buf;
    *len = n;
    return 0;
}

int ifd_apikeys_load(const ifd_config_t *cfg, ifd_apikeys_t **out)
{
    char err[256] = "";
    int rc;
    *out = NULL;
    if (cfg->api_key_file && *cfg->api_key_file) {
        char *text = NULL;
        size_t len = 0;
        if ((rc = ifd__read_file(cfg->api_key_file, &text, &len)))
            return rc;
        rc = ifd_apikeys_parse(text, len, out, err, sizeof err);
        free(text);
        if (rc)
            IFD_ERROR("api_key_file %s: %s", cfg->api_key_file,
                      rc == IFD_ENOMEM ? ifd_strerror(rc) : err);
        return rc;
    }
    if (!cfg->api_key || !*cfg->api_key)
        return 0;
    if ((rc = ifd_apikeys_one(cfg->api_key, out, err, sizeof err)))
        IFD_ERROR("api_key: %s", rc == IFD_ENOMEM ? ifd_strerror(rc) : err);
    return rc;
}

const char *ifd_apikeys_match(const ifd_apikeys_t *k, const char *authorization)
{
    static const char bearer[] = "Bearer ";
    if (!k || !authorization || strncasecmp(authorization, bearer, sizeof bearer - 1) != 0)
        return NULL;
    const char *s = authorization + sizeof bearer - 1;
    while (*s == ' ')
        s++;
    size_t sl = strlen(s);
    const char *found = NULL;
    for (size_t j = 0; j < k->n; j++) {
        const ifd__apikey_t *e = &k->v[j];
        /* constant time in the key's length: a mismatch early in the key
         * takes as long as one late in it */
        unsigned char diff = (unsigned char)(sl != e->key_len);
        for (size_t i = 0; i < e->key_len; i++)
            diff |= (unsigned char)(e->key[i] ^ (i < sl ? s[i] : 0));
        if (diff == 0 && !found)
            found = e->name;
    }
    return found;
}
