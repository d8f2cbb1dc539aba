/*
 * kvdisk.c — the KV pool's disk tier (kvdisk.h): a queue of pinned blocks
 * to write and a list of loads, served by one I/O thread (loads first: a
 * sequence waits on them), and the directory's size bound.
 *
 * Invariants: a queued entry holds one pool reference of p.worker on its
 * block until the thread has written it (or skipped it); a load's blocks
 * are the caller's, and the thread touches them only while the load is
 * in `loads` and not cancelled (load_finish waits for that).
 */
#include "kvdisk.h"

#include "error.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define KVD_STALE_TMP_S   600
#define KVD_RESCAN_WRITES 64
#define KVD_BAD_LOG_S     10.0

/* The file header; the tokens and the data follow. */
typedef struct {
    uint64_t magic;
    uint32_t version;
    uint32_t block_size;
    uint64_t fingerprint;
    uint64_t salt;
    ifd_kvhash_t hash, parent;
    uint64_t data_bytes;
    uint64_t data_sum; /* XXH3-64 of the data */
    uint64_t head_sum; /* XXH3-64 of this header (head_sum 0) and the tokens */
} kvd_head_t;

typedef struct {
    int32_t block, lblock; /* lblock: its local-layer twin (local pool), else -1 */
    ifd_kvhash_t hash, parent;
    uint64_t salt;
    void *data; /* staged: the block's data (owned, freed when written); else NULL */
} kvd_entry_t;

struct ifd_kvdisk_load {
    ifd_kvdisk_t *d;
    ifd_kvhash_t parent;
    uint64_t salt;
    int n, done;
    bool finished, cancel;
    int32_t *blocks, *lblocks, *tokens; /* lblocks: NULL without a local pool */
    void **bufs;                        /* staged: the caller's host buffers; else NULL */
    ifd_kvdisk_load_t *next;
};

struct ifd_kvdisk {
    ifd_kvdisk_params_t p;
    char *dir;
    ifd_kvpool_t *pool, *lpool; /* lpool: p.local_pool */
    int bs, n_layers, n_llayers, n_iov;
    uint64_t block_bytes, lblock_bytes, data_bytes, file_bytes;
    int dirfd, lockfd;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    bool stop, writes_off;
    kvd_entry_t *q; /* ring of p.max_pending entries, their tokens in q_tokens */
    int32_t *q_tokens;
    int q_head, q_n, in_flight;
    ifd_kvdisk_load_t *loads; /* FIFO */
    /* the thread's own */
    struct iovec *iov; /* n_iov: the head, then 2 per layer of the pool, then of lpool */
    uint8_t *head;     /* header + tokens */
    uint64_t est_bytes, est_files;
    int writes_since_scan;
    uint64_t tmp_seq;
    bool warned_io;
    double bad_logged_at;  /* CLOCK_MONOTONIC s of the last bad-file warning; < 0: none yet */
    uint64_t bad_unlogged; /* bad files deleted since without a warning */
#ifdef IFD_TEST_HOOKS
    double read_delay_ms; /* INFERD_TEST_KVDISK_READ_MS: a slow disk, before each file read */
#endif
};

ifd_kvdisk_params_t ifd_kvdisk_default_params(void)
{
    ifd_kvdisk_params_t p;
    memset(&p, 0, sizeof p);
    p.max_pending = 64;
    p.bad_log_s = KVD_BAD_LOG_S;
    return p;
}

uint64_t ifd_kvdisk_fingerprint(const ifd_kvpool_t *pool, const void *identity, size_t n)
{
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    uint64_t k[7] = {(uint64_t)g.n_layers, (uint64_t)g.n_kv_heads, (uint64_t)g.head_dim,
                     (uint64_t)g.dtype,    (uint64_t)g.block_size, g.fingerprint,
                     IFD_KVDISK_VERSION};
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, k, sizeof k);
    if (n)
        XXH3_64bits_update(&st, identity, n);
    return XXH3_64bits_digest(&st);
}

void ifd_kvdisk_file_name(uint64_t fp, const ifd_kvhash_t *h, char *out, size_t n)
{
    snprintf(out, n, "%016llx-%016llx%016llx.kvb", (unsigned long long)fp,
             (unsigned long long)h->hi, (unsigned long long)h->lo);
}

/* iov[1..] ← block b's K and V of every layer, then its local twin lb's
 * (with a local pool), as the file stores them; staged, the one buffer
 * `data` holding them in that order. */
