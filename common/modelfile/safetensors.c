/*
 * safetensors.c — the safetensors reader (see safetensors.h).
 *
 * A shard is: u64 header length N (little-endian), N bytes of JSON, then
 * the data section. Nothing in the header is trusted: the length is checked
 * against the file size before the JSON is parsed, and every tensor's
 * offsets against the data section's size and against each other (sorted by
 * start, each must end where or before the next begins) before a data
 * pointer is formed.
 */
#include "safetensors.h"
#include "arena.h"
#include "error.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IFD__ST_MAX_HEADER (100u << 20)
#define IFD__ST_INDEX      "model.safetensors.index.json"
#define IFD__ST_SINGLE     "model.safetensors"

typedef struct {
    char *path;
    void *map;
    size_t size;
} ifd__shard_t;

struct ifd_safetensors {
    ifd__shard_t *shards;
    size_t n_shards;
    ifd_st_tensor_t *tensors; /* sorted by name after open */
    size_t n_tensors, cap_tensors;
    uint64_t total_bytes;
};

typedef struct {
    char *err;
    size_t errlen;
} ifd__sterr_t;

static int ifd__st_fail(ifd__sterr_t *e, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int ifd__st_fail(ifd__sterr_t *e, int rc, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (e->err && e->errlen)
        snprintf(e->err, e->errlen, "%s", msg);
    else
        IFD_ERROR("%s", msg);
    return rc;
}

/* name, element size, ggml id (IFD_ST_UNSUPPORTED: validated, not loadable) */
static const struct {
    const char *name;
    uint8_t size;
    uint32_t ggml;
} ifd__st_dtypes[] = {
    {"F32", 4, 0},
    {"F16", 2, 1},
    {"BF16", 2, 30},
    {"F64", 8, IFD_ST_UNSUPPORTED},
    {"I64", 8, IFD_ST_UNSUPPORTED},
    {"U64", 8, IFD_ST_UNSUPPORTED},
    {"I32", 4, IFD_ST_UNSUPPORTED},
    {"U32", 4, IFD_ST_UNSUPPORTED},
    {"I16", 2, IFD_ST_UNSUPPORTED},
    {"U16", 2, IFD_ST_UNSUPPORTED},
    {"I8", 1, IFD_ST_UNSUPPORTED},
    {"U8", 1, IFD_ST_UNSUPPORTED},
    {"BOOL", 1, IFD_ST_UNSUPPORTED},
    {"F8_E4M3", 1, IFD_ST_UNSUPPORTED},
    {"F8_E5M2", 1, IFD_ST_UNSUPPORTED},
};

size_t ifd_safetensors_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof ifd__st_dtypes / sizeof ifd__st_dtypes[0]; i++)
        if (strcmp(dtype, ifd__st_dtypes[i].name) == 0)
            return ifd__st_dtypes[i].size;
    return 0;
}

static uint32_t ifd__st_ggml(const char *dtype)
{
    for (size_t i = 0; i < sizeof ifd__st_dtypes / sizeof ifd__st_dtypes[0]; i++)
        if (strcmp(dtype, ifd__st_dtypes[i].name) == 0)
            return ifd__st_dtypes[i].ggml;
    return IFD_ST_UNSUPPORTED;
}

static int ifd__st_map(ifd__sterr_t *e, const char *path, void **map, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        return ifd__st_fail(e, rc, "%s: %s", path, strerror(-rc));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int rc = -errno;
        close(fd);
        return ifd__st_fail(e, rc, "%s: fstat: %s", path, strerror(-rc));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ifd__st_fail(e, IFD_EFORMAT, "%s: not a regular file", path);
    }
    *size = (size_t)sb.st_size;
    *map = NULL;
    if (*size > 0) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int rc = -errno;
            close(fd);
            return ifd__st_fail(e, rc, "%s: mmap(%zu): %s", path, *size, strerror(-rc));
        }
        *map = m;
    }
    close(fd);
    return 0;
}

static int ifd__st_push(ifd_safetensors_t *st, ifd_st_tensor_t *t)
{
    ifd_st_tensor_t *p = ifd_grow(st->tensors, st->n_tensors, &st->cap_tensors, sizeof *p, 64);
    if (!p)
        return IFD_ENOMEM;
    st->tensors = p;
    st->tensors[st->n_tensors++] = *t;
    return 0;
}

