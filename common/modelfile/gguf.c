/*
 * gguf.c — the GGUF reader (see gguf.h).
 *
 * Parsing walks the image with a cursor that checks every read against the
 * end of the image before it happens; counts read from the file are never
 * trusted for an allocation until the bytes they promise have been shown to
 * fit in what is left of the file (each element takes at least one byte), so
 * a corrupt count cannot make us allocate or loop far beyond the file size.
 *
 * Values are stored as nodes in one flat table: a key's value is a node; an
 * array of strings or of arrays also gets one child node per element,
 * contiguous, so element i of any array is O(1). Numeric arrays need no
 * children: their elements are at fixed strides in the mapping.
 */
#include "gguf.h"
#include "error.h"
#include "hash.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IFD__GGUF_MAX_KEY_LEN 65535u
#define IFD__GGUF_MAX_NAME_LEN 4096u
#define IFD__GGUF_MAX_DEPTH 8

typedef struct {
    ifd_gguf_value_t val;
    uint64_t first_child; /* for STRING/ARRAY-element arrays: index of element 0's node */
} ifd__node_t;

typedef struct {
    char *key;
    uint64_t node;
} ifd__kv_t;

struct ifd_gguf {
    char *path;
    const uint8_t *base;
    size_t size;
    bool mapped;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;

    ifd__kv_t *kvs;
    uint64_t n_kv;
    ifd__node_t *nodes;
    uint64_t n_nodes, cap_nodes;
    ifd_gguf_tensor_t *tensors;
    uint64_t n_tensors;

    /* name -> index into kvs / tensors; empty until that part is parsed */
    ifd_hash_t kv_index;
    ifd_hash_t tensor_index;
};

typedef struct {
    ifd_gguf_t *g;
    size_t pos;
    char *err;
    size_t errlen;
} ifd__cur_t;

static int ifd__fail(ifd__cur_t *c, int code, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int ifd__fail(ifd__cur_t *c, int code, size_t at, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c->err && c->errlen) {
        snprintf(c->err, c->errlen, "%s: at byte %zu: %s", c->g->path, at, what);
    } else {
        IFD_ERROR("%s: at byte %zu: %s", c->g->path, at, what);
    }
    return code;
}

static size_t ifd__left(const ifd__cur_t *c)
{
    return c->g->size - c->pos;
}

static int ifd__need(ifd__cur_t *c, uint64_t n, const char *what)
{
    if (n > ifd__left(c))
        return ifd__fail(c, IFD_ETRUNC, c->pos,
                         "expected %s (%llu bytes) but only %zu bytes remain", what,
                         (unsigned long long)n, ifd__left(c));
    return 0;
}

static uint64_t ifd__le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int ifd__rd(ifd__cur_t *c, int n, uint64_t *out, const char *what)
{
    int rc = ifd__need(c, (uint64_t)n, what);
    if (rc)
        return rc;
    *out = ifd__le(c->g->base + c->pos, n);
    c->pos += (size_t)n;
    return 0;
}

static int ifd__rd_str(ifd__cur_t *c, ifd_str_t *out, uint64_t max_len, const char *what)
{
    size_t at = c->pos;
    uint64_t len;
    int rc = ifd__rd(c, 8, &len, what);
    if (rc)
        return rc;
    if (len > max_len)
        return ifd__fail(c, IFD_EFORMAT, at, "%s: length %llu exceeds the limit %llu", what,
                         (unsigned long long)len, (unsigned long long)max_len);
    rc = ifd__need(c, len, what);
    if (rc)
        return rc;
    out->ptr = (const char *)c->g->base + c->pos;
    out->len = (size_t)len;
    c->pos += (size_t)len;
    return 0;
}

static const int ifd__scalar_size[IFD_GGUF_TYPE_COUNT] = {
    [IFD_GGUF_UINT8] = 1,   [IFD_GGUF_INT8] = 1,    [IFD_GGUF_UINT16] = 2,
    [IFD_GGUF_INT16] = 2,   [IFD_GGUF_UINT32] = 4,  [IFD_GGUF_INT32] = 4,
    [IFD_GGUF_FLOAT32] = 4, [IFD_GGUF_BOOL] = 1,    [IFD_GGUF_STRING] = 0,
    [IFD_GGUF_ARRAY] = 0,   [IFD_GGUF_UINT64] = 8,  [IFD_GGUF_INT64] = 8,
    [IFD_GGUF_FLOAT64] = 8,
};

