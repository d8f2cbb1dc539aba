/*
 * serve_vision.h — the serving worker's half of the image path (issue 28,
 * docs/vision.md): the vision tower beside the text model, the image
 * processor's second half, the embedding cache, and the requests waiting
 * for their images' rows.
 *
 * Where the tower comes from: --mmproj / HELLO's mmproj_path (llama.cpp's
 * mmproj GGUF, ifd_model_source_open_mmproj), else the text model's own
 * Hugging Face Gemma3ForConditionalGeneration directory
 * (ifd_model_source_vision). The processor's parameters: the model
 * directory's preprocessor_config.json (ifd_image_prep_from_json), else an
 * mmproj's clip.vision.image_mean / image_std, else Gemma 3's defaults —
 * its picture size must be the tower's.
 *
 * The flow of an ADD with pictures (proto/wire.h, ifd_wire_image_t):
 * ifd_serve_vision_submit checks it (a tower, each picture the tower's
 * size, n_tokens = tokens_per_image, the prompt's tokens there all the image
 * id, in order and disjoint) and queues it, taking the frame over;
 * ifd_serve_vision_step, called between engine steps, does one bounded
 * piece of the queue's work — a cache lookup costs nothing, an encode runs
 * about step_ms of work per call (the picture's normalization and the
 * upload of its patches, ifd_vision_encode_begin, are one call's piece;
 * every phase after it, the patch embedding and the projector included,
 * runs in pieces within the budget) — and
 * returns a job once all its pictures have rows, for the caller to give the
 * engine (ifd_engine_request_t.images). Requests wait in arrival order; a
 * cancelled one leaves the queue (ifd_serve_vision_cancel).
 *
 * Ownership: the caller's backend outlives the object; a job returned by
 * step belongs to the caller (ifd_serve_vision_job_free). Threading: the
 * serving thread only.
 */
#ifndef IFD_SERVE_VISION_H
#define IFD_SERVE_VISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "engine.h"
#include "proto/wire.h"
#include "tokenizer/tokenizer.h"

typedef struct ifd_serve_vision ifd_serve_vision_t;

typedef struct {
    const char *model_path;     /* the text model (a directory may bring a tower); NULL: none */
    const char *mmproj_path;    /* an mmproj GGUF; NULL or "": none */
    const ifd_tokenizer_t *tok; /* the text model's: an mmproj's special ids; may be NULL */
    uint32_t text_embd;         /* the text model's width: the tower's output must match */
    uint64_t cache_bytes;       /* the embedding cache's bound (image_cache.h) */
    /* An encode's time per step call, the pause an engine step waits: the
     * FLOPs of ifd_vision_encode_step_flops from the rate the previous
     * calls measured (the first call of the worker's first encode runs the
     * smallest piece, 16 rows). 0: one whole phase per call (vision.h). */
    uint32_t step_ms;
    double step_flops; /* > 0: this fixed budget per call instead of step_ms (tests) */
} ifd_serve_vision_params_t;

/* The default step_ms of the worker (--vision-step-ms). */
#define IFD_SERVE_VISION_STEP_MS 50u

/* The default embedding cache bound: 256 MiB (100 pictures of Gemma 3 4B's
 * 256 × 2560 floats). */
#define IFD_SERVE_VISION_CACHE_MB 256u

/* An ADD waiting for (or done with) its pictures' rows. */
typedef struct ifd_serve_vision_job {
    ifd_wire_msg_t msg;         /* the ADD, owned */
    ifd_engine_image_t *images; /* [msg.u.add.n_images]: start, len, hash, rows in `rows` */
    float *rows;                /* every picture's tokens_per_image × text width floats */
    uint32_t done;              /* pictures with rows */
    int rc;                     /* 0, or why the request failed (message in err) */
    char err[256];
    struct ifd_serve_vision_job *next; /* the queue */
} ifd_serve_vision_job_t;

/*
 * Loads the tower onto be. 0 with *out set; 0 with *out NULL when there is
 * no tower to serve (a text model, or one whose tower cannot load: the
 * reason is logged as a warning and the worker serves text only); an error
 * with the reason in err when mmproj_path was given and cannot be served
 * (the start fails: the user asked for it).
 */
int ifd_serve_vision_create(ifd_serve_vision_t **out, const ifd_serve_vision_params_t *p,
                            ifd_backend_t *be, char *err, size_t errlen);
void ifd_serve_vision_destroy(ifd_serve_vision_t *v); /* NULL is a no-op; frees queued jobs */

/* READY's vision (all zero for v NULL: no images). */
void ifd_serve_vision_ready(const ifd_serve_vision_t *v, ifd_wire_vision_t *out);

/*
 * Checks the ADD *m (its n_images > 0) and queues it: 0 with the frame taken
 * over (*m left empty, its type kept); otherwise *m is untouched and err
 * says why (IFD_ENOTSUP: no tower, or prompt_logprobs asked; IFD_EINVAL: a picture of the wrong
 * size or count of tokens, tokens that are not the image id; IFD_ENOMEM). The frame is one the wire
 * decoder accepted (pictures in order, disjoint, inside the prompt, of width × height × 3 bytes). v
 * may be NULL (IFD_ENOTSUP).
 */
int ifd_serve_vision_submit(ifd_serve_vision_t *v, ifd_wire_msg_t *m, char *err, size_t errlen);

/* One bounded piece of the queue's work (above). The first job when all its
 * pictures have rows or it failed (job->rc), removed from the queue; else
 * NULL. */
ifd_serve_vision_job_t *ifd_serve_vision_step(ifd_serve_vision_t *v);

/* Jobs queued (0 for v NULL). */
uint32_t ifd_serve_vision_pending(const ifd_serve_vision_t *v);

/* Removes request id from the queue (an encode in progress for it is
 * abandoned); true when it was there, with its prompt length in *n_prompt.
 * v may be NULL. */
bool ifd_serve_vision_cancel(ifd_serve_vision_t *v, uint64_t id, uint32_t *n_prompt);

void ifd_serve_vision_job_free(ifd_serve_vision_job_t *j); /* NULL is a no-op */

#endif