static void kvd_block_iov(ifd_kvdisk_t *d, int32_t b, int32_t lb, void *data)
{
    struct iovec *v = d->iov + 1;
    if (d->p.staged) {
        *v = (struct iovec){data, d->data_bytes};
        return;
    }
    for (int l = 0; l < d->n_layers; l++)
        for (int kv = 0; kv < 2; kv++, v++)
            *v = (struct iovec){ifd_kvpool_block_ptr(d->pool, b, l, kv), d->block_bytes};
    for (int l = 0; l < d->n_llayers; l++)
        for (int kv = 0; kv < 2; kv++, v++)
            *v = (struct iovec){ifd_kvpool_block_ptr(d->lpool, lb, l, kv), d->lblock_bytes};
}

static uint64_t kvd_data_sum(const ifd_kvdisk_t *d)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (int i = 1; i < d->n_iov; i++)
        XXH3_64bits_update(&st, d->iov[i].iov_base, d->iov[i].iov_len);
    return XXH3_64bits_digest(&st);
}

static uint64_t kvd_head_sum(const ifd_kvdisk_t *d, const uint8_t *head)
{
    kvd_head_t h;
    memcpy(&h, head, sizeof h);
    h.head_sum = 0;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &h, sizeof h);
    XXH3_64bits_update(&st, head + sizeof h, (size_t)d->bs * sizeof(int32_t));
    return XXH3_64bits_digest(&st);
}

/* preadv/pwritev of all of iov[0..n) at offset 0, resuming partial
 * transfers (iov is consumed). 0, -errno, or IFD_EFORMAT (a read hit the
 * end: truncated). */