static int ifd__st_cmp_begin(const void *a, const void *b)
{
    const ifd_st_tensor_t *x = a, *y = b;
    const uint8_t *px = x->data, *py = y->data;
    return px < py ? -1 : px > py;
}

static int ifd__st_cmp_name(const void *a, const void *b)
{
    return strcmp(((const ifd_st_tensor_t *)a)->name, ((const ifd_st_tensor_t *)b)->name);
}

/* Reads a JSON integer ≥ 0 (jansson holds json_int_t, i.e. long long). */
static bool ifd__st_uint(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* Parses one tensor entry of shard `sh` whose data section is [data, data + dlen). */
static int ifd__st_entry(ifd__sterr_t *e, ifd_safetensors_t *st, const ifd__shard_t *sh,
                         const char *name, const json_t *v, const uint8_t *data, uint64_t dlen)
{
    ifd_st_tensor_t t;
    memset(&t, 0, sizeof t);
    const char *f = sh->path;
    if (!json_is_object(v))
        return ifd__st_fail(e, IFD_EFORMAT, "%s: tensor '%s': header entry is not an object", f,
                            name);
    const json_t *dt = json_object_get(v, "dtype");
    const json_t *shape = json_object_get(v, "shape");
    const json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return ifd__st_fail(e, IFD_EFORMAT, "%s: tensor '%s': dtype is missing", f, name);
    size_t esz = ifd_safetensors_dtype_size(json_string_value(dt));
    if (esz == 0)
        return ifd__st_fail(e, IFD_ENOTSUP, "%s: tensor '%s': unknown dtype '%.16s'", f, name,
                            json_string_value(dt));
    snprintf(t.dtype, sizeof t.dtype, "%s", json_string_value(dt));
    t.ggml_type = ifd__st_ggml(t.dtype);
    if (!json_is_array(shape) || json_array_size(shape) > IFD_ST_MAX_DIMS)
        return ifd__st_fail(e, IFD_EFORMAT, "%s: tensor '%s': shape is not an array of ≤ %d ints",
                            f, name, IFD_ST_MAX_DIMS);
    t.n_dims = (uint32_t)json_array_size(shape);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t.n_dims; d++) {
        uint64_t dim;
        if (!ifd__st_uint(json_array_get(shape, d), &dim) || dim > INT64_MAX)
            return ifd__st_fail(e, IFD_EFORMAT, "%s: tensor '%s': shape[%u] is not an int ≥ 0", f,
                                name, d);
        if (dim && n > UINT64_MAX / dim)
            return ifd__st_fail(e, IFD_EFORMAT, "%s: tensor '%s': shape overflows", f, name);
        t.shape[d] = (int64_t)dim;
        n *= dim;
    }
    t.n_elems = n;
    uint64_t b, end;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !ifd__st_uint(json_array_get(offs, 0), &b) ||
        !ifd__st_uint(json_array_get(offs, 1), &end) || end < b)
        return ifd__st_fail(e, IFD_EFORMAT,
                            "%s: tensor '%s': data_offsets is not [begin, end] with begin ≤ end", f,
                            name);
    if (n > UINT64_MAX / esz || end - b != n * esz)
        return ifd__st_fail(e, IFD_EFORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, "
                            "%s × %llu elements need %llu",
                            f, name, (unsigned long long)b, (unsigned long long)end,
                            (unsigned long long)(end - b), t.dtype, (unsigned long long)n,
                            (unsigned long long)(n * esz));
    if (end > dlen)
        return ifd__st_fail(e, IFD_ETRUNC,
                            "%s: tensor '%s': data_offsets end %llu is past the data section "
                            "(%llu bytes): file truncated?",
                            f, name, (unsigned long long)end, (unsigned long long)dlen);
    t.nbytes = end - b;
    t.data = data + b;
    t.file = sh->path;
    if (!(t.name = strdup(name)))
        return IFD_ENOMEM;
    int rc = ifd__st_push(st, &t);
    if (rc)
        free((char *)t.name);
    return rc;
}