static const char *const ifd__type_names[IFD_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool",  "string", "array", "uint64", "int64", "float64",
};

static float ifd__f32_from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static double ifd__f64_from_bits(uint64_t b)
{
    double d;
    memcpy(&d, &b, 8);
    return d;
}

/* Decodes a scalar of type t at p (bounds already checked) into v. */
static void ifd__decode_scalar(ifd_gguf_type_t t, const uint8_t *p, ifd_gguf_value_t *v)
{
    v->type = t;
    switch (t) {
    case IFD_GGUF_UINT8:
    case IFD_GGUF_UINT16:
    case IFD_GGUF_UINT32:
    case IFD_GGUF_UINT64:
        v->v.u = ifd__le(p, ifd__scalar_size[t]);
        break;
    case IFD_GGUF_INT8:
        v->v.i = (int8_t)p[0];
        break;
    case IFD_GGUF_INT16:
        v->v.i = (int16_t)ifd__le(p, 2);
        break;
    case IFD_GGUF_INT32:
        v->v.i = (int32_t)ifd__le(p, 4);
        break;
    case IFD_GGUF_INT64:
        v->v.i = (int64_t)ifd__le(p, 8);
        break;
    case IFD_GGUF_FLOAT32:
        v->v.f = ifd__f32_from_bits((uint32_t)ifd__le(p, 4));
        break;
    case IFD_GGUF_FLOAT64:
        v->v.f = ifd__f64_from_bits(ifd__le(p, 8));
        break;
    case IFD_GGUF_BOOL:
        v->v.b = p[0] != 0;
        break;
    default:
        break;
    }
}

static int ifd__nodes_reserve(ifd__cur_t *c, uint64_t extra)
{
    ifd_gguf_t *g = c->g;
    if (extra > UINT64_MAX - g->n_nodes)
        return ifd__fail(c, IFD_EOVERFLOW, c->pos, "too many metadata values");
    uint64_t need = g->n_nodes + extra;
    if (need <= g->cap_nodes)
        return 0;
    uint64_t cap = g->cap_nodes ? g->cap_nodes : 256;
    while (cap < need)
        cap *= 2;
    if (cap > SIZE_MAX / sizeof(ifd__node_t))
        return ifd__fail(c, IFD_ENOMEM, c->pos, "too many metadata values");
    ifd__node_t *n = realloc(g->nodes, (size_t)cap * sizeof *n);
    if (!n)
        return ifd__fail(c, IFD_ENOMEM, c->pos, "out of memory for metadata");
    g->nodes = n;
    g->cap_nodes = cap;
    return 0;
}

/* Parses one value of type t into node `idx` (already reserved). */
static int ifd__parse_value(ifd__cur_t *c, ifd_gguf_type_t t, uint64_t idx, int depth);

static int ifd__parse_array(ifd__cur_t *c, uint64_t idx, int depth)
{
    size_t at = c->pos;
    uint64_t et, count;
    int rc;
    if ((rc = ifd__rd(c, 4, &et, "array element type")))
        return rc;
    if (et >= IFD_GGUF_TYPE_COUNT)
        return ifd__fail(c, IFD_EFORMAT, at,
                         "expected an array element type 0..12, found %llu",
                         (unsigned long long)et);
    if (depth >= IFD__GGUF_MAX_DEPTH)
        return ifd__fail(c, IFD_EFORMAT, at, "arrays nested deeper than %d",
                         IFD__GGUF_MAX_DEPTH);
    size_t count_at = c->pos;
    if ((rc = ifd__rd(c, 8, &count, "array element count")))
        return rc;
    /* Every element takes at least one byte (strings and arrays: 8 and 12). */
    uint64_t min_elem = ifd__scalar_size[et] ? (uint64_t)ifd__scalar_size[et]
                        : et == IFD_GGUF_STRING ? 8u : 12u;
    if (count > ifd__left(c) / min_elem)
        return ifd__fail(c, IFD_ETRUNC, count_at,
                         "array of %llu %s elements needs at least %llu bytes, %zu remain",
                         (unsigned long long)count, ifd__type_names[et],
                         (unsigned long long)(count > UINT64_MAX / min_elem
                                                  ? UINT64_MAX
                                                  : count * min_elem),
                         ifd__left(c));
    ifd_gguf_value_t *v = &c->g->nodes[idx].val;
    v->type = IFD_GGUF_ARRAY;
    v->v.arr.elem = (ifd_gguf_type_t)et;
    v->v.arr.count = count;
    v->v.arr.data = c->g->base + c->pos;
    v->v.arr.node = idx;
    c->g->nodes[idx].first_child = 0;
    if (ifd__scalar_size[et]) {
        uint64_t n = count * (uint64_t)ifd__scalar_size[et];
        if ((rc = ifd__need(c, n, "array elements")))
            return rc;
        if (et == IFD_GGUF_BOOL) {
            for (uint64_t i = 0; i < count; i++) {
                uint8_t b = c->g->base[c->pos + i];
                if (b > 1)
                    return ifd__fail(c, IFD_EFORMAT, c->pos + (size_t)i,
                                     "expected a bool (0 or 1), found %u", b);
            }
        }
        c->pos += (size_t)n;
        return 0;
    }
    /* Strings and nested arrays: one child node per element. */
    if ((rc = ifd__nodes_reserve(c, count)))
        return rc;
    uint64_t first = c->g->n_nodes;
    c->g->n_nodes += count;
    c->g->nodes[idx].first_child = first;
    for (uint64_t i = 0; i < count; i++) {
        if ((rc = ifd__parse_value(c, (ifd_gguf_type_t)et, first + i, depth + 1)))
            return rc;
    }
    return 0;
}