static int kvd_rw_all(int fd, struct iovec *iov, int n, bool write)
{
    off_t off = 0;
    int i = 0;
    while (i < n) {
        ssize_t r = write ? pwritev(fd, iov + i, n - i, off) : preadv(fd, iov + i, n - i, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return write ? -EIO : IFD_EFORMAT;
        off += r;
        for (; i < n && (size_t)r >= iov[i].iov_len; i++)
            r -= (ssize_t)iov[i].iov_len;
        if (i < n) {
            iov[i].iov_base = (uint8_t *)iov[i].iov_base + r;
            iov[i].iov_len -= (size_t)r;
        }
    }
    return 0;
}

/* ---- size bound --------------------------------------------------------------------- */

typedef struct {
    int64_t mtime_ns;
    uint64_t bytes;
    char name[64];
} kvd_file_t;

static int kvd_file_cmp(const void *a, const void *b)
{
    const kvd_file_t *x = a, *y = b;
    return (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
}

static bool kvd_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Lists the block files (every fingerprint's) into *out and deletes stale
 * temporary files. Returns the count or -errno. */
static int kvd_list(ifd_kvdisk_t *d, kvd_file_t **out, uint64_t *total)
{
    int fd = dup(d->dirfd);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        int e = -errno;
        if (fd >= 0)
            close(fd);
        return e;
    }
    rewinddir(dir);
    kvd_file_t *v = NULL;
    int n = 0, cap = 0;
    *total = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(dir))) {
        struct stat st;
        bool blk = kvd_suffix(de->d_name, ".kvb"), tmp = strncmp(de->d_name, ".tmp.", 5) == 0;
        if ((!blk && !tmp) || strlen(de->d_name) >= sizeof v->name ||
            fstatat(d->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
            continue;
        if (tmp) {
            if (now - st.st_mtime > KVD_STALE_TMP_S)
                unlinkat(d->dirfd, de->d_name, 0);
            continue;
        }
        if (n == cap) {
            int nc = cap ? 2 * cap : 256;
            kvd_file_t *t = realloc(v, (size_t)nc * sizeof *t);
            if (!t)
                break;
            v = t, cap = nc;
        }
        v[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        v[n].bytes = (uint64_t)st.st_size;
        strcpy(v[n].name, de->d_name);
        *total += v[n].bytes;
        n++;
    }
    closedir(dir);
    *out = v;
    return n;
}

/* Rescans the directory and, past max_bytes, deletes the least recently
 * used files down to 90% of it. Skipped while another process collects. */
static void kvd_collect(ifd_kvdisk_t *d)
{
    if (flock(d->lockfd, LOCK_EX | LOCK_NB) != 0)
        return;
    kvd_file_t *v = NULL;
    uint64_t total = 0;
    int n = kvd_list(d, &v, &total);
    if (n >= 0) {
        uint64_t files = (uint64_t)n;
        if (total > d->p.max_bytes) {
            qsort(v, (size_t)n, sizeof *v, kvd_file_cmp);
            uint64_t target = d->p.max_bytes / 10 * 9, gone = 0;
            for (int i = 0; i < n && total > target; i++) {
                if (unlinkat(d->dirfd, v[i].name, 0) == 0 || errno == ENOENT) {
                    total -= v[i].bytes;
                    files--;
                    gone++;
                }
            }
            ifd_kvpool_tier_add(d->pool, IFD_KVTIER_EVICTED_FILES, gone);
        }
        d->est_bytes = total;
        d->est_files = files;
        ifd_kvpool_tier_set(d->pool, IFD_KVTIER_DISK_BYTES, total);
        ifd_kvpool_tier_set(d->pool, IFD_KVTIER_DISK_FILES, files);
    }
    free(v);
    d->writes_since_scan = 0;
    flock(d->lockfd, LOCK_UN);
}

/* ---- writing ------------------------------------------------------------------------- */

/* A failed write: a read-only, full or forbidden disk turns writing off
 * (one warning); anything else is logged once and the block skipped. */
static void kvd_write_failed(ifd_kvdisk_t *d, const char *call, int err)
{
    ifd_kvpool_tier_add(d->pool, IFD_KVTIER_DROPPED, 1);
    if (err == EROFS || err == ENOSPC || err == EDQUOT || err == EACCES || err == EPERM) {
        pthread_mutex_lock(&d->mu);
        bool was = d->writes_off;
        d->writes_off = true;
        pthread_mutex_unlock(&d->mu);
        if (!was)
            IFD_WARN("kv disk tier: %s in %s: %s; blocks are no longer written there (reads go "
                     "on)",
                     call, d->dir, strerror(err));
        return;
    }
    if (!d->warned_io)
        IFD_WARN("kv disk tier: %s in %s: %s (block skipped; further errors not logged)", call,
                 d->dir, strerror(err));
    d->warned_io = true;
}

static void kvd_write(ifd_kvdisk_t *d, const kvd_entry_t *e, const int32_t *tokens)
{
    char name[64], tmp[64];
    ifd_kvdisk_file_name(d->p.fingerprint, &e->hash, name, sizeof name);
    if (faccessat(d->dirfd, name, F_OK, 0) == 0)
        return; /* written before (by us, another worker or an earlier run) */
    snprintf(tmp, sizeof tmp, ".tmp.%d.%llu", (int)getpid(), (unsigned long long)++d->tmp_seq);
    int fd = openat(d->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        kvd_write_failed(d, "open", errno);
        return;
    }
    kvd_block_iov(d, e->block, e->lblock, e->data);
    kvd_head_t h = {
        IFD_KVDISK_MAGIC, IFD_KVDISK_VERSION, (uint32_t)d->bs, d->p.fingerprint, e->salt,
        e->hash,          e->parent,          d->data_bytes,   kvd_data_sum(d),  0};
    memcpy(d->head, &h, sizeof h);
    memcpy(d->head + sizeof h, tokens, (size_t)d->bs * sizeof(int32_t));
    h.head_sum = kvd_head_sum(d, d->head);
    memcpy(d->head, &h, sizeof h);
    d->iov[0].iov_base = d->head;
    d->iov[0].iov_len = sizeof h + (size_t)d->bs * sizeof(int32_t);
    int rc = kvd_rw_all(fd, d->iov, d->n_iov, true);
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && renameat(d->dirfd, tmp, d->dirfd, name) != 0)
        rc = -errno;
    if (rc) {
        unlinkat(d->dirfd, tmp, 0);
        kvd_write_failed(d, "writing a block file", -rc);
        return;
    }
    ifd_kvpool_tier_add(d->pool, IFD_KVTIER_WRITES, 1);
    ifd_kvpool_tier_add(d->pool, IFD_KVTIER_WRITTEN_BYTES, d->file_bytes);
    d->est_bytes += d->file_bytes;
    ifd_kvpool_tier_set(d->pool, IFD_KVTIER_DISK_BYTES, d->est_bytes);
    ifd_kvpool_tier_set(d->pool, IFD_KVTIER_DISK_FILES, ++d->est_files);
    if (d->est_bytes > d->p.max_bytes || ++d->writes_since_scan >= KVD_RESCAN_WRITES)
        kvd_collect(d);
}

/* ---- reading ------------------------------------------------------------------------- */

/* The warning for a bad file, at most one per p.bad_log_s: those in between
 * are counted and the next line says how many. The thread's own state. */
static void kvd_log_bad(ifd_kvdisk_t *d, const char *name, const char *why)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    if (d->bad_logged_at >= 0 && now - d->bad_logged_at < d->p.bad_log_s) {
        d->bad_unlogged++;
        return;
    }
    char more[96] = "";
    if (d->bad_unlogged)
        snprintf(more, sizeof more, "; %llu more bad files deleted in the last %.0f s, not logged",
                 (unsigned long long)d->bad_unlogged, now - d->bad_logged_at);
    IFD_WARN("kv disk tier: %s/%s: bad %s (torn, corrupt or another model's): deleted%s", d->dir,
             name, why, more);
    d->bad_logged_at = now;
    d->bad_unlogged = 0;
}

/* Reads the file of the block after *parent (hash *hash, salt, tokens)
 * into pool block b (and local pool block lb), staged into buf. 0; IFD_ENOTFOUND (no file);
 * IFD_EFORMAT (a bad file: deleted); -errno. */
static int kvd_read(ifd_kvdisk_t *d, const ifd_kvhash_t *parent, const ifd_kvhash_t *hash,
                    uint64_t salt, const int32_t *tokens, int32_t b, int32_t lb, void *buf)
{
    char name[64];
    ifd_kvdisk_file_name(d->p.fingerprint, hash, name, sizeof name);
    int fd = openat(d->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? IFD_ENOTFOUND : -errno;
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? -errno : 0;
    if (rc == 0 && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != d->file_bytes))
        rc = IFD_EFORMAT;
    if (rc == 0) {
        kvd_block_iov(d, b, lb, buf);
        d->iov[0].iov_base = d->head;
        d->iov[0].iov_len = sizeof(kvd_head_t) + (size_t)d->bs * sizeof(int32_t);
        rc = kvd_rw_all(fd, d->iov, d->n_iov, false);
    }
    const char *why = rc == IFD_EFORMAT ? "size" : NULL;
    if (rc == 0) {
        kvd_head_t h;
        memcpy(&h, d->head, sizeof h);
        kvd_block_iov(d, b, lb, buf); /* kvd_rw_all consumed it */
        if (h.magic != IFD_KVDISK_MAGIC || h.version != IFD_KVDISK_VERSION ||
            h.block_size != (uint32_t)d->bs || h.data_bytes != d->data_bytes)
            why = "format";
        else if (h.head_sum != kvd_head_sum(d, d->head))
            why = "header checksum";
        else if (h.fingerprint != d->p.fingerprint)
            why = "fingerprint";
        else if (h.salt != salt || h.hash.lo != hash->lo || h.hash.hi != hash->hi ||
                 h.parent.lo != parent->lo || h.parent.hi != parent->hi ||
                 memcmp(d->head + sizeof h, tokens, (size_t)d->bs * sizeof(int32_t)) != 0)
            why = "prefix";
        else if (h.data_sum != kvd_data_sum(d))
            why = "data checksum";
        rc = why ? IFD_EFORMAT : 0;
    }
    if (rc == 0)
        futimens(fd, NULL); /* LRU by access: the collection keeps what was read last */
    close(fd);
    if (rc == IFD_EFORMAT) {
        unlinkat(d->dirfd, name, 0);
        ifd_kvpool_tier_add(d->pool, IFD_KVTIER_BAD_FILES, 1);
        kvd_log_bad(d, name, why);
    }
    return rc;
}

static bool kvd_load_cancelled(ifd_kvdisk_t *d, ifd_kvdisk_load_t *l)
{
    pthread_mutex_lock(&d->mu);
    bool cancel = l->cancel;
    pthread_mutex_unlock(&d->mu);
    return cancel;
}

#ifdef IFD_TEST_HOOKS
/* A slow disk for tests: sleeps read_delay_ms in 1 ms slices, ending early
 * when the load is cancelled (so load_finish never waits on it long). */
static void kvd_test_delay(ifd_kvdisk_t *d, ifd_kvdisk_load_t *l)
{
    const struct timespec ms = {0, 1000000};
    for (double t = 0; t < d->read_delay_ms && !kvd_load_cancelled(d, l); t += 1)
        nanosleep(&ms, NULL);
}
#endif

static void kvd_load_run(ifd_kvdisk_t *d, ifd_kvdisk_load_t *l)
{
    ifd_kvhash_t parent = l->parent;
    for (int i = 0; i < l->n; i++) {
#ifdef IFD_TEST_HOOKS
        kvd_test_delay(d, l);
#endif
        if (kvd_load_cancelled(d, l))
            break;
        const int32_t *t = l->tokens + (size_t)i * (size_t)d->bs;
        ifd_kvhash_t h = ifd_kvpool_hash_block(&parent, l->salt, t, d->bs);
        if (kvd_read(d, &parent, &h, l->salt, t, l->blocks ? l->blocks[i] : -1,
                     l->lblocks ? l->lblocks[i] : -1, l->bufs ? l->bufs[i] : NULL) != 0)
            break;
        ifd_kvpool_tier_add(d->pool, IFD_KVTIER_READ_BYTES, d->file_bytes);
        pthread_mutex_lock(&d->mu);
        l->done = i + 1;
        pthread_mutex_unlock(&d->mu);
        parent = h;
    }
}

/* ---- the thread ---------------------------------------------------------------------- */

static void *kvd_main(void *arg)
{
    ifd_kvdisk_t *d = arg;
    int32_t *tokens = malloc((size_t)d->bs * sizeof *tokens);
    pthread_mutex_lock(&d->mu);
    for (;;) {
        if (d->loads) {
            ifd_kvdisk_load_t *l = d->loads;
            pthread_mutex_unlock(&d->mu);
            kvd_load_run(d, l);
            pthread_mutex_lock(&d->mu);
            d->loads = l->next;
            l->finished = true;
            pthread_cond_broadcast(&d->done);
            continue;
        }
        if (d->q_n > 0) {
            kvd_entry_t e = d->q[d->q_head];
            memcpy(tokens, d->q_tokens + (size_t)d->q_head * (size_t)d->bs,
                   (size_t)d->bs * sizeof *tokens);
            d->q_head = (d->q_head + 1) % d->p.max_pending;
            d->q_n--;
            d->in_flight = 1;
            bool off = d->writes_off;
            pthread_mutex_unlock(&d->mu);
            if (!off && tokens)
                kvd_write(d, &e, tokens);
            else
                ifd_kvpool_tier_add(d->pool, IFD_KVTIER_DROPPED, 1);
            free(e.data);
            if (e.block >= 0)
                ifd_kvpool_unref(d->pool, d->p.worker, &e.block, 1);
            if (e.lblock >= 0)
                ifd_kvpool_unref(d->lpool, d->p.worker, &e.lblock, 1);
            pthread_mutex_lock(&d->mu);
            d->in_flight = 0;
            pthread_cond_broadcast(&d->done);
            continue;
        }
        if (d->stop)
            break;
        pthread_cond_wait(&d->wake, &d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    free(tokens);
    return NULL;
}

/* ---- public -------------------------------------------------------------------------- */

static int kvd_open_dir(ifd_kvdisk_t *d)
{
    if (mkdir(d->dir, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        IFD_WARN("kv disk tier: mkdir(%s): %s", d->dir, strerror(e));
        return -e;
    }
    d->dirfd = open(d->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->dirfd < 0) {
        int e = errno;
        IFD_WARN("kv disk tier: open(%s): %s", d->dir, strerror(e));
        return -e;
    }
    d->lockfd = openat(d->dirfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (d->lockfd < 0) /* a read-only directory: reads only, no collection */
        d->lockfd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->lockfd < 0) {
        int e = errno;
        IFD_WARN("kv disk tier: open(%s/.lock): %s", d->dir, strerror(e));
        return -e;
    }
    return 0;
}

static void kvd_free(ifd_kvdisk_t *d)
{
    if (d->dirfd >= 0)
        close(d->dirfd);
    if (d->lockfd >= 0)
        close(d->lockfd);
    free(d->q);
    free(d->q_tokens);
    free(d->iov);
    free(d->head);
    free(d->dir);
    free(d);
}

/* Whether pool's blocks on device dev are host memory mapped here. */
static bool kvd_host_pool(ifd_kvpool_t *pool, int dev, ifd_kvpool_params_t *g)
{
    ifd_kvpool_geometry(pool, g);
    return dev >= 0 && dev < g->n_devices && ifd_kvpool_layer_k(pool, dev, 0) &&
           g->kind[dev] == IFD_KVSEG_HOST;
}

int ifd_kvdisk_create(const ifd_kvdisk_params_t *p, ifd_kvpool_t *pool, ifd_kvdisk_t **out)
{
    ifd_kvpool_params_t g, lg = {0};
    if (!p || !pool || !out || !p->dir || !*p->dir || p->max_bytes == 0 || p->max_pending < 0)
        return IFD_EINVAL;
    /* staged, neither pool's memory is touched here: only its geometry
     * (the local twin's part of every file) is needed */
    if ((!kvd_host_pool(pool, p->device, &g) && !p->staged) ||
        (p->local_pool && !kvd_host_pool(p->local_pool, p->device, &lg) && !p->staged))
        return IFD_ENOTSUP;
    if (p->local_pool && lg.block_size != g.block_size)
        return IFD_EINVAL;
    ifd_kvdisk_t *d = calloc(1, sizeof *d);
    if (!d)
        return IFD_ENOMEM;
    d->p = *p;
    if (d->p.max_pending == 0)
        d->p.max_pending = 64;
    if (!(d->p.bad_log_s > 0))
        d->p.bad_log_s = KVD_BAD_LOG_S;
    d->bad_logged_at = -1;
    d->dirfd = d->lockfd = -1;
    d->pool = pool;
#ifdef IFD_TEST_HOOKS
    const char *delay = getenv("INFERD_TEST_KVDISK_READ_MS");
    d->read_delay_ms = delay ? atof(delay) : 0;
#endif
    d->lpool = p->local_pool;
    d->bs = g.block_size;
    d->n_layers = g.n_layers;
    d->n_llayers = d->lpool ? lg.n_layers : 0;
    d->n_iov = d->p.staged ? 2 : 1 + 2 * (d->n_layers + d->n_llayers);
    d->block_bytes = ifd_kvpool_block_bytes(&g);
    d->lblock_bytes = d->lpool ? ifd_kvpool_block_bytes(&lg) : 0;
    d->data_bytes =
        2 * ((uint64_t)g.n_layers * d->block_bytes + (uint64_t)d->n_llayers * d->lblock_bytes);
    d->file_bytes = sizeof(kvd_head_t) + (uint64_t)d->bs * sizeof(int32_t) + d->data_bytes;
    d->dir = strdup(p->dir);
    d->q = calloc((size_t)d->p.max_pending, sizeof *d->q);
    d->q_tokens = calloc((size_t)d->p.max_pending * (size_t)d->bs, sizeof *d->q_tokens);
    d->iov = calloc((size_t)d->n_iov, sizeof *d->iov);
    d->head = calloc(1, sizeof(kvd_head_t) + (size_t)d->bs * sizeof(int32_t));
    if (!d->dir || !d->q || !d->q_tokens || !d->iov || !d->head) {
        kvd_free(d);
        return IFD_ENOMEM;
    }
    int rc = kvd_open_dir(d);
    if (rc) {
        kvd_free(d);
        return rc;
    }
    ifd_kvpool_tier_set(pool, IFD_KVTIER_DISK_CAPACITY, p->max_bytes);
    kvd_collect(d);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->wake, NULL);
    pthread_cond_init(&d->done, NULL);
    if ((rc = pthread_create(&d->th, NULL, kvd_main, d)) != 0) {
        IFD_WARN("kv disk tier: pthread_create: %s", strerror(rc));
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->wake);
        pthread_cond_destroy(&d->done);
        kvd_free(d);
        return -rc;
    }
    *out = d;
    return 0;
}

void ifd_kvdisk_destroy(ifd_kvdisk_t *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    IFD_ASSERT(d->loads == NULL);
    d->stop = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->th, NULL);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->wake);
    pthread_cond_destroy(&d->done);
    kvd_free(d);
}

