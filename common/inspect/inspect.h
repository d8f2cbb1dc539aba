/*
 * inspect.h — a human- and machine-readable summary of a model, the same
 * report for a GGUF file and a Hugging Face directory: "format" ("gguf" /
 * "hf"), "source" (the path), "files", "architecture", the resolved config
 * inferd will run ("hparams"), the tokenizer as loaded, generation_config.json's
 * defaults (HF), the tensors as the file stores them, plus what only the
 * format has (GGUF version, alignment, file type; HF class and torch_dtype).
 * Shared by `inferd-worker --inspect`, `inferd --inspect` and `infer inspect`.
 *
 * Servable or not: every report says whether inferd can serve the model
 * ("servable", and "not_servable_reason": the loader's message). A
 * well-formed file it cannot serve is still described: a GGUF of another
 * architecture or holding only a vocabulary gets its container facts,
 * every metadata pair ("metadata": scalars, arrays as "[N x TYPE]"), the
 * tokenizer when it loads and its tensors; a Hugging Face directory of an
 * unknown model type gets config.json's class, type, dtype and top-level
 * scalars ("config"), the tokenizer and the shards' tensors when present.
 * The text form prints it as a line of its own: "servable: yes" or
 * "servable: no — WHY". Malformed files (a GGUF container the reader
 * refuses, an unparsable config.json, broken shards) are errors.
 *
 * Threading: none of its own; the source and tokenizer are only read.
 */
#ifndef IFD_INSPECT_H
#define IFD_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "modelfile/model_source.h"
#include "tokenizer/tokenizer.h"

/* Writes the summary of an open model source (`tok` is its tokenizer) to
 * `out`: an aligned text report, or one JSON object (json = true). Returns
 * 0, IFD_ENOMEM, or -errno of a failed write. */
int ifd_inspect_source(FILE *out, const ifd_model_source_t *src, const ifd_tokenizer_t *tok,
                       bool json);

/* Opens `path` (a GGUF file or a Hugging Face directory), writes its
 * summary — servable or not, as above — and closes it. On a malformed or
 * missing file, prints the reader's message to `err` and returns its code.
 * For the CLIs. */
int ifd_inspect_file(FILE *out, FILE *err, const char *path, bool json);

#endif