static int ifd__parse_value(ifd__cur_t *c, ifd_gguf_type_t t, uint64_t idx, int depth)
{
    int rc;
    if (t == IFD_GGUF_ARRAY)
        return ifd__parse_array(c, idx, depth);
    ifd_gguf_value_t *v = &c->g->nodes[idx].val;
    c->g->nodes[idx].first_child = 0;
    if (t == IFD_GGUF_STRING) {
        v->type = IFD_GGUF_STRING;
        ifd_str_t s;
        if ((rc = ifd__rd_str(c, &s, UINT64_MAX, "string value")))
            return rc;
        c->g->nodes[idx].val.v.s = s; /* nodes may not move here: reserved before */
        return 0;
    }
    int n = ifd__scalar_size[t];
    if ((rc = ifd__need(c, (uint64_t)n, ifd__type_names[t])))
        return rc;
    if (t == IFD_GGUF_BOOL && c->g->base[c->pos] > 1)
        return ifd__fail(c, IFD_EFORMAT, c->pos, "expected a bool (0 or 1), found %u",
                         c->g->base[c->pos]);
    ifd__decode_scalar(t, c->g->base + c->pos, v);
    c->pos += (size_t)n;
    return 0;
}

static const char *ifd__kv_name(const ifd_gguf_t *g, uint64_t i)
{
    return g->kvs[i].key;
}

static const char *ifd__tensor_name(const ifd_gguf_t *g, uint64_t i)
{
    return g->tensors[i].name;
}

/* The index of `name` (whose hash is hv) in h, or -1. */
static int64_t ifd__find(const ifd_hash_t *h, uint64_t hv, const char *name,
                         const char *(*name_of)(const ifd_gguf_t *, uint64_t), const ifd_gguf_t *g)
{
    uint32_t it = ifd_hash_first(h, hv);
    for (int32_t i; (i = ifd_hash_next(h, hv, &it)) >= 0;)
        if (strcmp(name_of(g, (uint64_t)i), name) == 0)
            return i;
    return -1;
}

static int64_t ifd__lookup(const ifd_hash_t *h, const char *name,
                           const char *(*name_of)(const ifd_gguf_t *, uint64_t),
                           const ifd_gguf_t *g)
{
    return ifd__find(h, ifd_hash_bytes(name, strlen(name)), name, name_of, g);
}

/* Indexes the n names name_of(g, 0 .. n-1) in h. Returns 0, IFD_ENOMEM, or
 * IFD_EINVAL past 2^30 names. Sets *dup to the first index whose name repeats
 * an earlier one (the index then stops there), or UINT64_MAX. */
static int ifd__build_index(ifd_hash_t *h, uint64_t n,
                            const char *(*name_of)(const ifd_gguf_t *, uint64_t),
                            const ifd_gguf_t *g, uint64_t *dup)
{
    *dup = UINT64_MAX;
    int rc = ifd_hash_init(h, (size_t)n);
    for (uint64_t i = 0; i < n && !rc; i++) {
        const char *name = name_of(g, i);
        uint64_t hv = ifd_hash_bytes(name, strlen(name));
        if (ifd__find(h, hv, name, name_of, g) >= 0) {
            *dup = i;
            break;
        }
        rc = i > INT32_MAX ? IFD_EINVAL : ifd_hash_insert(h, hv, (int32_t)i);
    }
    return rc;
}