ifd_kvpool_t *ifd_kvdisk_local_pool(const ifd_kvdisk_t *d)
{
    return d->lpool;
}

void ifd_kvdisk_offer(ifd_kvdisk_t *d, int32_t block, int32_t lblock, const ifd_kvhash_t *parent,
                      uint64_t salt, const int32_t *tokens, ifd_kvhash_t *out_hash)
{
    const ifd_kvhash_t par = *parent; /* out_hash may be parent */
    ifd_kvhash_t h = ifd_kvpool_hash_block(&par, salt, tokens, d->bs);
    if (out_hash)
        *out_hash = h;
    if (!d->lpool)
        lblock = -1;
    pthread_mutex_lock(&d->mu);
    bool take = !d->writes_off && d->q_n < d->p.max_pending && (!d->lpool || lblock >= 0);
    pthread_mutex_unlock(&d->mu);
    if (!take || ifd_kvpool_ref(d->pool, d->p.worker, &block, 1) != 0) {
        ifd_kvpool_tier_add(d->pool, IFD_KVTIER_DROPPED, 1);
        return;
    }
    if (lblock >= 0 && ifd_kvpool_ref(d->lpool, d->p.worker, &lblock, 1) != 0) {
        ifd_kvpool_unref(d->pool, d->p.worker, &block, 1);
        ifd_kvpool_tier_add(d->pool, IFD_KVTIER_DROPPED, 1);
        return;
    }
    pthread_mutex_lock(&d->mu);
    int at = (d->q_head + d->q_n) % d->p.max_pending;
    d->q[at] = (kvd_entry_t){block, lblock, h, par, salt, NULL};
    memcpy(d->q_tokens + (size_t)at * (size_t)d->bs, tokens, (size_t)d->bs * sizeof *tokens);
    d->q_n++; /* only this thread adds: the room seen above is still there */
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
}

