/*
 * driver.c — main() for a fuzz target built without libFuzzer: runs
 * LLVMFuzzerTestOneInput over every file named on the command line (a
 * directory means every regular file in it), then over fixed mutations of
 * each (truncations, bit flips, byte insertions and deletions from a seeded
 * generator), so the committed corpus keeps catching regressions with gcc
 * and ASan alone. Prints "N inputs, M mutations" and exits 0; a failing
 * input aborts, naming the file first.
 *
 * Usage: fuzz_TARGET [--mutations N] PATH...   (N per file, default 64)
 */
#include "fuzz.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

static uint64_t ifd__rng = 0x9E3779B97F4A7C15ULL;

static uint64_t ifd__next(void)
{
    uint64_t z = (ifd__rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static size_t ifd__n_inputs, ifd__n_mutations;

static void ifd__run_file(const char *path, int mutations)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    uint8_t *mut = malloc((size_t)n + 16);
    if (!buf || !mut || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "fuzz: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    fprintf(stderr, "fuzz: %s (%ld bytes)\n", path, n);
    /* an exact-size copy, so reading past the end is caught */
    uint8_t *exact = malloc((size_t)n ? (size_t)n : 1);
    memcpy(exact, buf, (size_t)n);
    LLVMFuzzerTestOneInput(exact, (size_t)n);
    free(exact);
    ifd__n_inputs++;
    size_t size = (size_t)n;
    for (int m = 0; m < mutations; m++) {
        size_t len = size;
        memcpy(mut, buf, size);
        int kind = (int)(ifd__next() % 4);
        size_t at = len ? (size_t)(ifd__next() % len) : 0;
        if (kind == 0) { /* truncate */
            len = at;
        } else if (kind == 1 && len) { /* flip a bit */
            mut[at] ^= (uint8_t)(1u << (ifd__next() % 8));
        } else if (kind == 2) { /* insert a byte */
            memmove(mut + at + 1, mut + at, len - at);
            mut[at] = (uint8_t)ifd__next();
            len++;
        } else if (len) { /* delete a byte */
            memmove(mut + at, mut + at + 1, len - at - 1);
            len--;
        }
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, mut, len);
        LLVMFuzzerTestOneInput(copy, len);
        free(copy);
        ifd__n_mutations++;
    }
    free(buf);
    free(mut);
}

static int ifd__cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void ifd__run_path(const char *path, int mutations)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz: %s: no such file\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        ifd__run_file(path, mutations);
        return;
    }
    DIR *d = opendir(path);
    if (!d)
        exit(2);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, cap * sizeof *names);
        }
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        snprintf(names[n], l, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, ifd__cmp); /* the same order everywhere */
    for (size_t i = 0; i < n; i++) {
        ifd__run_path(names[i], mutations);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    int mutations = 64;
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--mutations")) {
        mutations = atoi(argv[2]);
        first = 3;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: %s [--mutations N] PATH...\n", argv[0]);
        return 2;
    }
    for (int i = first; i < argc; i++)
        ifd__run_path(argv[i], mutations);
    printf("%zu inputs, %zu mutations: no failure\n", ifd__n_inputs, ifd__n_mutations);
    return ifd__n_inputs ? 0 : 2;
}