static char *ifd__cstr(ifd_str_t s)
{
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = '\0';
    }
    return p;
}

/* The fixed header: magic, version and the two counts, which must be able to
 * fit in what is left of the file. */
static int ifd__parse_header(ifd__cur_t *c, uint64_t *n_tensors, uint64_t *n_kv)
{
    ifd_gguf_t *g = c->g;
    uint64_t magic, version;
    int rc;

    if ((rc = ifd__rd(c, 4, &magic, "the magic \"GGUF\"")))
        return rc;
    if (magic != IFD_GGUF_MAGIC)
        return ifd__fail(c, IFD_EFORMAT, 0,
                         "expected the magic \"GGUF\", found %02x %02x %02x %02x", g->base[0],
                         g->base[1], g->base[2], g->base[3]);
    if ((rc = ifd__rd(c, 4, &version, "the version")))
        return rc;
    if (version == 0x03000000u || version == 0x02000000u)
        return ifd__fail(c, IFD_EVERSION, 4, "big-endian GGUF files are not supported");
    if (version != 2 && version != 3)
        return ifd__fail(c, IFD_EVERSION, 4, "expected version 2 or 3, found %llu",
                         (unsigned long long)version);
    g->version = (uint32_t)version;
    if ((rc = ifd__rd(c, 8, n_tensors, "the tensor count")))
        return rc;
    if ((rc = ifd__rd(c, 8, n_kv, "the metadata count")))
        return rc;
    /* A key/value pair takes at least 8 + 1 + 4 + 1 bytes; a tensor info at
     * least 8 + 1 + 4 + 8 + 4 + 8. Counts that cannot fit are corrupt. */
    if (*n_kv > ifd__left(c) / 14)
        return ifd__fail(c, IFD_EFORMAT, 16, "metadata count %llu cannot fit in the file",
                         (unsigned long long)*n_kv);
    if (*n_tensors > ifd__left(c) / 33)
        return ifd__fail(c, IFD_EFORMAT, 8, "tensor count %llu cannot fit in the file",
                         (unsigned long long)*n_tensors);
    return 0;
}

/* The n_kv key/value pairs, their index (keys are unique) and the alignment
 * they may set. */
static int ifd__parse_kvs(ifd__cur_t *c, uint64_t n_kv)
{
    ifd_gguf_t *g = c->g;
    int rc;

    g->kvs = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kvs);
    if (!g->kvs)
        return ifd__fail(c, IFD_ENOMEM, c->pos, "out of memory");
    for (uint64_t i = 0; i < n_kv; i++) {
        size_t at = c->pos;
        ifd_str_t key;
        uint64_t t;
        if ((rc = ifd__rd_str(c, &key, IFD__GGUF_MAX_KEY_LEN, "a metadata key")))
            return rc;
        if (key.len == 0)
            return ifd__fail(c, IFD_EFORMAT, at, "metadata key %llu is empty",
                             (unsigned long long)i);
        if (memchr(key.ptr, '\0', key.len))
            return ifd__fail(c, IFD_EFORMAT, at, "metadata key %llu contains a NUL byte",
                             (unsigned long long)i);
        g->kvs[i].key = ifd__cstr(key);
        if (!g->kvs[i].key)
            return ifd__fail(c, IFD_ENOMEM, at, "out of memory");
        g->n_kv = i + 1;
        size_t type_at = c->pos;
        if ((rc = ifd__rd(c, 4, &t, "a value type")))
            return rc;
        if (t >= IFD_GGUF_TYPE_COUNT)
            return ifd__fail(c, IFD_EFORMAT, type_at,
                             "key '%s': expected a value type 0..12, found %llu", g->kvs[i].key,
                             (unsigned long long)t);
        if ((rc = ifd__nodes_reserve(c, 1)))
            return rc;
        uint64_t node = g->n_nodes++;
        g->kvs[i].node = node;
        if ((rc = ifd__parse_value(c, (ifd_gguf_type_t)t, node, 0)))
            return rc;
    }
    uint64_t dup;
    if ((rc = ifd__build_index(&g->kv_index, g->n_kv, ifd__kv_name, g, &dup)))
        return ifd__fail(c, rc, c->pos, "%s",
                         rc == IFD_ENOMEM ? "out of memory" : "too many metadata keys");
    if (dup != UINT64_MAX)
        return ifd__fail(c, IFD_EFORMAT, c->pos, "duplicate metadata key '%s'", g->kvs[dup].key);

    g->alignment = IFD_GGUF_DEFAULT_ALIGNMENT;
    const ifd_gguf_value_t *al = ifd_gguf_get(g, "general.alignment");
    if (al) {
        if (al->type != IFD_GGUF_UINT32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)) != 0)
            return ifd__fail(c, IFD_EFORMAT, c->pos,
                             "general.alignment must be a uint32 power of two");
        g->alignment = (uint32_t)al->v.u;
    }
    return 0;
}