void ifd_kvdisk_offer_data(ifd_kvdisk_t *d, const void *data, const ifd_kvhash_t *parent,
                           uint64_t salt, const int32_t *tokens, ifd_kvhash_t *out_hash)
{
    const ifd_kvhash_t par = *parent; /* out_hash may be parent */
    ifd_kvhash_t h = ifd_kvpool_hash_block(&par, salt, tokens, d->bs);
    if (out_hash)
        *out_hash = h;
    pthread_mutex_lock(&d->mu);
    bool take = d->p.staged && !d->writes_off && d->q_n < d->p.max_pending;
    pthread_mutex_unlock(&d->mu);
    void *copy = take ? malloc(d->data_bytes) : NULL;
    if (!copy) {
        ifd_kvpool_tier_add(d->pool, IFD_KVTIER_DROPPED, 1);
        return;
    }
    memcpy(copy, data, d->data_bytes);
    pthread_mutex_lock(&d->mu);
    int at = (d->q_head + d->q_n) % d->p.max_pending;
    d->q[at] = (kvd_entry_t){-1, -1, h, par, salt, copy};
    memcpy(d->q_tokens + (size_t)at * (size_t)d->bs, tokens, (size_t)d->bs * sizeof *tokens);
    d->q_n++; /* only this thread adds: the room seen above is still there */
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
}

