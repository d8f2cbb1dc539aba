/*
 * fuzz_safetensors.c — the safetensors reader (common/modelfile/safetensors.h) on a
 * file holding the input. The reader works on paths (it mmaps every shard),
 * so each input is written to one file in a private temporary directory made
 * at start-up and removed at exit. Properties: no memory error; an accepted
 * file's tensors are sorted by name, found by name, have at most
 * IFD_ST_MAX_DIMS non-negative dimensions whose product is n_elems, and lie
 * wholly inside the file; a refusal carries a message.
 */
#include "fuzz.h"

#include "modelfile/safetensors.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static char ifd__dir[64], ifd__path[96];

static void ifd__cleanup(void)
{
    unlink(ifd__path);
    rmdir(ifd__dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(ifd__dir, sizeof ifd__dir, "/tmp/ifd-fuzz-st-XXXXXX");
    IFD_FUZZ_CHECK(mkdtemp(ifd__dir) != NULL);
    snprintf(ifd__path, sizeof ifd__path, "%s/model.safetensors", ifd__dir);
    atexit(ifd__cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ifd__dir[0])
        LLVMFuzzerInitialize(NULL, NULL);
    int fd = open(ifd__path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    IFD_FUZZ_CHECK(fd >= 0);
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        IFD_FUZZ_CHECK(n > 0);
        off += (size_t)n;
    }
    close(fd);

    ifd_safetensors_t *st = NULL;
    char err[512] = "";
    int rc = ifd_safetensors_open(&st, ifd__path, err, sizeof err);
    if (rc) {
        IFD_FUZZ_CHECK(rc < 0 && err[0]);
        return 0;
    }
    IFD_FUZZ_CHECK(ifd_safetensors_n_files(st) == 1);
    IFD_FUZZ_CHECK(ifd_safetensors_total_bytes(st) == size);
    size_t n = ifd_safetensors_count(st);
    const uint8_t *lo = NULL, *hi = NULL;
    for (size_t i = 0; i < n; i++) {
        const ifd_st_tensor_t *t = ifd_safetensors_at(st, i);
        IFD_FUZZ_CHECK(t && t->name && t->n_dims <= IFD_ST_MAX_DIMS);
        IFD_FUZZ_CHECK(ifd_safetensors_find(st, t->name) == t);
        if (i > 0)
            IFD_FUZZ_CHECK(strcmp(ifd_safetensors_at(st, i - 1)->name, t->name) < 0);
        uint64_t elems = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            IFD_FUZZ_CHECK(t->shape[d] >= 0);
            elems *= (uint64_t)t->shape[d];
        }
        IFD_FUZZ_CHECK(elems == t->n_elems);
        IFD_FUZZ_CHECK(t->nbytes <= size);
        if (t->nbytes) {
            /* every data pointer is inside the one mapping of `size` bytes:
             * track the span they cover, which must fit in it */
            const uint8_t *a = t->data, *b = a + t->nbytes;
            lo = !lo || a < lo ? a : lo;
            hi = !hi || b > hi ? b : hi;
            IFD_FUZZ_CHECK((size_t)(hi - lo) <= size);
            volatile uint8_t sink = a[0] ^ b[-1]; /* ASan sees a read outside */
            (void)sink;
        }
    }
    IFD_FUZZ_CHECK(ifd_safetensors_find(st, "\x01 no such tensor") == NULL);
    ifd_safetensors_close(st);
    return 0;
}
