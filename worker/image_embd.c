/*
 * image_embd.c — --image-embd (image_embd.h). The .npy reader takes the one
 * layout NumPy writes for a 2-D float32 array: version 1 or 2 header with
 * descr '<f4', fortran_order False, shape (len, n_embd).
 */
#include "image_embd.h"

#include "error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads FILE's rows into *rows (malloc'ed), *len of them. */
static int ifd__npy_rows(const char *path, int n_embd, float **rows, int *len, char *err,
                         size_t errlen)
{
    FILE *f = fopen(path, "rb");
    unsigned char pre[12];
    char hdr[1024];
    int rc = IFD_EINVAL;
    *rows = NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open", path);
        return IFD_EINVAL;
    }
    size_t hl = 0;
    if (fread(pre, 1, 10, f) == 10 && memcmp(pre, "\x93NUMPY", 6) == 0) {
        hl = pre[6] == 1 ? (size_t)(pre[8] | pre[9] << 8) : 0;
        if (pre[6] == 2 && fread(pre + 10, 1, 2, f) == 2)
            hl = (size_t)(pre[8] | pre[9] << 8 | pre[10] << 16 | pre[11] << 24);
    }
    long r = -1, c = -1;
    if (hl > 0 && hl < sizeof hdr && fread(hdr, 1, hl, f) == hl) {
        hdr[hl] = '\0';
        const char *sh = strstr(hdr, "'shape': (");
        if (strstr(hdr, "'descr': '<f4'") && strstr(hdr, "'fortran_order': False") && sh)
            sscanf(sh, "'shape': (%ld, %ld)", &r, &c);
    }
    if (r < 1 || r > 1 << 20 || c != n_embd) {
        snprintf(err, errlen, "%s: not a float32 .npy of shape (len, %d)", path, n_embd);
    } else if (!(*rows = malloc((size_t)r * (size_t)c * sizeof(float)))) {
        rc = IFD_ENOMEM;
    } else if (fread(*rows, sizeof(float), (size_t)r * (size_t)c, f) != (size_t)r * (size_t)c) {
        snprintf(err, errlen, "%s: truncated", path);
    } else {
        *len = (int)r;
        rc = 0;
    }
    fclose(f);
    if (rc) {
        free(*rows);
        *rows = NULL;
    }
    return rc;
}

void ifd_image_embd_free(ifd_image_embd_t *ie)
{
    for (int i = 0; ie->rows && i < ie->n_images; i++)
        free(ie->rows[i]);
    free(ie->rows);
    free(ie->kv_last);
    free((void *)ie->embd);
    memset(ie, 0, sizeof *ie);
}

int ifd_image_embd_load(ifd_image_embd_t *ie, const char *const *specs, int n, int n_prompt,
                        int n_embd, char *err, size_t errlen)
{
    memset(ie, 0, sizeof *ie);
    ie->kv_last = malloc((size_t)n_prompt * sizeof *ie->kv_last);
    ie->embd = calloc((size_t)n_prompt, sizeof *ie->embd);
    ie->rows = calloc((size_t)(n > 0 ? n : 1), sizeof *ie->rows);
    if (!ie->kv_last || !ie->embd || !ie->rows) {
        ifd_image_embd_free(ie);
        return IFD_ENOMEM;
    }
    for (int p = 0; p < n_prompt; p++)
        ie->kv_last[p] = p;
    for (int i = 0; i < n; i++) {
        char *end;
        long pos = strtol(specs[i], &end, 10);
        int len = 0, rc;
        if (end == specs[i] || *end != ':' || pos < 0) {
            snprintf(err, errlen, "--image-embd '%s': expected POS:FILE.npy", specs[i]);
            rc = IFD_EINVAL;
        } else {
            rc = ifd__npy_rows(end + 1, n_embd, &ie->rows[i], &len, err, errlen);
        }
        ie->n_images = i + 1;
        bool clash = rc == 0 && pos + len > n_prompt;
        for (int j = 0; rc == 0 && !clash && j < len; j++)
            clash = ie->embd[pos + j] != NULL;
        if (clash) {
            snprintf(err, errlen,
                     "--image-embd '%s': %d rows at %ld overlap another image or "
                     "pass the prompt's %d tokens",
                     specs[i], len, pos, n_prompt);
            rc = IFD_EINVAL;
        }
        if (rc) {
            ifd_image_embd_free(ie);
            return rc;
        }
        for (int j = 0; j < len; j++) {
            ie->kv_last[pos + j] = (int32_t)(pos + len - 1);
            ie->embd[pos + j] = ie->rows[i] + (size_t)j * (size_t)n_embd;
        }
    }
    return 0;
}
