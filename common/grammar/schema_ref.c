/*
 * schema_ref.c — a JSON Schema's `$ref` resolved inside its own document,
 * for the converter (grammar_conv_schema.c, grammar_conv_merge.c) and the
 * check at the end (schema_check.c), which must read a reference the same
 * way. Nothing is fetched: a reference names the document itself or a
 * resource embedded in it, never another file.
 *
 * A reference is split at '#' into a URI and a fragment (RFC 3986). The URI,
 * when there is one, picks the resource: the document when it equals the
 * root's `$id` (draft-04: `id`) without its fragment, else the subschema
 * whose `$id` names it (both read against the root's `$id` by RFC 3986's
 * merge of paths, without dot segments). The fragment, percent-decoded,
 * is either empty (the resource), a JSON pointer ("/a/b~1c", resolved from
 * the resource) or a plain name: the subschema with `$anchor` that name
 * (2019-09+), or whose `$id` / `id` ends in "#name" (draft-04 to 07),
 * searched in the resource but not inside the resources it embeds, and
 * skipping the values of enum, const, default and examples (data, not
 * schemas); a name carried twice there names nothing (NULL: a 400). A name
 * the document's root resource lacks is looked for in the whole document
 * (the $ref may sit inside the embedded resource that has it) where exactly
 * one subschema carries it. A JSON pointer from the document's root ignores the `$id`s of the
 * subschemas it passes (as before this module: the base URI of a `$ref`
 * nested inside an embedded resource is not tracked). Reentrant; every
 * pointer returned is borrowed from doc.
 */
#include "grammar_conv_impl.h"

#include <stdbool.h>
#include <string.h>

#define MAX_WALK 512  /* nesting searched for an anchor or an $id */
#define MAX_URI  2048 /* longest URI compared */

/* The $id (or draft-04 id) string of s, or NULL. */
static const char *id_of(const json_t *s)
{
    const json_t *id = json_object_get(s, "$id");
    if (!json_is_string(id))
        id = json_object_get(s, "id");
    return json_is_string(id) ? json_string_value(id) : NULL;
}

static bool is_data_keyword(const char *k)
{
    return !strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "default") ||
           !strcmp(k, "examples");
}

/* rel (n bytes) read against base (RFC 3986 5.2.2 without dot segments)
 * into out; false when it does not fit. */
static bool merge_uri(const char *base, const char *rel, size_t n, char *out, size_t cap)
{
    size_t i = 0;
    while (i < n && rel[i] != ':' && rel[i] != '/' && rel[i] != '?' && rel[i] != '#')
        i++;
    bool absolute = i < n && rel[i] == ':' && i > 0;
    size_t keep = 0;
    if (!absolute && base) {
        size_t bl = strcspn(base, "#");
        if (n >= 2 && rel[0] == '/' && rel[1] == '/') { /* //authority: the scheme */
            const char *col = memchr(base, ':', bl);
            keep = col ? (size_t)(col - base) + 1 : 0;
        } else if (n && rel[0] == '/') { /* /path: the scheme and authority */
            const char *a = strstr(base, "://");
            const char *p = a && (size_t)(a - base) < bl ? memchr(a + 3, '/', bl - (size_t)(a + 3 - base)) : NULL;
            keep = p ? (size_t)(p - base) : bl;
        } else { /* path: the base up to its last '/' */
            keep = bl;
            while (keep && base[keep - 1] != '/')
                keep--;
        }
    }
    if (keep + n + 1 > cap)
        return false;
    if (keep) /* (base may be NULL with nothing kept) */
        memcpy(out, base, keep);
    memcpy(out + keep, rel, n);
    out[keep + n] = '\0';
    size_t h = strcspn(out, "#"); /* the fragment is not part of the resource's name */
    out[h] = '\0';
    return true;
}

/* The subschema (resource) whose $id, read against base, is uri. */
static const json_t *find_resource(const json_t *v, const char *base, const char *uri, int depth)
{
    if (depth > MAX_WALK)
        return NULL;
    const char *k;
    json_t *x;
    size_t i;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x)
        {
            const json_t *t = find_resource(x, base, uri, depth + 1);
            if (t)
                return t;
        }
        return NULL;
    }
    if (!json_is_object(v))
        return NULL;
    const char *id = id_of(v);
    char abs[MAX_URI];
    if (id && id[0] != '#' && merge_uri(base, id, strlen(id), abs, sizeof abs) &&
        !strcmp(abs, uri))
        return v;
    json_object_foreach((json_t *)v, k, x)
    {
        if (is_data_keyword(k) || !(json_is_object(x) || json_is_array(x)))
            continue;
        const json_t *t = find_resource(x, base, uri, depth + 1);
        if (t)
            return t;
    }
    return NULL;
}

/* Whether s starts a resource of its own (an $id that is not only a
 * fragment): its anchors are not its parent resource's. */
static bool is_resource(const json_t *s)
{
    const char *id = id_of(s);
    return id && id[0] != '#';
}

/* Counts in *n the subschemas of v with $anchor name or an $id / id ending
 * in "#name", the first in *found; scoped: not inside the resources that v
 * embeds (a subschema with an $id of its own other than v). */