/* Maps shard `path` and appends its tensors. */
static int ifd__st_shard(ifd__sterr_t *e, ifd_safetensors_t *st, const char *path)
{
    ifd__shard_t *shs = realloc(st->shards, (st->n_shards + 1) * sizeof *shs);
    if (!shs)
        return IFD_ENOMEM;
    st->shards = shs;
    ifd__shard_t *sh = &st->shards[st->n_shards];
    memset(sh, 0, sizeof *sh);
    if (!(sh->path = strdup(path)))
        return IFD_ENOMEM;
    st->n_shards++;
    int rc = ifd__st_map(e, path, &sh->map, &sh->size);
    if (rc)
        return rc;
    st->total_bytes += sh->size;
    const uint8_t *base = sh->map;
    if (sh->size < 8)
        return ifd__st_fail(e, IFD_ETRUNC, "%s: truncated: %zu bytes, the header length needs 8",
                            path, sh->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | base[i];
    if (hlen > sh->size - 8)
        return ifd__st_fail(e, IFD_ETRUNC,
                            "%s: truncated: header length %llu exceeds the %zu bytes after it",
                            path, (unsigned long long)hlen, sh->size - 8);
    if (hlen > IFD__ST_MAX_HEADER)
        return ifd__st_fail(e, IFD_ETOOBIG, "%s: header length %llu is over %u bytes", path,
                            (unsigned long long)hlen, IFD__ST_MAX_HEADER);
    json_error_t jerr;
    json_t *h = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!h)
        return ifd__st_fail(e, IFD_EFORMAT, "%s: header is not valid JSON (byte %d): %s", path,
                            jerr.position, jerr.text);
    if (!json_is_object(h)) {
        json_decref(h);
        return ifd__st_fail(e, IFD_EFORMAT, "%s: header is not a JSON object", path);
    }
    const uint8_t *data = base + 8 + hlen;
    uint64_t dlen = sh->size - 8 - hlen;
    size_t first = st->n_tensors;
    const char *key;
    json_t *v;
    json_object_foreach(h, key, v)
    {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        if ((rc = ifd__st_entry(e, st, sh, key, v, data, dlen)))
            break;
    }
    json_decref(h);
    if (rc)
        return rc;
    /* overlap check within this shard, by start offset */
    size_t n = st->n_tensors - first;
    if (n < 2) /* nothing to overlap; with no tensor at all st->tensors may be NULL */
        return 0;
    ifd_st_tensor_t *ts = st->tensors + first;
    qsort(ts, n, sizeof *ts, ifd__st_cmp_begin);
    for (size_t i = 1; i < n; i++) {
        const uint8_t *prev_end = (const uint8_t *)ts[i - 1].data + ts[i - 1].nbytes;
        if (ts[i - 1].nbytes && ts[i].nbytes && prev_end > (const uint8_t *)ts[i].data)
            return ifd__st_fail(e, IFD_EFORMAT, "%s: tensors '%s' and '%s' overlap", path,
                                ts[i - 1].name, ts[i].name);
    }
    return 0;
}

static bool ifd__is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool ifd__exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static bool ifd__ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Sorts the tensors by name; a name in two shards is an error. */
static int ifd__st_sort(ifd__sterr_t *e, ifd_safetensors_t *st)
{
    if (st->n_tensors > 1) /* none: st->tensors is NULL, which qsort must not get */
        qsort(st->tensors, st->n_tensors, sizeof *st->tensors, ifd__st_cmp_name);
    for (size_t i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return ifd__st_fail(e, IFD_EFORMAT, "%s: tensor '%s' is also in %s",
                                st->tensors[i].file, st->tensors[i].name, st->tensors[i - 1].file);
    return 0;
}

/* Opens every shard the index at `index` names and checks its weight_map. */
static int ifd__st_index(ifd__sterr_t *e, ifd_safetensors_t *st, const char *index)
{
    json_error_t jerr;
    json_t *j = json_load_file(index, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        if (!ifd__exists(index))
            return ifd__st_fail(e, -ENOENT, "%s: %s", index, strerror(ENOENT));
        return ifd__st_fail(e, IFD_EFORMAT, "%s: not valid JSON (line %d): %s", index, jerr.line,
                            jerr.text);
    }
    int rc = 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", index);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    const json_t *wm = json_object_get(j, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        rc = ifd__st_fail(e, IFD_EFORMAT, "%s: weight_map is missing or empty", index);
        goto out;
    }
    /* open each distinct shard once, in order of first mention */
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wm, key, v)
    {
        if (!json_is_string(v) || strchr(json_string_value(v), '/') || json_string_length(v) == 0) {
            rc = ifd__st_fail(e, IFD_EFORMAT,
                              "%s: weight_map['%s'] is not a file name in the index's directory",
                              index, key);
            goto out;
        }
        char path[4352];
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(v));
        bool seen = false;
        for (size_t i = 0; i < st->n_shards && !seen; i++)
            seen = strcmp(st->shards[i].path, path) == 0;
        if (!seen && (rc = ifd__st_shard(e, st, path)))
            goto out;
    }
    if ((rc = ifd__st_sort(e, st)))
        goto out;
    json_object_foreach((json_t *)wm, key, v)
    {
        const ifd_st_tensor_t *t = ifd_safetensors_find(st, key);
        char path[4352];
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(v));
        if (!t || strcmp(t->file, path) != 0) {
            rc = ifd__st_fail(e, IFD_EFORMAT, "%s: tensor '%s' (listed in %s) is missing", path,
                              key, IFD__ST_INDEX);
            goto out;
        }
    }