/* Tensor info i: name, shape, type and data offset (not yet checked against
 * the end of the file). */
static int ifd__parse_tensor_info(ifd__cur_t *c, uint64_t i)
{
    ifd_gguf_t *g = c->g;
    ifd_gguf_tensor_t *t = &g->tensors[i];
    size_t at = c->pos;
    ifd_str_t name;
    uint64_t nd, type, off;
    int rc;

    if ((rc = ifd__rd_str(c, &name, IFD__GGUF_MAX_NAME_LEN, "a tensor name")))
        return rc;
    if (memchr(name.ptr, '\0', name.len))
        return ifd__fail(c, IFD_EFORMAT, at, "tensor %llu's name contains a NUL byte",
                         (unsigned long long)i);
    t->name = ifd__cstr(name);
    if (!t->name)
        return ifd__fail(c, IFD_ENOMEM, at, "out of memory");
    g->n_tensors = i + 1;
    size_t nd_at = c->pos;
    if ((rc = ifd__rd(c, 4, &nd, "the tensor's dimension count")))
        return rc;
    if (nd == 0 || nd > IFD_GGUF_MAX_DIMS)
        return ifd__fail(c, IFD_EFORMAT, nd_at, "tensor '%s': expected 1..4 dimensions, found %llu",
                         t->name, (unsigned long long)nd);
    t->n_dims = (uint32_t)nd;
    uint64_t nelem = 1;
    for (int d = 0; d < IFD_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint64_t)d >= nd)
            continue;
        size_t d_at = c->pos;
        if ((rc = ifd__rd(c, 8, &t->ne[d], "a tensor dimension")))
            return rc;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX / nelem)
            return ifd__fail(c, IFD_EFORMAT, d_at,
                             "tensor '%s': dimension %d is %llu (zero or overflowing)", t->name, d,
                             (unsigned long long)t->ne[d]);
        nelem *= t->ne[d];
    }
    size_t type_at = c->pos;
    if ((rc = ifd__rd(c, 4, &type, "the tensor's type")))
        return rc;
    if (!ifd_ggml_type_valid((uint32_t)type) || type > UINT32_MAX)
        return ifd__fail(c, IFD_EFORMAT, type_at, "tensor '%s': unknown ggml type %llu", t->name,
                         (unsigned long long)type);
    t->type = (ifd_ggml_type_t)type;
    uint64_t row;
    int rrc = ifd_ggml_row_bytes((uint32_t)type, t->ne[0], &row);
    if (rrc)
        return ifd__fail(c, IFD_EFORMAT, type_at,
                         "tensor '%s': row length %llu is not a multiple of %s's block of %u",
                         t->name, (unsigned long long)t->ne[0], ifd_ggml_type_name((uint32_t)type),
                         ifd_ggml_block_elems((uint32_t)type));
    uint64_t rows = nelem / t->ne[0];
    if (row && rows > UINT64_MAX / row)
        return ifd__fail(c, IFD_EFORMAT, type_at, "tensor '%s': size overflows", t->name);
    t->nbytes = row * rows;
    size_t off_at = c->pos;
    if ((rc = ifd__rd(c, 8, &off, "the tensor's data offset")))
        return rc;
    if (off % g->alignment)
        return ifd__fail(c, IFD_EFORMAT, off_at,
                         "tensor '%s': offset %llu is not a multiple of the alignment %u", t->name,
                         (unsigned long long)off, g->alignment);
    t->offset = off;
    return 0;
}

/* Where the tensor data starts; each tensor's bytes must lie inside the file.
 * Then the name index (names are unique). */
