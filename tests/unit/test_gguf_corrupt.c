/*
 * test_gguf_corrupt.c — corruption robustness of the GGUF reader.
 *
 * Takes real files (the shared vocabulary files and the default model),
 * truncates them at many offsets and flips bytes in their header, metadata
 * and tensor table, and asserts that every case either opens or fails with a
 * clean error code and a message naming the file and a byte offset — never a
 * crash, hang or out-of-bounds read. Truncated images are exact-size heap
 * copies, so the sanitizer build (INFERD_SANITIZE=address,undefined) reports
 * any overread. Fixed seed: the same cases every run.
 */
#include "testutil.h"

#include "error.h"
#include "modelfile/gguf.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool is_clean_error(int rc)
{
    return rc == IFD_EFORMAT || rc == IFD_ETRUNC || rc == IFD_EVERSION || rc == IFD_EOVERFLOW;
}

typedef struct {
    const char *path;
    uint8_t *map; /* MAP_PRIVATE: flips are copy-on-write */
    size_t size;
    uint64_t header_end; /* data offset: where metadata and tensor infos end */
    uint64_t data_end;   /* end of the last tensor's bytes */
} image_t;

static bool image_open(image_t *im, const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    struct stat st;
    fstat(fd, &st);
    im->path = path;
    im->size = (size_t)st.st_size;
    im->map = mmap(NULL, im->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    ck_assert(im->map != MAP_FAILED);
    ifd_gguf_t *g;
    char err[512];
    ck_assert_msg(ifd_gguf_open_mem(&g, im->map, im->size, path, err, sizeof err) == 0, "%s",
                  err);
    im->header_end = ifd_gguf_data_offset(g);
    im->data_end = im->header_end;
    for (uint64_t i = 0; i < ifd_gguf_tensor_count(g); i++) {
        const ifd_gguf_tensor_t *t = ifd_gguf_tensor(g, i);
        if (ifd_gguf_data_offset(g) + t->offset + t->nbytes > im->data_end)
            im->data_end = ifd_gguf_data_offset(g) + t->offset + t->nbytes;
    }
    if (ifd_gguf_tensor_count(g) == 0) /* vocab files end unpadded */
        im->header_end = im->data_end = im->size;
    ifd_gguf_close(g);
    return true;
}

static void check_msg(const char *err, const char *name, int rc)
{
    ck_assert_msg(strncmp(err, name, strlen(name)) == 0 && strstr(err, ": at byte ") != NULL,
                  "rc %s with message '%s'", ifd_err_name(rc), err);
}

/* Truncation at offset `cut` of an exact-size heap copy must fail cleanly
 * whenever it removes needed bytes. */
static void truncate_at(const image_t *im, size_t cut, const char *name)
{
    uint8_t *copy = malloc(cut ? cut : 1);
    memcpy(copy, im->map, cut);
    ifd_gguf_t *g = NULL;
    char err[512] = "";
    int rc = ifd_gguf_open_mem(&g, copy, cut, name, err, sizeof err);
    if (cut < im->data_end) {
        ck_assert_msg(is_clean_error(rc), "%s cut at %zu: rc %s (%s)", im->path, cut,
                      ifd_err_name(rc), err);
        check_msg(err, name, rc);
        ck_assert_ptr_null(g);
    } else {
        ck_assert_int_eq(rc, 0);
        ifd_gguf_close(g);
    }
    free(copy);
}

static void run_truncations(const image_t *im, int n_random)
{
    /* every offset in the first 512 bytes, then random ones in the header,
     * then a few inside the tensor data */
    for (size_t cut = 0; cut < 512 && cut < im->size; cut++)
        truncate_at(im, cut, "trunc.gguf");
    for (int i = 0; i < n_random; i++)
        truncate_at(im, (size_t)(rng_next() % im->header_end), "trunc.gguf");
    if (im->data_end > im->header_end) {
        for (int i = 0; i < 4; i++) {
            size_t cut = im->header_end + (size_t)(rng_next() % (im->data_end - im->header_end));
            /* a big copy: use the mapping with a shorter size instead */
            ifd_gguf_t *g = NULL;
            char err[512] = "";
            int rc = ifd_gguf_open_mem(&g, im->map, cut, "trunc.gguf", err, sizeof err);
            ck_assert_msg(rc == IFD_ETRUNC, "data cut at %zu: rc %s (%s)", cut, ifd_err_name(rc),
                          err);
            check_msg(err, "trunc.gguf", rc);
        }
        truncate_at(im, im->data_end - 1, "trunc.gguf");
    }
}

/* Flip (or set to interesting values) single bytes in the header region:
 * the result either parses or fails cleanly. */
static void run_flips(image_t *im, int n)
{
    static const uint8_t interesting[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0x0d, 0x09, 0x20};
    int failed = 0;
    for (int i = 0; i < n; i++) {
        size_t at = (size_t)(rng_next() % (i < n / 4 ? (im->header_end < 4096 ? im->header_end : 4096)
                                                      : im->header_end));
        uint8_t old = im->map[at];
        uint64_t r = rng_next();
        im->map[at] = (r & 1) ? (uint8_t)(old ^ (1u << ((r >> 1) & 7)))
                              : interesting[(r >> 1) % sizeof interesting];
        ifd_gguf_t *g = NULL;
        char err[512] = "";
        int rc = ifd_gguf_open_mem(&g, im->map, im->size, "flip.gguf", err, sizeof err);
        if (rc == 0) {
            ifd_gguf_close(g);
        } else {
            ck_assert_msg(is_clean_error(rc) || rc == IFD_ENOMEM,
                          "flip at %zu: rc %s (%s)", at, ifd_err_name(rc), err);
            check_msg(err, "flip.gguf", rc);
            failed++;
        }
        im->map[at] = old;
    }
    printf("%s: %d byte flips, %d rejected cleanly, %d still valid\n", im->path, n, failed,
           n - failed);
}

/* Overwrite the 8-byte counts, lengths and offsets that matter most with
 * extreme values. */
static void run_field_attacks(image_t *im)
{
    static const uint64_t values[] = {0, 1, 0x7fffffffffffffffull, 0xffffffffffffffffull,
                                      0x100000000ull, 0xffffffffull};
    size_t fields[] = {8, 16}; /* tensor count, kv count */
    for (size_t f = 0; f < 2; f++) {
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            uint8_t save[8];
            memcpy(save, im->map + fields[f], 8);
            for (int k = 0; k < 8; k++)
                im->map[fields[f] + (size_t)k] = (uint8_t)(values[v] >> (8 * k));
            ifd_gguf_t *g = NULL;
            char err[512] = "";
            int rc = ifd_gguf_open_mem(&g, im->map, im->size, "field.gguf", err, sizeof err);
            if (rc == 0)
                ifd_gguf_close(g);
            else
                ck_assert_msg(is_clean_error(rc) || rc == IFD_ENOMEM, "rc %s (%s)",
                              ifd_err_name(rc), err);
            memcpy(im->map + fields[f], save, 8);
        }
    }
}

