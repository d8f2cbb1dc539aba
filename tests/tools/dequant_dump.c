/*
 * dequant_dump.c — test tool: dequantizes tensors with ifd_cpu_dequantize
 * and writes them as float32 NumPy .npy files, for the comparison against the
 * PyPI gguf package (tests/integration/test_dequant_vs_gguf.py).
 *
 *   dequant_dump MODEL.gguf OUTDIR NAME...
 *       tensor NAME -> OUTDIR/<k>.npy (k = 0, 1, … in argument order), flat
 *       [n_elements]; prints "k NAME TYPE N" per tensor.
 *   dequant_dump --raw TYPE N IN.bin OUT.npy
 *       N elements of ggml type id TYPE, packed blocks read from IN.bin.
 *   dequant_dump --list MODEL.gguf
 *       one line per tensor: NAME TYPE N FILE_OFFSET NBYTES (so a script can
 *       read the raw bytes without parsing the whole file itself).
 *
 * Exit status 0 on success, 1 on any error (message on stderr).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "error.h"
#include "modelfile/ggml_types.h"
#include "modelfile/gguf.h"

/* .npy version 1.0: magic, version, u16 header length, a Python dict literal
 * padded with spaces and ended by '\n' so that the data starts at a multiple
 * of 64 bytes. */
static int write_npy(const char *path, const float *y, uint64_t n)
{
    char hdr[128];
    int len = snprintf(hdr, sizeof hdr,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRIu64 ",), }", n);
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint16_t hl = (uint16_t)(len + pad + 1);
    unsigned char pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    size_t w = fwrite(y, sizeof *y, n, f);
    if (fclose(f) != 0 || w != n) {
        fprintf(stderr, "%s: write failed\n", path);
        return 1;
    }
    return 0;
}

static int dump(const void *data, uint32_t type, uint64_t n, const char *out)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    if (!y) {
        fprintf(stderr, "out of memory for %" PRIu64 " floats\n", n);
        return 1;
    }
    int rc = ifd_cpu_dequantize(y, data, type, (int64_t)n);
    if (rc != 0) {
        fprintf(stderr, "dequantize %s x %" PRIu64 ": %s\n", ifd_ggml_type_name(type), n,
                ifd_strerror(rc));
        free(y);
        return 1;
    }
    rc = write_npy(out, y, n);
    free(y);
    return rc;
}

static int raw_mode(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s --raw TYPE N IN.bin OUT.npy\n", argv[0]);
        return 1;
    }
    uint32_t type = (uint32_t)strtoul(argv[2], NULL, 10);
    uint64_t n = strtoull(argv[3], NULL, 10), bytes;
    if (ifd_ggml_row_bytes(type, n, &bytes) != 0) {
        fprintf(stderr, "bad type %u or count %" PRIu64 "\n", type, n);
        return 1;
    }
    FILE *f = fopen(argv[4], "rb");
    if (!f) {
        perror(argv[4]);
        return 1;
    }
    void *x = malloc(bytes ? bytes : 1);
    size_t got = x ? fread(x, 1, bytes, f) : 0;
    fclose(f);
    if (got != bytes) {
        fprintf(stderr, "%s: expected %" PRIu64 " bytes\n", argv[4], bytes);
        free(x);
        return 1;
    }
    int rc = dump(x, type, n, argv[5]);
    free(x);
    return rc;
}

static int list_mode(const char *path)
{
    ifd_gguf_t *g;
    char err[512];
    if (ifd_gguf_open(&g, path, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (uint64_t i = 0; i < ifd_gguf_tensor_count(g); i++) {
        const ifd_gguf_tensor_t *t = ifd_gguf_tensor(g, i);
        uint64_t n = 1;
        for (uint32_t d = 0; d < IFD_GGUF_MAX_DIMS; d++)
            n *= t->ne[d];
        printf("%s %s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", t->name, ifd_ggml_type_name(t->type),
               n, ifd_gguf_data_offset(g) + t->offset, t->nbytes);
    }
    ifd_gguf_close(g);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--raw") == 0)
        return raw_mode(argc, argv);
    if (argc == 3 && strcmp(argv[1], "--list") == 0)
        return list_mode(argv[2]);
    if (argc < 4) {
        fprintf(stderr,
                "usage: %s MODEL.gguf OUTDIR NAME...\n       %s --raw TYPE N IN.bin OUT.npy\n"
                "       %s --list MODEL.gguf\n",
                argv[0], argv[0], argv[0]);
        return 1;
    }
    ifd_gguf_t *g;
    char err[512];
    if (ifd_gguf_open(&g, argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rc = 0;
    for (int k = 3; k < argc && rc == 0; k++) {
        const ifd_gguf_tensor_t *t = ifd_gguf_find_tensor(g, argv[k]);
        if (!t) {
            fprintf(stderr, "%s: no tensor '%s'\n", argv[1], argv[k]);
            rc = 1;
            break;
        }
        uint64_t n = 1;
        for (uint32_t d = 0; d < IFD_GGUF_MAX_DIMS; d++)
            n *= t->ne[d];
        char out[4096];
        snprintf(out, sizeof out, "%s/%d.npy", argv[2], k - 3);
        rc = dump(t->data, t->type, n, out);
        if (rc == 0)
            printf("%d %s %s %" PRIu64 "\n", k - 3, t->name, ifd_ggml_type_name(t->type), n);
    }
    ifd_gguf_close(g);
    return rc;
}