static int ifd__place_tensors(ifd__cur_t *c, uint64_t n_tensors)
{
    ifd_gguf_t *g = c->g;
    int rc;

    /* Tensor data starts at the next multiple of the alignment. Files with
     * no tensors may end right here, without the padding. */
    uint64_t pos = c->pos;
    uint64_t data = pos + (g->alignment - pos % g->alignment) % g->alignment;
    g->data_offset = data;
    if (n_tensors > 0 && data > g->size)
        return ifd__fail(c, IFD_ETRUNC, c->pos,
                         "expected tensor data to start at byte %llu, past the end (%zu)",
                         (unsigned long long)data, g->size);
    for (uint64_t i = 0; i < n_tensors; i++) {
        ifd_gguf_tensor_t *t = &g->tensors[i];
        uint64_t avail = g->size - data;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return ifd__fail(c, IFD_ETRUNC,
                             (size_t)(data + (t->offset < avail ? t->offset : avail)),
                             "tensor '%s': %llu bytes at data offset %llu run past the end "
                             "of the file (%llu data bytes)",
                             t->name, (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                             (unsigned long long)avail);
        t->data = g->base + data + t->offset;
    }
    uint64_t dup;
    if ((rc = ifd__build_index(&g->tensor_index, g->n_tensors, ifd__tensor_name, g, &dup)))
        return ifd__fail(c, rc, c->pos, "%s",
                         rc == IFD_ENOMEM ? "out of memory" : "too many tensors");
    if (dup != UINT64_MAX)
        return ifd__fail(c, IFD_EFORMAT, c->pos, "duplicate tensor name '%s'",
                         g->tensors[dup].name);
    return 0;
}

/* The whole file, in its order: header, metadata, tensor infos, data. */
static int ifd__parse(ifd__cur_t *c)
{
    ifd_gguf_t *g = c->g;
    uint64_t n_tensors = 0, n_kv = 0;
    int rc;

    if ((rc = ifd__parse_header(c, &n_tensors, &n_kv)) || (rc = ifd__parse_kvs(c, n_kv)))
        return rc;
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors)
        return ifd__fail(c, IFD_ENOMEM, c->pos, "out of memory");
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((rc = ifd__parse_tensor_info(c, i)))
            return rc;
    return ifd__place_tensors(c, n_tensors);
}

static int ifd__open_common(ifd_gguf_t *g, ifd_gguf_t **out, char *errbuf, size_t errlen)
{
    ifd__cur_t c = {g, 0, errbuf, errlen};
    int rc = ifd__parse(&c);
    if (rc) {
        ifd_gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int ifd_gguf_open_mem(ifd_gguf_t **out, const void *data, size_t size, const char *name,
                      char *errbuf, size_t errlen)
{
    ifd_gguf_t *g = calloc(1, sizeof *g);
    if (!g)
        return IFD_ENOMEM;
    g->path = strdup(name ? name : "<memory>");
    if (!g->path) {
        free(g);
        return IFD_ENOMEM;
    }
    g->base = data;
    g->size = size;
    return ifd__open_common(g, out, errbuf, errlen);
}

int ifd_gguf_open(ifd_gguf_t **out, const char *path, char *errbuf, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc;
    if (fd < 0) {
        rc = -errno;
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "%s: open: %s", path, strerror(-rc));
        else
            IFD_ERROR("%s: open: %s", path, strerror(-rc));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        close(fd);
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "%s: fstat: %s", path, strerror(-rc));
        else
            IFD_ERROR("%s: fstat: %s", path, strerror(-rc));
        return rc;
    }
    if (!S_ISREG(st.st_mode)) { /* a directory mmaps as ENODEV: say what it is instead */
        close(fd);
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "%s: %s, not a GGUF file", path,
                     S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        else
            IFD_ERROR("%s: not a regular GGUF file", path);
        return IFD_EINVAL;
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *base = NULL;
    if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = -errno;
            close(fd);
            if (errbuf && errlen)
                snprintf(errbuf, errlen, "%s: mmap(%zu): %s", path, size, strerror(-rc));
            else
                IFD_ERROR("%s: mmap(%zu): %s", path, size, strerror(-rc));
            return rc;
        }
        base = m;
    }
    close(fd);
    ifd_gguf_t *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        if (base)
            munmap((void *)base, size);
        return IFD_ENOMEM;
    }
    g->base = base;
    g->size = size;
    g->mapped = base != NULL;
    return ifd__open_common(g, out, errbuf, errlen);
}

