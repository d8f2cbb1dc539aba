/*
 * inspect.h — a human- and machine-readable summary of a GGUF model file:
 * architecture, hyper-parameters, tokenizer summary and the tensor table.
 * Shared by `inferd-worker --inspect` and `infer inspect`.
 *
 * Threading: none of its own; the gguf handle is only read.
 */
#ifndef IFD_INSPECT_H
#define IFD_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "gguf.h"

/* Writes the summary of `g` to `out`: an aligned text report, or one JSON
 * object (json = true). Returns 0, IFD_ENOMEM, or -errno of a failed write. */
int ifd_inspect_write(FILE *out, const ifd_gguf_t *g, bool json);

/* Opens `path`, writes its summary, closes it. On a bad file, prints the
 * reader's message to `err` and returns its code. For the CLIs. */
int ifd_inspect_file(FILE *out, FILE *err, const char *path, bool json);

#endif
