/*
 * inspect.h — a human- and machine-readable summary of a model: a GGUF file
 * (its metadata as stored) or a Hugging Face directory (the resolved config
 * inferd will run, the tokenizer as loaded, generation_config.json's
 * defaults, the safetensors tensors). Both carry "format" ("gguf" / "hf"),
 * "source" (the path) and "architecture". Shared by `inferd-worker
 * --inspect` and `infer inspect`.
 *
 * Threading: none of its own; the gguf handle is only read.
 */
#ifndef IFD_INSPECT_H
#define IFD_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "gguf.h"
#include "model_source.h"
#include "tokenizer.h"

/* Writes the summary of `g` to `out`: an aligned text report, or one JSON
 * object (json = true). Returns 0, IFD_ENOMEM, or -errno of a failed write. */
int ifd_inspect_write(FILE *out, const ifd_gguf_t *g, bool json);

/* The summary of an open model source (`tok` is its tokenizer; used for a
 * Hugging Face directory, ignored for GGUF). Same returns. */
int ifd_inspect_source(FILE *out, const ifd_model_source_t *src, const ifd_tokenizer_t *tok,
                       bool json);

/* Opens `path` (a GGUF file or a Hugging Face directory), writes its summary, closes it. On a bad file, prints the
 * reader's message to `err` and returns its code. For the CLIs. */
int ifd_inspect_file(FILE *out, FILE *err, const char *path, bool json);

#endif