void ifd_gguf_close(ifd_gguf_t *g)
{
    if (!g)
        return;
    for (uint64_t i = 0; i < g->n_kv; i++)
        free(g->kvs[i].key);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kvs);
    free(g->tensors);
    free(g->nodes);
    ifd_hash_close(&g->kv_index);
    ifd_hash_close(&g->tensor_index);
    if (g->mapped)
        munmap((void *)g->base, g->size);
    free(g->path);
    free(g);
}

/* Whole pages of [off, end) of the mapping; advice: a failure costs only RSS. */
static void ifd__release(const ifd_gguf_t *g, uint64_t off, uint64_t end)
{
    if (!g || !g->mapped || end > g->size || off >= end)
        return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)g->base + off + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)g->base + end) & ~(page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void ifd_gguf_release_tensor_pages(const ifd_gguf_t *g)
{
    if (g)
        ifd__release(g, g->data_offset, g->size);
}

void ifd_gguf_release_tensor(const ifd_gguf_t *g, const ifd_gguf_tensor_t *t)
{
    if (g && t)
        ifd__release(g, g->data_offset + t->offset, g->data_offset + t->offset + t->nbytes);
}

const char *ifd_gguf_path(const ifd_gguf_t *g)
{
    return g->path;
}

uint32_t ifd_gguf_version(const ifd_gguf_t *g)
{
    return g->version;
}

uint32_t ifd_gguf_alignment(const ifd_gguf_t *g)
{
    return g->alignment;
}

uint64_t ifd_gguf_data_offset(const ifd_gguf_t *g)
{
    return g->data_offset;
}

uint64_t ifd_gguf_file_size(const ifd_gguf_t *g)
{
    return g->size;
}

uint64_t ifd_gguf_kv_count(const ifd_gguf_t *g)
{
    return g->n_kv;
}

const char *ifd_gguf_kv_key(const ifd_gguf_t *g, uint64_t i)
{
    return i < g->n_kv ? g->kvs[i].key : NULL;
}

const ifd_gguf_value_t *ifd_gguf_kv_value(const ifd_gguf_t *g, uint64_t i)
{
    return i < g->n_kv ? &g->nodes[g->kvs[i].node].val : NULL;
}

int64_t ifd_gguf_find_key(const ifd_gguf_t *g, const char *key)
{
    return ifd__lookup(&g->kv_index, key, ifd__kv_name, g);
}

const ifd_gguf_value_t *ifd_gguf_get(const ifd_gguf_t *g, const char *key)
{
    int64_t i = ifd_gguf_find_key(g, key);
    return i < 0 ? NULL : ifd_gguf_kv_value(g, (uint64_t)i);
}

/* Reads any integer value as a signed 128-bit-safe pair (neg, magnitude). */
static int ifd__as_int(const ifd_gguf_value_t *v, bool *neg, uint64_t *mag)
{
    switch (v->type) {
    case IFD_GGUF_UINT8:
    case IFD_GGUF_UINT16:
    case IFD_GGUF_UINT32:
    case IFD_GGUF_UINT64:
        *neg = false;
        *mag = v->v.u;
        return 0;
    case IFD_GGUF_INT8:
    case IFD_GGUF_INT16:
    case IFD_GGUF_INT32:
    case IFD_GGUF_INT64:
        *neg = v->v.i < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)v->v.i : (uint64_t)v->v.i;
        return 0;
    default:
        return IFD_ETYPE;
    }
}

static int ifd__get_int(const ifd_gguf_t *g, const char *key, bool *neg, uint64_t *mag)
{
    const ifd_gguf_value_t *v = ifd_gguf_get(g, key);
    if (!v)
        return IFD_ENOTFOUND;
    return ifd__as_int(v, neg, mag);
}

int ifd_gguf_get_u64(const ifd_gguf_t *g, const char *key, uint64_t *out)
{
    bool neg;
    uint64_t m;
    int rc = ifd__get_int(g, key, &neg, &m);
    if (rc)
        return rc;
    if (neg && m)
        return IFD_ERANGE;
    *out = m;
    return 0;
}

int ifd_gguf_get_u32(const ifd_gguf_t *g, const char *key, uint32_t *out)
{
    uint64_t v;
    int rc = ifd_gguf_get_u64(g, key, &v);
    if (rc)
        return rc;
    if (v > UINT32_MAX)
        return IFD_ERANGE;
    *out = (uint32_t)v;
    return 0;
}