static void corrupt_file(const char *path, int n_trunc, int n_flips)
{
    image_t im;
    ck_assert_msg(image_open(&im, path), "cannot open %s", path);
    run_truncations(&im, n_trunc);
    run_flips(&im, n_flips);
    run_field_attacks(&im);
    munmap(im.map, im.size);
}

START_TEST(test_corrupt_vocab_files)
{
    static const char *files[] = {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf"};
    char path[4096];
    int done = 0;
    for (size_t i = 0; i < 2; i++) {
        if (!ifd_test_data_file(files[i], path, sizeof path)) {
            fprintf(stderr, "SKIPPED (part): %s not in the test data\n", files[i]);
            continue;
        }
        corrupt_file(path, 300, 600);
        done++;
    }
    if (!done)
        fprintf(stderr, "SKIPPED (part): no vocabulary files to corrupt\n");
}
END_TEST

START_TEST(test_corrupt_default_model)
{
    char path[4096];
    if (!ifd_test_model_path(path, sizeof path)) {
        fprintf(stderr, "SKIPPED (part): default model not found at %s\n", path);
        return;
    }
    corrupt_file(path, 300, 600);
}
END_TEST

int main(void)
{
    char p[4096];
    if (!ifd_test_data_dir() && !ifd_test_model_path(p, sizeof p))
        ifd_test_skip("neither the shared test data nor the default model is present");
    Suite *s = suite_create("gguf_corrupt");
    ifd_test_case(s, "corrupt", 500,
                  IFD_TESTS(test_corrupt_vocab_files, test_corrupt_default_model));
    return ifd_test_run(s);
}