bool ifd_kvdisk_staged(const ifd_kvdisk_t *d)
{
    return d->p.staged;
}

uint64_t ifd_kvdisk_data_bytes(const ifd_kvdisk_t *d)
{
    return d->data_bytes;
}

int ifd_kvdisk_probe(ifd_kvdisk_t *d, const ifd_kvhash_t *parent, uint64_t salt,
                     const int32_t *tokens, int n)
{
    ifd_kvhash_t h = *parent;
    int k = 0;
    char name[64];
    for (; k < n; k++) {
        h = ifd_kvpool_hash_block(&h, salt, tokens + (size_t)k * (size_t)d->bs, d->bs);
        ifd_kvdisk_file_name(d->p.fingerprint, &h, name, sizeof name);
        if (faccessat(d->dirfd, name, R_OK, 0) != 0)
            break;
    }
    if (n > 0) {
        ifd_kvpool_tier_add(d->pool, IFD_KVTIER_QUERY_TOKENS, (uint64_t)n * (uint64_t)d->bs);
        if (k == 0)
            ifd_kvpool_tier_add(d->pool, IFD_KVTIER_MISS_BLOCKS, 1);
    }
    return k;
}

/* A load of n blocks into pool blocks (and twins) or, staged, host buffers. */
static int kvd_load_new(ifd_kvdisk_t *d, const ifd_kvhash_t *parent, uint64_t salt,
                        const int32_t *tokens, int n, const int32_t *blocks, const int32_t *lblocks,
                        void *const *bufs, ifd_kvdisk_load_t **out)
{
    ifd_kvdisk_load_t *l = calloc(1, sizeof *l);
    if (!l)
        return IFD_ENOMEM;
    const size_t nb = (size_t)(n > 0 ? n : 1);
    bool ok = true;
    if (blocks)
        ok &= (l->blocks = malloc(nb * sizeof *l->blocks)) != NULL;
    if (lblocks)
        ok &= (l->lblocks = malloc(nb * sizeof *l->lblocks)) != NULL;
    if (bufs)
        ok &= (l->bufs = malloc(nb * sizeof *l->bufs)) != NULL;
    ok &= (l->tokens = malloc(nb * (size_t)d->bs * sizeof *l->tokens)) != NULL;
    if (!ok) {
        free(l->blocks);
        free(l->lblocks);
        free(l->bufs);
        free(l->tokens);
        free(l);
        return IFD_ENOMEM;
    }
    if (blocks)
        memcpy(l->blocks, blocks, (size_t)n * sizeof *blocks);
    if (lblocks)
        memcpy(l->lblocks, lblocks, (size_t)n * sizeof *lblocks);
    if (bufs)
        memcpy(l->bufs, bufs, (size_t)n * sizeof *bufs);
    memcpy(l->tokens, tokens, (size_t)n * (size_t)d->bs * sizeof *tokens);
    l->d = d, l->parent = *parent, l->salt = salt, l->n = n;
    pthread_mutex_lock(&d->mu);
    ifd_kvdisk_load_t **tail = &d->loads;
    while (*tail)
        tail = &(*tail)->next;
    *tail = l;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
    *out = l;
    return 0;
}