int ifd_gguf_get_i64(const ifd_gguf_t *g, const char *key, int64_t *out)
{
    bool neg;
    uint64_t m;
    int rc = ifd__get_int(g, key, &neg, &m);
    if (rc)
        return rc;
    if (!neg && m > (uint64_t)INT64_MAX)
        return IFD_ERANGE;
    if (neg && m > (uint64_t)INT64_MAX + 1)
        return IFD_ERANGE;
    *out = neg ? (int64_t)(0 - m) : (int64_t)m;
    return 0;
}

int ifd_gguf_get_i32(const ifd_gguf_t *g, const char *key, int32_t *out)
{
    int64_t v;
    int rc = ifd_gguf_get_i64(g, key, &v);
    if (rc)
        return rc;
    if (v < INT32_MIN || v > INT32_MAX)
        return IFD_ERANGE;
    *out = (int32_t)v;
    return 0;
}

int ifd_gguf_get_f64(const ifd_gguf_t *g, const char *key, double *out)
{
    const ifd_gguf_value_t *v = ifd_gguf_get(g, key);
    if (!v)
        return IFD_ENOTFOUND;
    if (v->type != IFD_GGUF_FLOAT32 && v->type != IFD_GGUF_FLOAT64)
        return IFD_ETYPE;
    *out = v->v.f;
    return 0;
}

int ifd_gguf_get_f32(const ifd_gguf_t *g, const char *key, float *out)
{
    double d;
    int rc = ifd_gguf_get_f64(g, key, &d);
    if (rc)
        return rc;
    *out = (float)d;
    return 0;
}

int ifd_gguf_get_bool(const ifd_gguf_t *g, const char *key, bool *out)
{
    const ifd_gguf_value_t *v = ifd_gguf_get(g, key);
    if (!v)
        return IFD_ENOTFOUND;
    if (v->type != IFD_GGUF_BOOL)
        return IFD_ETYPE;
    *out = v->v.b;
    return 0;
}

int ifd_gguf_get_str(const ifd_gguf_t *g, const char *key, ifd_str_t *out)
{
    const ifd_gguf_value_t *v = ifd_gguf_get(g, key);
    if (!v)
        return IFD_ENOTFOUND;
    if (v->type != IFD_GGUF_STRING)
        return IFD_ETYPE;
    *out = v->v.s;
    return 0;
}

int ifd_gguf_get_arr(const ifd_gguf_t *g, const char *key, const ifd_gguf_value_t **out)
{
    const ifd_gguf_value_t *v = ifd_gguf_get(g, key);
    if (!v)
        return IFD_ENOTFOUND;
    if (v->type != IFD_GGUF_ARRAY)
        return IFD_ETYPE;
    *out = v;
    return 0;
}

int ifd_gguf_arr_get(const ifd_gguf_t *g, const ifd_gguf_value_t *arr, uint64_t i,
                     ifd_gguf_value_t *out)
{
    if (!arr || arr->type != IFD_GGUF_ARRAY || arr->v.arr.node >= g->n_nodes)
        return IFD_ETYPE;
    if (i >= arr->v.arr.count)
        return IFD_ERANGE;
    ifd_gguf_type_t et = arr->v.arr.elem;
    if (ifd__scalar_size[et]) {
        ifd__decode_scalar(et, (const uint8_t *)arr->v.arr.data + i * (uint64_t)ifd__scalar_size[et],
                           out);
        return 0;
    }
    *out = g->nodes[g->nodes[arr->v.arr.node].first_child + i].val;
    return 0;
}

int ifd_gguf_arr_str(const ifd_gguf_t *g, const ifd_gguf_value_t *arr, uint64_t i,
                     ifd_str_t *out)
{
    if (!arr || arr->type != IFD_GGUF_ARRAY || arr->v.arr.elem != IFD_GGUF_STRING)
        return IFD_ETYPE;
    ifd_gguf_value_t v;
    int rc = ifd_gguf_arr_get(g, arr, i, &v);
    if (rc)
        return rc;
    *out = v.v.s;
    return 0;
}

uint64_t ifd_gguf_tensor_count(const ifd_gguf_t *g)
{
    return g->n_tensors;
}

const ifd_gguf_tensor_t *ifd_gguf_tensor(const ifd_gguf_t *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const ifd_gguf_tensor_t *ifd_gguf_find_tensor(const ifd_gguf_t *g, const char *name)
{
    int64_t i = ifd__lookup(&g->tensor_index, name, ifd__tensor_name, g);
    return i < 0 ? NULL : &g->tensors[i];
}