static void find_anchor(const json_t *v, const char *name, bool scoped, int depth, unsigned *n,
                        const json_t **found)
{
    if (depth > MAX_WALK || *n > 1)
        return;
    const char *k;
    json_t *x;
    size_t i;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x) find_anchor(x, name, scoped, depth + 1, n, found);
        return;
    }
    if (!json_is_object(v) || (scoped && depth && is_resource(v)))
        return;
    const json_t *a = json_object_get(v, "$anchor");
    const char *id = id_of(v), *h = id ? strchr(id, '#') : NULL;
    if ((json_is_string(a) && !strcmp(json_string_value(a), name)) || (h && !strcmp(h + 1, name))) {
        if (!(*n)++)
            *found = v;
    }
    json_object_foreach((json_t *)v, k, x)
    {
        if (!is_data_keyword(k) && (json_is_object(x) || json_is_array(x)))
            find_anchor(x, name, scoped, depth + 1, n, found);
    }
}

/* The anchor name of the resource res: searched in res alone, else (a $ref
 * whose base URI is an embedded resource's, which is not tracked) in the
 * whole document when exactly one subschema there carries it. */
static const json_t *anchor(const json_t *doc, const json_t *res, const char *name)
{
    unsigned n = 0;
    const json_t *t = NULL;
    find_anchor(res, name, true, 0, &n, &t);
    if (n == 1)
        return t;
    if (n || res != doc)
        return NULL;
    find_anchor(doc, name, false, 0, &n, &t);
    return n == 1 ? t : NULL;
}

static int hex(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* The JSON pointer p (percent-decoded already) from cur. */
static const json_t *pointer(const json_t *cur, const char *p)
{
    while (*p) {
        if (*p != '/')
            return NULL;
        p++;
        char key[256];
        size_t k = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~') {
                if (*p == '0')
                    ch = '~';
                else if (*p == '1')
                    ch = '/';
                else
                    return NULL;
                p++;
            }
            if (k + 1 >= sizeof key)
                return NULL;
            key[k++] = ch;
        }
        key[k] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, key);
        } else if (json_is_array(cur)) {
            char *e;
            unsigned long i = strtoul(key, &e, 10);
            cur = *e || !k ? NULL : json_array_get(cur, i);
        } else {
            return NULL;
        }
        if (!cur)
            return NULL;
    }
    return cur;
}

const json_t *ifd__gconv_resolve(const json_t *doc, const char *ref)
{
    const char *hash = strchr(ref, '#');
    size_t ulen = hash ? (size_t)(hash - ref) : strlen(ref);
    const json_t *res = doc;
    if (ulen) {
        const char *root = id_of(doc);
        if (root && root[0] == '#')
            root = NULL;
        char uri[MAX_URI], rid[MAX_URI];
        if (!merge_uri(root, ref, ulen, uri, sizeof uri))
            return NULL;
        if (!(root && merge_uri(NULL, root, strlen(root), rid, sizeof rid) && !strcmp(rid, uri)))
            res = find_resource(doc, root, uri, 0);
        if (!res)
            return NULL;
    }
    /* the fragment, percent-decoded (RFC 6901 section 6: a pointer in a URI) */
    char frag[1024];
    size_t n = 0;
    for (const char *p = hash ? hash + 1 : ""; *p; p++) {
        char ch = *p;
        if (ch == '%') {
            int hi = hex(p[1]), lo = hi < 0 ? -1 : hex(p[2]);
            if (lo < 0)
                return NULL;
            ch = (char)(hi * 16 + lo);
            p += 2;
        }
        if (!ch || n + 1 >= sizeof frag)
            return NULL;
        frag[n++] = ch;
    }
    frag[n] = '\0';
    if (!n)
        return res;
    return frag[0] == '/' ? pointer(res, frag) : anchor(doc, res, frag);
}

const json_t *ifd__gconv_resource(const json_t *doc, const json_t *s)
{
    if (s == doc || !json_is_object(s) || !is_resource(s))
        return NULL;
    const char *root = id_of(doc), *id = id_of(s);
    if (root && root[0] == '#')
        root = NULL;
    char abs[MAX_URI], rid[MAX_URI];
    if (!merge_uri(root, id, strlen(id), abs, sizeof abs))
        return s;
    if (root && merge_uri(NULL, root, strlen(root), rid, sizeof rid) && !strcmp(abs, rid))
        return NULL; /* the document itself (a copy of its root, made by a merge) */
    const json_t *t = find_resource(doc, root, abs, 0);
    return t ? t : s;
}

const json_t *ifd__gconv_resource_cached(const json_t *doc, const json_t *s,
                                         ifd__gconv_res_seen_t *seen, unsigned *n)
{
    const char *id = json_is_object(s) ? id_of(s) : NULL;
    if (!id || id[0] == '#')
        return NULL;
    for (unsigned i = 0; i < *n && i < 16; i++) {
        if (seen[i].s != s)
            continue;
        const json_t *r = seen[i].res ? seen[i].res : doc;
        const char *rid = id_of(r);
        if (rid && !strcmp(rid, id))
            return seen[i].res;
    }
    const json_t *r = ifd__gconv_resource(doc, s);
    if (r != s) { /* (s itself, not found in doc, may be a copy soon freed) */
        seen[*n % 16].s = s, seen[*n % 16].res = r;
        ++*n;
    }
    return r;
}

const json_t *ifd__gconv_resolve_in(const json_t *doc, const json_t *res, const char *ref,
                                    bool *in_res)
{
    *in_res = false;
    if (res && res != doc && ref[0] == '#') {
        const json_t *t = ifd__gconv_resolve(res, ref);
        if (t) {
            *in_res = true;
            return t;
        }
    }
    return ifd__gconv_resolve(doc, ref);
}