int ifd_kvdisk_load_start(ifd_kvdisk_t *d, const ifd_kvhash_t *parent, uint64_t salt,
                          const int32_t *tokens, int n, const int32_t *blocks,
                          const int32_t *lblocks, ifd_kvdisk_load_t **out)
{
    if ((d->lpool && !lblocks) || d->p.staged)
        return IFD_EINVAL;
    return kvd_load_new(d, parent, salt, tokens, n, blocks, d->lpool ? lblocks : NULL, NULL, out);
}

int ifd_kvdisk_load_start_staged(ifd_kvdisk_t *d, const ifd_kvhash_t *parent, uint64_t salt,
                                 const int32_t *tokens, int n, void *const *bufs,
                                 ifd_kvdisk_load_t **out)
{
    if (!d->p.staged || !bufs)
        return IFD_EINVAL;
    return kvd_load_new(d, parent, salt, tokens, n, NULL, NULL, bufs, out);
}

bool ifd_kvdisk_load_wait(ifd_kvdisk_load_t *l, double wait_ms)
{
    ifd_kvdisk_t *d = l->d;
    pthread_mutex_lock(&d->mu);
    if (!l->finished && wait_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double ns = (double)ts.tv_nsec + wait_ms * 1e6;
        ts.tv_sec += (time_t)(ns / 1e9);
        ts.tv_nsec = (long)(ns - (double)(time_t)(ns / 1e9) * 1e9);
        while (!l->finished && pthread_cond_timedwait(&d->done, &d->mu, &ts) == 0)
            ;
    }
    bool done = l->finished;
    pthread_mutex_unlock(&d->mu);
    return done;
}