out:
    json_decref(j);
    return rc;
}

int ifd_safetensors_open(ifd_safetensors_t **out, const char *path, char *errbuf, size_t errlen)
{
    ifd__sterr_t e = {errbuf, errlen};
    ifd_safetensors_t *st = calloc(1, sizeof *st);
    if (!st)
        return IFD_ENOMEM;
    int rc;
    char p[4352];
    if (ifd__is_dir(path)) {
        snprintf(p, sizeof p, "%s/%s", path, IFD__ST_INDEX);
        if (ifd__exists(p)) {
            rc = ifd__st_index(&e, st, p);
        } else {
            snprintf(p, sizeof p, "%s/%s", path, IFD__ST_SINGLE);
            if (!ifd__exists(p))
                rc = ifd__st_fail(&e, -ENOENT, "%s: no %s or %s in the directory", path,
                                  IFD__ST_INDEX, IFD__ST_SINGLE);
            else
                rc = ifd__st_shard(&e, st, p);
        }
    } else if (ifd__ends_with(path, ".json")) {
        rc = ifd__st_index(&e, st, path);
    } else {
        rc = ifd__st_shard(&e, st, path);
    }
    if (rc == 0)
        rc = ifd__st_sort(&e, st);
    if (rc == IFD_ENOMEM)
        ifd__st_fail(&e, rc, "%s: out of memory", path);
    if (rc) {
        ifd_safetensors_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

void ifd_safetensors_close(ifd_safetensors_t *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n_tensors; i++)
        free((char *)st->tensors[i].name);
    free(st->tensors);
    for (size_t i = 0; i < st->n_shards; i++) {
        if (st->shards[i].map)
            munmap(st->shards[i].map, st->shards[i].size);
        free(st->shards[i].path);
    }
    free(st->shards);
    free(st);
}

/* Whole pages of [p, p + n). */
static void ifd__st_release(const void *p, uint64_t n)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void ifd_safetensors_release(const ifd_safetensors_t *st, const ifd_st_tensor_t *t)
{
    (void)st;
    if (t && t->nbytes)
        ifd__st_release(t->data, t->nbytes);
}

void ifd_safetensors_release_all(const ifd_safetensors_t *st)
{
    for (size_t i = 0; st && i < st->n_shards; i++)
        if (st->shards[i].map)
            ifd__st_release(st->shards[i].map, st->shards[i].size);
}

size_t ifd_safetensors_count(const ifd_safetensors_t *st)
{
    return st->n_tensors;
}

const ifd_st_tensor_t *ifd_safetensors_at(const ifd_safetensors_t *st, size_t i)
{
    return i < st->n_tensors ? &st->tensors[i] : NULL;
}

const ifd_st_tensor_t *ifd_safetensors_find(const ifd_safetensors_t *st, const char *name)
{
    size_t lo = 0, hi = st->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (c == 0)
            return &st->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t ifd_safetensors_n_files(const ifd_safetensors_t *st)
{
    return st->n_shards;
}

const char *ifd_safetensors_file(const ifd_safetensors_t *st, size_t i)
{
    return i < st->n_shards ? st->shards[i].path : NULL;
}

uint64_t ifd_safetensors_total_bytes(const ifd_safetensors_t *st)
{
    return st->total_bytes;
}