int ifd_kvdisk_load_finish(ifd_kvdisk_load_t *l, bool cut)
{
    ifd_kvdisk_t *d = l->d;
    pthread_mutex_lock(&d->mu);
    l->cancel = true;
    if (!l->finished && d->loads != l) { /* not started: take it off the list */
        ifd_kvdisk_load_t **pp = &d->loads;
        while (*pp != l)
            pp = &(*pp)->next;
        *pp = l->next;
        l->finished = true;
    }
    while (!l->finished)
        pthread_cond_wait(&d->done, &d->mu);
    int done = l->done;
    pthread_mutex_unlock(&d->mu);
    if (cut && done < l->n)
        ifd_kvpool_tier_add(d->pool, IFD_KVTIER_SLOW_READS, 1);
    ifd_kvpool_tier_add(d->pool, IFD_KVTIER_HIT_BLOCKS, (uint64_t)done);
    ifd_kvpool_tier_add(d->pool, IFD_KVTIER_HIT_TOKENS, (uint64_t)done * (uint64_t)d->bs);
    free(l->blocks);
    free(l->lblocks);
    free(l->bufs);
    free(l->tokens);
    free(l);
    return done;
}

int ifd_kvdisk_pending(ifd_kvdisk_t *d)
{
    pthread_mutex_lock(&d->mu);
    int n = d->q_n + d->in_flight;
    pthread_mutex_unlock(&d->mu);
    return n;
}
