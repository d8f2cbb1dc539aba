/*
 * wire.c — router↔worker frames: table-driven msgpack encode/decode.
 *
 * Every message body is described once by a table of fields (kind, offset,
 * limit, nested table). One generic encoder, decoder and destructor walk
 * those tables, so adding a field is one line and every message gets the
 * same checks.
 *
 * Encoding uses msgpack-c's packer. Decoding uses the small bounds-checked
 * cursor below rather than msgpack-c's unpacker: that one allocates
 * count * sizeof(msgpack_object) for an array as soon as it reads the
 * count, so a 5-byte body claiming 2^32 elements would ask for 64 GiB
 * before anything could check it. Here every count is checked against its
 * field's limit and against the bytes left (each element takes at least
 * one byte) before anything is allocated, and every read is checked
 * against the end of the body.
 */
#include "wire.h"

#include "error.h"

#include <msgpack.h>

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema tables ------------------------------------------------------------ */

enum {
    F_BOOL,
    F_U32,
    F_I32,
    F_U64,
    F_F32,
    F_F64,
    F_STR,     /* char *, NUL-terminated; max = byte limit */
    F_ARR_I32, /* int32_t * + uint32_t count; max = element limit */
    F_ARR,     /* struct array + uint32_t count; max = element limit */
    F_STRUCT,  /* nested struct, inline */
    F_BIN,     /* uint8_t * + uint32_t count (msgpack bin); max = byte limit */
};

typedef struct wstruct wstruct_t;

typedef struct {
    const char *name;
    uint8_t kind;
    uint32_t off;       /* of the value (or the pointer) */
    uint32_t count_off; /* F_ARR*, of the uint32_t count */
    uint64_t max;       /* U32/U64: largest value (0: any); STR/ARR: limit */
    const wstruct_t *sub;
} wfield_t;

/* check: cross-field invariants of a decoded (or to-be-encoded) struct. */
struct wstruct {
    const char *name;
    uint32_t size;
    const wfield_t *fields;
    uint32_t n_fields;
    int (*check)(const void *obj, char *err, size_t errlen);
};

#define FLD(T, m, kind, max)                                                                       \
    {                                                                                              \
#m, kind, (uint32_t)offsetof(T, m), 0, max, NULL                                           \
    }
#define FBOOL(T, m)     FLD(T, m, F_BOOL, 0)
#define FU32(T, m)      FLD(T, m, F_U32, 0)
#define FU32M(T, m, mx) FLD(T, m, F_U32, mx)
#define FI32(T, m)      FLD(T, m, F_I32, 0)
#define FU64(T, m)      FLD(T, m, F_U64, 0)
#define FF32(T, m)      FLD(T, m, F_F32, 0)
#define FF64(T, m)      FLD(T, m, F_F64, 0)
#define FSTR(T, m)      FLD(T, m, F_STR, IFD_WIRE_MAX_STR)
#define FARR_I32(T, m, cnt, mx)                                                                    \
    {                                                                                              \
#m, F_ARR_I32, (uint32_t)offsetof(T, m), (uint32_t)offsetof(T, cnt), mx, NULL              \
    }
#define FARR(T, m, cnt, mx, sub)                                                                   \
    {                                                                                              \
#m, F_ARR, (uint32_t)offsetof(T, m), (uint32_t)offsetof(T, cnt), mx, sub                   \
    }
#define FBIN(T, m, cnt, mx)                                                                        \
    {                                                                                              \
#m, F_BIN, (uint32_t)offsetof(T, m), (uint32_t)offsetof(T, cnt), mx, NULL                  \
    }
#define FSTRUCT(T, m, sub)                                                                         \
    {                                                                                              \
#m, F_STRUCT, (uint32_t)offsetof(T, m), 0, 0, sub                                          \
    }
#define NF(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const wfield_t kv_fields[] = {
    FU32(ifd_wire_kv_geometry_t, n_layers),    FU32(ifd_wire_kv_geometry_t, n_kv_heads),
    FU32(ifd_wire_kv_geometry_t, head_dim),    FU32M(ifd_wire_kv_geometry_t, dtype, 5),
    FU32(ifd_wire_kv_geometry_t, block_size),  FU64(ifd_wire_kv_geometry_t, n_blocks),
    FU64(ifd_wire_kv_geometry_t, fingerprint),
};
static const wstruct_t kv_desc = {"kv", sizeof(ifd_wire_kv_geometry_t), kv_fields, NF(kv_fields),
                                  NULL};

static int check_spec(const void *obj, char *err, size_t errlen)
{
    const ifd_wire_spec_t *sp = obj;
    if (sp->ngram_min && sp->ngram_max && sp->ngram_min > sp->ngram_max) {
        seterr(err, errlen, "spec ngram_min %u above ngram_max %u", sp->ngram_min, sp->ngram_max);
        return IFD_ERANGE;
    }
    return 0;
}

static const wfield_t spec_fields[] = {
    FU32M(ifd_wire_spec_t, method, 3),
    FU32M(ifd_wire_spec_t, num_tokens, IFD_WIRE_MAX_SPEC_TOKENS),
    FU32M(ifd_wire_spec_t, ngram_min, IFD_WIRE_MAX_SPEC_NGRAM),
    FU32M(ifd_wire_spec_t, ngram_max, IFD_WIRE_MAX_SPEC_NGRAM),
};
static const wstruct_t spec_desc = {"spec", sizeof(ifd_wire_spec_t), spec_fields, NF(spec_fields),
                                    check_spec};

static int check_hello(const void *obj, char *err, size_t errlen)
{
    const ifd_wire_hello_t *h = obj;
    if (h->size_pool && !(h->gpu_memory_fraction > 0.0 && h->gpu_memory_fraction <= 1.0)) {
        seterr(err, errlen, "gpu_memory_fraction %g outside (0, 1]", h->gpu_memory_fraction);
        return IFD_ERANGE;
    }
    return 0;
}

static const wfield_t hello_fields[] = {
    FU32(ifd_wire_hello_t, slot),       FSTR(ifd_wire_hello_t, model_path),
    FSTR(ifd_wire_hello_t, backend),    FI32(ifd_wire_hello_t, device),
    FU32(ifd_wire_hello_t, kv_device),  FU32(ifd_wire_hello_t, n_threads),
    FU32(ifd_wire_hello_t, max_seqs),   FU32(ifd_wire_hello_t, max_batched_tokens),
    FI32(ifd_wire_hello_t, prefill_cap), FU32M(ifd_wire_hello_t, n_fds, 64),
    FU32M(ifd_wire_hello_t, n_local_fds, 2), FSTRUCT(ifd_wire_hello_t, kv, &kv_desc),
    FBOOL(ifd_wire_hello_t, size_pool), FF64(ifd_wire_hello_t, gpu_memory_fraction),
    FU32(ifd_wire_hello_t, max_model_len), FSTRUCT(ifd_wire_hello_t, spec, &spec_desc),
    FSTR(ifd_wire_hello_t, draft_model_path), FSTR(ifd_wire_hello_t, mmproj_path),
};
static const wstruct_t hello_desc = {"hello", sizeof(ifd_wire_hello_t), hello_fields,
                                     NF(hello_fields), check_hello};

static const wfield_t pool_fields[] = {
    FU32M(ifd_wire_pool_t, n_fds, 64),
    FU32M(ifd_wire_pool_t, n_local_fds, 2),
    FSTRUCT(ifd_wire_pool_t, kv, &kv_desc),
};
static const wstruct_t pool_desc = {"pool", sizeof(ifd_wire_pool_t), pool_fields, NF(pool_fields),
                                    NULL};

static const wfield_t pool_size_fields[] = {
    FU64(ifd_wire_pool_size_t, n_blocks),         FU64(ifd_wire_pool_size_t, usable_bytes),
    FU64(ifd_wire_pool_size_t, block_bytes),      FU64(ifd_wire_pool_size_t, total_bytes),
    FU64(ifd_wire_pool_size_t, free_bytes),       FU64(ifd_wire_pool_size_t, weight_bytes),
    FU64(ifd_wire_pool_size_t, activation_bytes), FU64(ifd_wire_pool_size_t, graph_bytes),
    FU64(ifd_wire_pool_size_t, margin_bytes),     FU32(ifd_wire_pool_size_t, n_graphs),
    FSTR(ifd_wire_pool_size_t, device),
};
static const wstruct_t pool_size_desc = {"pool_size", sizeof(ifd_wire_pool_size_t),
                                         pool_size_fields, NF(pool_size_fields), NULL};

static const wfield_t bias_fields[] = {
    FI32(ifd_wire_logit_bias_t, id),
    FF32(ifd_wire_logit_bias_t, bias),
};
static const wstruct_t bias_desc = {"logit_bias", sizeof(ifd_wire_logit_bias_t), bias_fields,
                                    NF(bias_fields), NULL};

static int check_sampling(const void *obj, char *err, size_t errlen)
{
    const ifd_wire_sampling_t *s = obj;
    if (s->n_logprobs < -1 || s->n_logprobs > (int32_t)IFD_WIRE_MAX_TOP) {
        seterr(err, errlen, "n_logprobs %d outside [-1, %u]", s->n_logprobs, IFD_WIRE_MAX_TOP);
        return IFD_ERANGE;
    }
    return 0;
}

static const wfield_t sampling_fields[] = {
    FF32(ifd_wire_sampling_t, temperature),
    FI32(ifd_wire_sampling_t, top_k),
    FF32(ifd_wire_sampling_t, top_p),
    FF32(ifd_wire_sampling_t, min_p),
    FF32(ifd_wire_sampling_t, repetition_penalty),
    FF32(ifd_wire_sampling_t, frequency_penalty),
    FF32(ifd_wire_sampling_t, presence_penalty),
    FARR(ifd_wire_sampling_t, logit_bias, n_logit_bias, IFD_WIRE_MAX_LOGIT_BIAS, &bias_desc),
    FI32(ifd_wire_sampling_t, n_logprobs),
    FU32M(ifd_wire_sampling_t, logprobs_mode, 1),
    FU64(ifd_wire_sampling_t, seed),
};
static const wstruct_t sampling_desc = {"sampling", sizeof(ifd_wire_sampling_t), sampling_fields,
                                        NF(sampling_fields), check_sampling};

static int check_image(const void *obj, char *err, size_t errlen)
{
    const ifd_wire_image_t *im = obj;
    if (im->n_tokens == 0 || im->width == 0 || im->height == 0) {
        seterr(err, errlen, "an empty image (%u tokens, %ux%u)", im->n_tokens, im->width,
               im->height);
        return IFD_ERANGE;
    }
    if ((uint64_t)im->width * im->height * 3 != im->n_pixels) {
        seterr(err, errlen, "%u pixel bytes for %ux%u RGB", im->n_pixels, im->width, im->height);
        return IFD_ERANGE;
    }
    return 0;
}

static const wfield_t image_fields[] = {
    FU32(ifd_wire_image_t, pos),
    FU32(ifd_wire_image_t, n_tokens),
    FU64(ifd_wire_image_t, hash_lo),
    FU64(ifd_wire_image_t, hash_hi),
    FU32M(ifd_wire_image_t, width, IFD_WIRE_MAX_IMAGE_SIDE),
    FU32M(ifd_wire_image_t, height, IFD_WIRE_MAX_IMAGE_SIDE),
    FBIN(ifd_wire_image_t, pixels, n_pixels, IFD_WIRE_MAX_BODY),
};
static const wstruct_t image_desc = {"images", sizeof(ifd_wire_image_t), image_fields,
                                     NF(image_fields), check_image};

/* Images in prompt order, inside the prompt (not the resumed tokens), not overlapping. */
static int check_add_images(const ifd_wire_add_t *a, char *err, size_t errlen)
{
    uint64_t prompt = a->n_tokens - a->n_generated, end = 0;
    for (uint32_t i = 0; i < a->n_images; i++) {
        const ifd_wire_image_t *im = &a->images[i];
        if (im->pos < end || (uint64_t)im->pos + im->n_tokens > prompt) {
            seterr(err, errlen, "images[%u] at %u+%u overlaps another or leaves the %llu-token "
                   "prompt", i, im->pos, im->n_tokens, (unsigned long long)prompt);
            return IFD_ERANGE;
        }
        end = (uint64_t)im->pos + im->n_tokens;
    }
    return 0;
}

static int check_add(const void *obj, char *err, size_t errlen)
{
    const ifd_wire_add_t *a = obj;
    if (a->id == 0) {
        seterr(err, errlen, "id must be nonzero");
        return IFD_ERANGE;
    }
    if (a->n_tokens == 0) {
        seterr(err, errlen, "tokens is empty");
        return IFD_ERANGE;
    }
    if (a->n_generated >= a->n_tokens) {
        seterr(err, errlen, "n_generated %u leaves no prompt in %u tokens", a->n_generated,
               a->n_tokens);
        return IFD_ERANGE;
    }
    if (a->max_tokens == 0) {
        seterr(err, errlen, "max_tokens must be >= 1");
        return IFD_ERANGE;
    }
    return check_add_images(a, err, errlen);
}

static const wfield_t add_fields[] = {
    FU64(ifd_wire_add_t, id),
    FARR_I32(ifd_wire_add_t, tokens, n_tokens, IFD_WIRE_MAX_TOKENS),
    FU32(ifd_wire_add_t, n_generated),
    FSTRUCT(ifd_wire_add_t, sampling, &sampling_desc),
    FARR_I32(ifd_wire_add_t, stop_ids, n_stop_ids, IFD_WIRE_MAX_STOP_IDS),
    FU32(ifd_wire_add_t, max_tokens),
    FBOOL(ifd_wire_add_t, ignore_eos),
    FI32(ifd_wire_add_t, priority),
    FBOOL(ifd_wire_add_t, use_cache),
    FARR_I32(ifd_wire_add_t, grammar, n_grammar, IFD_WIRE_MAX_GRAMMAR),
    FU32(ifd_wire_add_t, min_tokens),
    FU32M(ifd_wire_add_t, prompt_logprobs, 1 + IFD_WIRE_MAX_TOP),
    FU32(ifd_wire_add_t, client),
    FARR_I32(ifd_wire_add_t, allowed_ids, n_allowed_ids, IFD_WIRE_MAX_ALLOWED),
    FARR_I32(ifd_wire_add_t, lp_ids, n_lp_ids, IFD_WIRE_MAX_LP_IDS),
    FSTRUCT(ifd_wire_add_t, spec, &spec_desc),
    FARR(ifd_wire_add_t, images, n_images, IFD_WIRE_MAX_IMAGES, &image_desc),
};
static const wstruct_t add_desc = {"add", sizeof(ifd_wire_add_t), add_fields, NF(add_fields),
                                   check_add};

static const wfield_t cancel_fields[] = {FU64(ifd_wire_cancel_t, id)};
static const wstruct_t cancel_desc = {"cancel", sizeof(ifd_wire_cancel_t), cancel_fields,
                                      NF(cancel_fields), NULL};

static const wfield_t stats_req_fields[] = {FU64(ifd_wire_stats_req_t, seq)};
static const wstruct_t stats_req_desc = {"stats_req", sizeof(ifd_wire_stats_req_t),
                                         stats_req_fields, NF(stats_req_fields), NULL};

static const wstruct_t drain_desc = {"drain", sizeof(ifd_wire_empty_t), NULL, 0, NULL};
static const wstruct_t shutdown_desc = {"shutdown", sizeof(ifd_wire_empty_t), NULL, 0, NULL};

static const wfield_t log_level_fields[] = {FU32M(ifd_wire_log_level_t, level, 3)};
static const wstruct_t log_level_desc = {"log_level", sizeof(ifd_wire_log_level_t),
                                         log_level_fields, NF(log_level_fields), NULL};

static const wfield_t vision_fields[] = {
    FU32(ifd_wire_vision_t, tokens_per_image),
    FI32(ifd_wire_vision_t, boi_id),
    FI32(ifd_wire_vision_t, eoi_id),
    FI32(ifd_wire_vision_t, image_id),
    FU32M(ifd_wire_vision_t, height, IFD_WIRE_MAX_IMAGE_SIDE),
    FU32M(ifd_wire_vision_t, width, IFD_WIRE_MAX_IMAGE_SIDE),
    FU32M(ifd_wire_vision_t, resample, 5),
    FBOOL(ifd_wire_vision_t, do_pan_and_scan),
    FU32(ifd_wire_vision_t, pas_min_crop_size),
    FU32(ifd_wire_vision_t, pas_max_num_crops),
    FF64(ifd_wire_vision_t, pas_min_ratio),
};
static const wstruct_t vision_desc = {"vision", sizeof(ifd_wire_vision_t), vision_fields,
                                      NF(vision_fields), NULL};

static const wfield_t ready_fields[] = {
    FU32(ifd_wire_ready_t, slot),
    FI32(ifd_wire_ready_t, pid),
    FSTR(ifd_wire_ready_t, model_name),
    FSTR(ifd_wire_ready_t, arch),
    FU32(ifd_wire_ready_t, n_vocab),
    FU32(ifd_wire_ready_t, n_ctx),
    FSTR(ifd_wire_ready_t, backend),
    FSTR(ifd_wire_ready_t, device_name),
    FU32(ifd_wire_ready_t, max_seqs),
    FU32(ifd_wire_ready_t, max_batched_tokens),
    FSTRUCT(ifd_wire_ready_t, kv, &kv_desc),
    FSTRUCT(ifd_wire_ready_t, vision, &vision_desc),
};
static const wstruct_t ready_desc = {"ready", sizeof(ifd_wire_ready_t), ready_fields,
                                     NF(ready_fields), NULL};

static const wfield_t top_fields[] = {
    FI32(ifd_wire_top_t, token),
    FF32(ifd_wire_top_t, logprob),
};
static const wstruct_t top_desc = {"top", sizeof(ifd_wire_top_t), top_fields, NF(top_fields), NULL};

static int check_token(const void *obj, char *err, size_t errlen)
{
    const ifd_wire_token_t *t = obj;
    if (!t->has_logprob && t->n_top > 0) {
        seterr(err, errlen, "top logprobs without has_logprob");
        return IFD_EFORMAT;
    }
    return 0;
}

static const wfield_t token_fields[] = {
    FU64(ifd_wire_token_t, id),
    FI32(ifd_wire_token_t, token),
    FBOOL(ifd_wire_token_t, has_logprob),
    FF32(ifd_wire_token_t, logprob),
    FARR(ifd_wire_token_t, top, n_top, IFD_WIRE_MAX_TOP, &top_desc),
};
static const wstruct_t token_desc = {"events", sizeof(ifd_wire_token_t), token_fields,
                                     NF(token_fields), check_token};

static int check_tokens(const void *obj, char *err, size_t errlen)
{
    const ifd_wire_tokens_t *t = obj;
    if (t->n_events == 0) {
        seterr(err, errlen, "no events");
        return IFD_EFORMAT;
    }
    return 0;
}

static const wfield_t tokens_fields[] = {
    FU64(ifd_wire_tokens_t, step),
    FARR(ifd_wire_tokens_t, events, n_events, IFD_WIRE_MAX_EVENTS, &token_desc),
};
static const wstruct_t tokens_desc = {"tokens", sizeof(ifd_wire_tokens_t), tokens_fields,
                                      NF(tokens_fields), check_tokens};

static const wfield_t plp_fields[] = {
    FI32(ifd_wire_plp_t, token),
    FF32(ifd_wire_plp_t, logprob),
    FU32(ifd_wire_plp_t, rank),
    FARR(ifd_wire_plp_t, top, n_top, IFD_WIRE_MAX_TOP, &top_desc),
};
static const wstruct_t plp_desc = {"entries", sizeof(ifd_wire_plp_t), plp_fields, NF(plp_fields),
                                   NULL};

static int check_prompt_logprobs(const void *obj, char *err, size_t errlen)
{
    const ifd_wire_prompt_logprobs_t *p = obj;
    if (p->pos == 0 || p->n_entries == 0) {
        seterr(err, errlen, p->pos == 0 ? "pos must be >= 1" : "no entries");
        return IFD_EFORMAT;
    }
    return 0;
}

static const wfield_t prompt_logprobs_fields[] = {
    FU64(ifd_wire_prompt_logprobs_t, id),
    FU32(ifd_wire_prompt_logprobs_t, pos),
    FARR(ifd_wire_prompt_logprobs_t, entries, n_entries, IFD_WIRE_MAX_EVENTS, &plp_desc),
};
static const wstruct_t prompt_logprobs_desc = {
    "prompt_logprobs", sizeof(ifd_wire_prompt_logprobs_t), prompt_logprobs_fields,
    NF(prompt_logprobs_fields), check_prompt_logprobs};

static const wfield_t finished_fields[] = {
    FU64(ifd_wire_finished_t, id),
    FU32M(ifd_wire_finished_t, reason, IFD_WIRE_FINISH_COUNT - 1),
    FI32(ifd_wire_finished_t, stop_token),
    FU32(ifd_wire_finished_t, prompt_tokens),
    FU32(ifd_wire_finished_t, completion_tokens),
    FU32(ifd_wire_finished_t, cached_tokens),
};
static const wstruct_t finished_desc = {"finished", sizeof(ifd_wire_finished_t), finished_fields,
                                        NF(finished_fields), NULL};

static const wfield_t error_fields[] = {
    FU64(ifd_wire_error_t, id),
    FI32(ifd_wire_error_t, code),
    FSTR(ifd_wire_error_t, message),
};
static const wstruct_t error_desc = {"error", sizeof(ifd_wire_error_t), error_fields,
                                     NF(error_fields), NULL};

#define FSTEP(i) FU64(ifd_wire_step_hist_t, n[i])
static const wfield_t step_hist_fields[] = {
    FSTEP(0), FSTEP(1), FSTEP(2), FSTEP(3),  FSTEP(4),  FSTEP(5),  FSTEP(6),
    FSTEP(7), FSTEP(8), FSTEP(9), FSTEP(10), FSTEP(11), FSTEP(12),
};
#undef FSTEP
_Static_assert(NF(step_hist_fields) == IFD_WIRE_STEP_BUCKETS, "one field per bucket");
static const wstruct_t step_hist_desc = {"step_tokens", sizeof(ifd_wire_step_hist_t),
                                         step_hist_fields, NF(step_hist_fields), NULL};
static const wfield_t count_fields[] = {FU64(ifd_wire_count_t, n)};
static const wstruct_t count_desc = {"count", sizeof(ifd_wire_count_t), count_fields,
                                     NF(count_fields), NULL};

static const wfield_t stats_fields[] = {
    FU64(ifd_wire_stats_t, seq),
    FU32(ifd_wire_stats_t, running),
    FU32(ifd_wire_stats_t, waiting),
    FU64(ifd_wire_stats_t, kv_blocks_in_use),
    FU64(ifd_wire_stats_t, kv_blocks_total),
    FU64(ifd_wire_stats_t, steps),
    FU64(ifd_wire_stats_t, prefill_tokens),
    FU64(ifd_wire_stats_t, decode_tokens),
    FF64(ifd_wire_stats_t, tokens_per_step),
    FF64(ifd_wire_stats_t, batch_occupancy),
    FU64(ifd_wire_stats_t, prefix_query_tokens),
    FU64(ifd_wire_stats_t, prefix_hit_tokens),
    FF64(ifd_wire_stats_t, prefix_hit_rate),
    FU64(ifd_wire_stats_t, preemptions),
    FU64(ifd_wire_stats_t, forward_ns),
    FU64(ifd_wire_stats_t, sampling_ns),
    FU64(ifd_wire_stats_t, scheduling_ns),
    FU64(ifd_wire_stats_t, kv_local_releasable_blocks),
    FU64(ifd_wire_stats_t, kv_local_releasable_bytes),
    FU64(ifd_wire_stats_t, kv_local_released_blocks),
    FU64(ifd_wire_stats_t, kv_local_released_bytes),
    FSTRUCT(ifd_wire_stats_t, step_tokens, &step_hist_desc),
    FU64(ifd_wire_stats_t, spec_drafts),
    FU64(ifd_wire_stats_t, spec_draft_tokens),
    FU64(ifd_wire_stats_t, spec_accepted_tokens),
    FARR(ifd_wire_stats_t, spec_accepted_per_pos, n_spec_per_pos, IFD_WIRE_MAX_SPEC_TOKENS,
         &count_desc),
    FARR(ifd_wire_stats_t, draft_tier, n_draft_tier, IFD_WIRE_MAX_TIER_CTRS, &count_desc),
};
static const wstruct_t stats_desc = {"stats", sizeof(ifd_wire_stats_t), stats_fields,
                                     NF(stats_fields), NULL};

/* The message table, from the one X-macro list in wire.h. */
typedef struct {
    int type;
    int dir;
    const wstruct_t *desc;
} wmsg_t;

static const wmsg_t msg_table[] = {
#define IFD__WIRE_ROW(name, code, dir, member) {code, dir, &member##_desc},
    IFD_WIRE_MESSAGES(IFD__WIRE_ROW)
#undef IFD__WIRE_ROW
};

static const wmsg_t *msg_lookup(int type)
{
    for (size_t i = 0; i < sizeof(msg_table) / sizeof(msg_table[0]); i++)
        if (msg_table[i].type == type)
            return &msg_table[i];
    return NULL;
}

const char *ifd_wire_type_name(int type)
{
    const wmsg_t *m = msg_lookup(type);
    return m ? m->desc->name : NULL;
}

int ifd_wire_type_dir(int type)
{
    const wmsg_t *m = msg_lookup(type);
    return m ? m->dir : 0;
}

ifd_wire_sampling_t ifd_wire_default_sampling(void)
{
    ifd_wire_sampling_t s;
    memset(&s, 0, sizeof(s));
    s.temperature = 1.0f;
    s.top_p = 1.0f;
    s.repetition_penalty = 1.0f;
    s.n_logprobs = -1;
    return s;
}

/* ---- field access ---------------------------------------------------------------- */

#define AT(obj, off, T)  ((T *)(void *)((char *)(obj) + (off)))
#define CAT(obj, off, T) ((const T *)(const void *)((const char *)(obj) + (off)))

/* ---- encoding -------------------------------------------------------------------- */

static int pk_write(void *data, const char *p, size_t n)
{
    return ifd_buf_append(data, p, n) == 0 ? 0 : -1;
}

static int enc_check(const wstruct_t *d, const void *obj, char *err, size_t errlen);

/* Validates what the decoder would refuse, so a frame we write always reads back. */
static int enc_check_field(const wfield_t *f, const void *obj, char *err, size_t errlen)
{
    switch (f->kind) {
    case F_U32:
        if (f->max && *CAT(obj, f->off, uint32_t) > f->max) {
            seterr(err, errlen, "%s: %u above %llu", f->name, *CAT(obj, f->off, uint32_t),
                   (unsigned long long)f->max);
            return IFD_EINVAL;
        }
        return 0;
    case F_STR: {
        const char *s = *CAT(obj, f->off, char *const);
        if (s && strlen(s) > f->max) {
            seterr(err, errlen, "%s: string longer than %llu", f->name, (unsigned long long)f->max);
            return IFD_ETOOBIG;
        }
        return 0;
    }
    case F_ARR_I32:
    case F_ARR:
    case F_BIN: {
        uint32_t n = *CAT(obj, f->count_off, uint32_t);
        const void *p = *CAT(obj, f->off, void *const);
        if (n > f->max) {
            seterr(err, errlen, "%s: %u elements, limit %llu", f->name, n,
                   (unsigned long long)f->max);
            return IFD_ETOOBIG;
        }
        if (n > 0 && !p) {
            seterr(err, errlen, "%s: NULL with %u elements", f->name, n);
            return IFD_EINVAL;
        }
        if (f->kind == F_ARR)
            for (uint32_t i = 0; i < n; i++) {
                int rc = enc_check(f->sub, (const char *)p + (size_t)i * f->sub->size, err, errlen);
                if (rc < 0)
                    return rc;
            }
        return 0;
    }
    case F_STRUCT:
        return enc_check(f->sub, CAT(obj, f->off, char), err, errlen);
    default:
        return 0;
    }
}

static int enc_check(const wstruct_t *d, const void *obj, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < d->n_fields; i++) {
        int rc = enc_check_field(&d->fields[i], obj, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (d->check) {
        int rc = d->check(obj, err, errlen);
        if (rc < 0)
            return IFD_EINVAL;
    }
    return 0;
}

static int enc_struct(msgpack_packer *pk, const wstruct_t *d, const void *obj);

static int enc_field(msgpack_packer *pk, const wfield_t *f, const void *obj)
{
    switch (f->kind) {
    case F_BOOL:
        return *CAT(obj, f->off, bool) ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    case F_U32:
        return msgpack_pack_uint32(pk, *CAT(obj, f->off, uint32_t));
    case F_I32:
        return msgpack_pack_int32(pk, *CAT(obj, f->off, int32_t));
    case F_U64:
        return msgpack_pack_uint64(pk, *CAT(obj, f->off, uint64_t));
    case F_F32:
        return msgpack_pack_float(pk, *CAT(obj, f->off, float));
    case F_F64:
        return msgpack_pack_double(pk, *CAT(obj, f->off, double));
    case F_STR: {
        const char *s = *CAT(obj, f->off, char *const);
        size_t n = s ? strlen(s) : 0;
        if (msgpack_pack_str(pk, n) != 0)
            return -1;
        return n ? msgpack_pack_str_body(pk, s, n) : 0;
    }
    case F_ARR_I32: {
        uint32_t n = *CAT(obj, f->count_off, uint32_t);
        const int32_t *p = *CAT(obj, f->off, int32_t *const);
        if (msgpack_pack_array(pk, n) != 0)
            return -1;
        for (uint32_t i = 0; i < n; i++)
            if (msgpack_pack_int32(pk, p[i]) != 0)
                return -1;
        return 0;
    }
    case F_ARR: {
        uint32_t n = *CAT(obj, f->count_off, uint32_t);
        const char *p = *CAT(obj, f->off, char *const);
        if (msgpack_pack_array(pk, n) != 0)
            return -1;
        for (uint32_t i = 0; i < n; i++)
            if (enc_struct(pk, f->sub, p + (size_t)i * f->sub->size) != 0)
                return -1;
        return 0;
    }
    case F_STRUCT:
        return enc_struct(pk, f->sub, CAT(obj, f->off, char));
    case F_BIN: {
        uint32_t n = *CAT(obj, f->count_off, uint32_t);
        const char *p = *CAT(obj, f->off, char *const);
        if (msgpack_pack_bin(pk, n) != 0)
            return -1;
        return n ? msgpack_pack_bin_body(pk, p, n) : 0;
    }
    }
    return -1;
}

static int enc_struct(msgpack_packer *pk, const wstruct_t *d, const void *obj)
{
    if (msgpack_pack_array(pk, d->n_fields) != 0)
        return -1;
    for (uint32_t i = 0; i < d->n_fields; i++)
        if (enc_field(pk, &d->fields[i], obj) != 0)
            return -1;
    return 0;
}

static void put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint16_t get_be16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get_be64(const uint8_t *p)
{
    return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}

int ifd_wire_encode(ifd_buf_t *out, const ifd_wire_msg_t *msg)
{
    const wmsg_t *m = msg ? msg_lookup((int)msg->type) : NULL;
    if (!out || !m)
        return IFD_EINVAL;
    const void *obj = &msg->u;
    int rc = enc_check(m->desc, obj, NULL, 0);
    if (rc < 0)
        return rc;

    size_t start = out->len;
    uint8_t hdr[IFD_WIRE_HEADER_SIZE];
    put_be32(hdr, IFD_WIRE_MAGIC);
    put_be16(hdr + 4, IFD_WIRE_VERSION);
    put_be16(hdr + 6, (uint16_t)m->type);
    put_be32(hdr + 8, 0); /* patched below */
    rc = ifd_buf_append(out, hdr, sizeof(hdr));
    if (rc < 0)
        return rc;

    msgpack_packer pk;
    msgpack_packer_init(&pk, out, pk_write);
    if (enc_struct(&pk, m->desc, obj) != 0) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
        return IFD_ENOMEM;
    }
    size_t body = out->len - start - IFD_WIRE_HEADER_SIZE;
    if (body > IFD_WIRE_MAX_BODY) {
        out->len = start;
        out->data[start] = '\0';
        return IFD_ETOOBIG;
    }
    put_be32((uint8_t *)out->data + start + 8, (uint32_t)body);
    return 0;
}

/* ---- decoding: a bounds-checked msgpack cursor ------------------------------------ */

#define MAX_DEPTH 8

typedef struct {
    const uint8_t *p, *end;
    /* the path to the field being decoded, for error messages */
    const char *names[MAX_DEPTH];
    int64_t index[MAX_DEPTH]; /* -1: not an array element */
    int depth;
    char *err;
    size_t errlen;
} rd_t;

static const char *mp_kind(uint8_t b)
{
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3))
        return "int";
    if (b <= 0x8f || b == 0xde || b == 0xdf)
        return "map";
    if (b <= 0x9f || b == 0xdc || b == 0xdd)
        return "array";
    if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb))
        return "str";
    switch (b) {
    case 0xc0:
        return "nil";
    case 0xc2:
    case 0xc3:
        return "bool";
    case 0xc4:
    case 0xc5:
    case 0xc6:
        return "bin";
    case 0xca:
    case 0xcb:
        return "float";
    case 0xc1:
        return "invalid byte 0xc1";
    default:
        return "ext";
    }
}

static int rd_fail(rd_t *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int rd_fail(rd_t *r, int code, const char *fmt, ...)
{
    if (!r->err || r->errlen == 0)
        return code;
    size_t n = 0;
    for (int i = 0; i < r->depth && n < r->errlen; i++) {
        int w = snprintf(r->err + n, r->errlen - n, "%s%s", i ? "." : "", r->names[i]);
        n += w > 0 ? (size_t)w : 0;
        if (r->index[i] >= 0 && n < r->errlen) {
            w = snprintf(r->err + n, r->errlen - n, "[%lld]", (long long)r->index[i]);
            n += w > 0 ? (size_t)w : 0;
        }
    }
    if (n < r->errlen) {
        int w = snprintf(r->err + n, r->errlen - n, ": ");
        n += w > 0 ? (size_t)w : 0;
    }
    if (n < r->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err + n, r->errlen - n, fmt, ap);
        va_end(ap);
    }
    return code;
}

static size_t rd_left(const rd_t *r)
{
    return (size_t)(r->end - r->p);
}

static int rd_need(rd_t *r, size_t n)
{
    if (rd_left(r) < n)
        return rd_fail(r, IFD_ETRUNC, "truncated (need %zu bytes, %zu left)", n, rd_left(r));
    return 0;
}

/* Peeks at the type byte of the next value. */
static int rd_head(rd_t *r, uint8_t *b)
{
    int rc = rd_need(r, 1);
    if (rc < 0)
        return rc;
    *b = *r->p;
    return 0;
}

static uint64_t rd_be(rd_t *r, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | r->p[i];
    r->p += n;
    return v;
}

/* An integer of any msgpack encoding: *neg set for negative values; *uv is
 * the value when it is not negative, *sv the value clamped to int64. */
static int rd_integer(rd_t *r, bool *neg, uint64_t *uv, int64_t *sv)
{
    uint8_t b;
    int rc = rd_head(r, &b);
    if (rc < 0)
        return rc;
    if (b <= 0x7f) {
        r->p++;
        *neg = false, *uv = b, *sv = b;
        return 0;
    }
    if (b >= 0xe0) {
        r->p++;
        *neg = true, *sv = (int8_t)b, *uv = 0;
        return 0;
    }
    static const uint8_t width[8] = {1, 2, 4, 8, 1, 2, 4, 8};
    if (b < 0xcc || b > 0xd3)
        return rd_fail(r, IFD_ETYPE, "expected int, got %s", mp_kind(b));
    size_t w = width[b - 0xcc];
    rc = rd_need(r, 1 + w);
    if (rc < 0)
        return rc;
    r->p++;
    uint64_t raw = rd_be(r, w);
    if (b <= 0xcf) {
        *neg = false, *uv = raw, *sv = raw > INT64_MAX ? INT64_MAX : (int64_t)raw;
        return 0;
    }
    int64_t s;
    switch (w) {
    case 1:
        s = (int8_t)raw;
        break;
    case 2:
        s = (int16_t)raw;
        break;
    case 4:
        s = (int32_t)raw;
        break;
    default:
        s = (int64_t)raw;
        break;
    }
    *neg = s < 0, *sv = s, *uv = s < 0 ? 0 : (uint64_t)s;
    return 0;
}

static int rd_uint(rd_t *r, uint64_t max, uint64_t *out)
{
    bool neg = false;
    uint64_t uv = 0;
    int64_t sv = 0;
    int rc = rd_integer(r, &neg, &uv, &sv);
    if (rc < 0)
        return rc;
    if (neg)
        return rd_fail(r, IFD_ERANGE, "negative value %lld", (long long)sv);
    if (uv > max)
        return rd_fail(r, IFD_ERANGE, "%llu above %llu", (unsigned long long)uv,
                       (unsigned long long)max);
    *out = uv;
    return 0;
}

static int rd_i32(rd_t *r, int32_t *out)
{
    bool neg = false;
    uint64_t uv = 0;
    int64_t sv = 0;
    int rc = rd_integer(r, &neg, &uv, &sv);
    if (rc < 0)
        return rc;
    if (neg && sv < INT32_MIN)
        return rd_fail(r, IFD_ERANGE, "%lld does not fit int32", (long long)sv);
    if (!neg && uv > INT32_MAX)
        return rd_fail(r, IFD_ERANGE, "%llu does not fit int32", (unsigned long long)uv);
    *out = (int32_t)sv;
    return 0;
}

static int rd_double(rd_t *r, double *out)
{
    uint8_t b;
    int rc = rd_head(r, &b);
    if (rc < 0)
        return rc;
    if (b == 0xca) {
        rc = rd_need(r, 5);
        if (rc < 0)
            return rc;
        r->p++;
        uint32_t bits = (uint32_t)rd_be(r, 4);
        float f;
        memcpy(&f, &bits, 4);
        *out = f;
        return 0;
    }
    if (b == 0xcb) {
        rc = rd_need(r, 9);
        if (rc < 0)
            return rc;
        r->p++;
        uint64_t bits = get_be64(r->p);
        r->p += 8;
        memcpy(out, &bits, 8);
        return 0;
    }
    return rd_fail(r, IFD_ETYPE, "expected float, got %s", mp_kind(b));
}

static int rd_bool(rd_t *r, bool *out)
{
    uint8_t b;
    int rc = rd_head(r, &b);
    if (rc < 0)
        return rc;
    if (b != 0xc2 && b != 0xc3)
        return rd_fail(r, IFD_ETYPE, "expected bool, got %s", mp_kind(b));
    r->p++;
    *out = b == 0xc3;
    return 0;
}

/* An array header; the count is checked against max and the bytes left
 * (every element is at least one byte) before the caller allocates. */
static int rd_array(rd_t *r, uint64_t max, uint32_t *n)
{
    uint8_t b;
    int rc = rd_head(r, &b);
    if (rc < 0)
        return rc;
    uint64_t count;
    if (b >= 0x90 && b <= 0x9f) {
        r->p++;
        count = b & 0x0f;
    } else if (b == 0xdc || b == 0xdd) {
        size_t w = b == 0xdc ? 2 : 4;
        rc = rd_need(r, 1 + w);
        if (rc < 0)
            return rc;
        r->p++;
        count = rd_be(r, w);
    } else {
        return rd_fail(r, IFD_ETYPE, "expected array, got %s", mp_kind(b));
    }
    if (count > max)
        return rd_fail(r, IFD_ETOOBIG, "%llu elements, limit %llu", (unsigned long long)count,
                       (unsigned long long)max);
    if (count > rd_left(r))
        return rd_fail(r, IFD_ETRUNC, "%llu elements but %zu bytes left", (unsigned long long)count,
                       rd_left(r));
    *n = (uint32_t)count;
    return 0;
}

static int rd_str(rd_t *r, uint64_t max, const char **s, uint32_t *n)
{
    uint8_t b;
    int rc = rd_head(r, &b);
    if (rc < 0)
        return rc;
    uint64_t len;
    if (b >= 0xa0 && b <= 0xbf) {
        r->p++;
        len = b & 0x1f;
    } else if (b >= 0xd9 && b <= 0xdb) {
        size_t w = (size_t)1 << (b - 0xd9);
        rc = rd_need(r, 1 + w);
        if (rc < 0)
            return rc;
        r->p++;
        len = rd_be(r, w);
    } else {
        return rd_fail(r, IFD_ETYPE, "expected str, got %s", mp_kind(b));
    }
    if (len > max)
        return rd_fail(r, IFD_ETOOBIG, "string of %llu bytes, limit %llu", (unsigned long long)len,
                       (unsigned long long)max);
    rc = rd_need(r, (size_t)len);
    if (rc < 0)
        return rc;
    *s = (const char *)r->p;
    *n = (uint32_t)len;
    r->p += len;
    return 0;
}

/* A msgpack bin (0xc4..0xc6) of at most max bytes, in place. */
static int rd_bin(rd_t *r, uint64_t max, const uint8_t **s, uint32_t *n)
{
    uint8_t b;
    int rc = rd_head(r, &b);
    if (rc < 0)
        return rc;
    if (b < 0xc4 || b > 0xc6)
        return rd_fail(r, IFD_ETYPE, "expected bin, got %s", mp_kind(b));
    size_t w = (size_t)1 << (b - 0xc4);
    rc = rd_need(r, 1 + w);
    if (rc < 0)
        return rc;
    r->p++;
    uint64_t len = rd_be(r, w);
    if (len > max)
        return rd_fail(r, IFD_ETOOBIG, "bin of %llu bytes, limit %llu", (unsigned long long)len,
                       (unsigned long long)max);
    rc = rd_need(r, (size_t)len);
    if (rc < 0)
        return rc;
    *s = r->p;
    *n = (uint32_t)len;
    r->p += len;
    return 0;
}

static void free_struct(const wstruct_t *d, void *obj);

static void free_field(const wfield_t *f, void *obj)
{
    switch (f->kind) {
    case F_STR:
    case F_ARR_I32:
    case F_BIN: {
        void **pp = AT(obj, f->off, void *);
        free(*pp);
        *pp = NULL;
        if (f->kind != F_STR)
            *AT(obj, f->count_off, uint32_t) = 0;
        break;
    }
    case F_ARR: {
        char **pp = AT(obj, f->off, char *);
        uint32_t *n = AT(obj, f->count_off, uint32_t);
        if (*pp)
            for (uint32_t i = 0; i < *n; i++)
                free_struct(f->sub, *pp + (size_t)i * f->sub->size);
        free(*pp);
        *pp = NULL;
        *n = 0;
        break;
    }
    case F_STRUCT:
        free_struct(f->sub, AT(obj, f->off, char));
        break;
    default:
        break;
    }
}

static void free_struct(const wstruct_t *d, void *obj)
{
    for (uint32_t i = 0; i < d->n_fields; i++)
        free_field(&d->fields[i], obj);
}

static int dec_struct(rd_t *r, const wstruct_t *d, void *obj);

static int dec_field(rd_t *r, const wfield_t *f, void *obj)
{
    uint64_t u;
    double dv;
    int rc;
    switch (f->kind) {
    case F_BOOL:
        return rd_bool(r, AT(obj, f->off, bool));
    case F_U32:
        rc = rd_uint(r, f->max ? f->max : UINT32_MAX, &u);
        if (rc == 0)
            *AT(obj, f->off, uint32_t) = (uint32_t)u;
        return rc;
    case F_U64:
        rc = rd_uint(r, f->max ? f->max : UINT64_MAX, &u);
        if (rc == 0)
            *AT(obj, f->off, uint64_t) = u;
        return rc;
    case F_I32:
        return rd_i32(r, AT(obj, f->off, int32_t));
    case F_F32:
        rc = rd_double(r, &dv);
        if (rc == 0)
            *AT(obj, f->off, float) = (float)dv;
        return rc;
    case F_F64:
        return rd_double(r, AT(obj, f->off, double));
    case F_STR: {
        const char *s = NULL;
        uint32_t n = 0;
        rc = rd_str(r, f->max, &s, &n);
        if (rc < 0)
            return rc;
        if (memchr(s, '\0', n))
            return rd_fail(r, IFD_EFORMAT, "string holds a NUL byte");
        char *copy = malloc((size_t)n + 1);
        if (!copy)
            return rd_fail(r, IFD_ENOMEM, "out of memory");
        memcpy(copy, s, n);
        copy[n] = '\0';
        *AT(obj, f->off, char *) = copy;
        return 0;
    }
    case F_ARR_I32: {
        uint32_t n = 0;
        rc = rd_array(r, f->max, &n);
        if (rc < 0 || n == 0)
            return rc;
        int32_t *a = malloc((size_t)n * sizeof(int32_t));
        if (!a)
            return rd_fail(r, IFD_ENOMEM, "out of memory for %u ids", n);
        *AT(obj, f->off, int32_t *) = a;
        *AT(obj, f->count_off, uint32_t) = n;
        for (uint32_t i = 0; i < n; i++) {
            r->index[r->depth - 1] = i;
            rc = rd_i32(r, &a[i]);
            if (rc < 0)
                return rc;
        }
        r->index[r->depth - 1] = -1;
        return 0;
    }
    case F_ARR: {
        uint32_t n = 0;
        rc = rd_array(r, f->max, &n);
        if (rc < 0 || n == 0)
            return rc;
        char *a = calloc(n, f->sub->size);
        if (!a)
            return rd_fail(r, IFD_ENOMEM, "out of memory for %u elements", n);
        /* Set pointer and count first: a failure below frees what was filled. */
        *AT(obj, f->off, char *) = a;
        *AT(obj, f->count_off, uint32_t) = n;
        for (uint32_t i = 0; i < n; i++) {
            r->index[r->depth - 1] = i;
            rc = dec_struct(r, f->sub, a + (size_t)i * f->sub->size);
            if (rc < 0)
                return rc;
        }
        r->index[r->depth - 1] = -1;
        return 0;
    }
    case F_STRUCT:
        return dec_struct(r, f->sub, AT(obj, f->off, char));
    case F_BIN: {
        const uint8_t *b = NULL;
        uint32_t n = 0;
        rc = rd_bin(r, f->max, &b, &n);
        if (rc < 0 || n == 0)
            return rc;
        uint8_t *copy = malloc(n);
        if (!copy)
            return rd_fail(r, IFD_ENOMEM, "out of memory for %u bytes", n);
        memcpy(copy, b, n);
        *AT(obj, f->off, uint8_t *) = copy;
        *AT(obj, f->count_off, uint32_t) = n;
        return 0;
    }
    }
    return rd_fail(r, IFD_EINTERNAL, "bad schema");
}

static int dec_struct(rd_t *r, const wstruct_t *d, void *obj)
{
    uint32_t n = 0;
    int rc = rd_array(r, UINT32_MAX, &n);
    if (rc < 0)
        return rc;
    if (n != d->n_fields)
        return rd_fail(r, IFD_EFORMAT, "%u fields, expected %u", n, d->n_fields);
    if (r->depth >= MAX_DEPTH)
        return rd_fail(r, IFD_EINTERNAL, "schema too deep");
    r->depth++;
    for (uint32_t i = 0; i < d->n_fields; i++) {
        r->names[r->depth - 1] = d->fields[i].name;
        r->index[r->depth - 1] = -1;
        rc = dec_field(r, &d->fields[i], obj);
        if (rc < 0)
            return rc;
    }
    r->depth--;
    if (d->check) {
        char msg[128];
        rc = d->check(obj, msg, sizeof(msg));
        if (rc < 0)
            return rd_fail(r, rc, "%s", msg);
    }
    return 0;
}

int ifd_wire_decode_header(const void *p, size_t n, uint32_t max_body, ifd_wire_header_t *h,
                           char *err, size_t errlen)
{
    if (max_body == 0 || max_body > IFD_WIRE_MAX_BODY)
        max_body = IFD_WIRE_MAX_BODY;
    if (n < IFD_WIRE_HEADER_SIZE) {
        seterr(err, errlen, "frame header truncated (%zu of %d bytes)", n, IFD_WIRE_HEADER_SIZE);
        return IFD_ETRUNC;
    }
    const uint8_t *b = p;
    uint32_t magic = get_be32(b);
    if (magic != IFD_WIRE_MAGIC) {
        seterr(err, errlen, "bad frame magic 0x%08x", magic);
        return IFD_EFORMAT;
    }
    h->version = get_be16(b + 4);
    h->type = get_be16(b + 6);
    h->length = get_be32(b + 8);
    if (h->version != IFD_WIRE_VERSION) {
        seterr(err, errlen, "protocol version %u, this side speaks %d", h->version,
               IFD_WIRE_VERSION);
        return IFD_EVERSION;
    }
    if (!msg_lookup(h->type)) {
        seterr(err, errlen, "unknown message type %u", h->type);
        return IFD_EFORMAT;
    }
    if (h->length > max_body) {
        seterr(err, errlen, "%s frame body of %u bytes exceeds the cap of %u",
               ifd_wire_type_name(h->type), h->length, max_body);
        return IFD_ETOOBIG;
    }
    return 0;
}

int ifd_wire_decode_body(const ifd_wire_header_t *h, const void *body, ifd_wire_msg_t *out,
                         char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    const wmsg_t *m = msg_lookup(h->type);
    if (!m) {
        seterr(err, errlen, "unknown message type %u", h->type);
        return IFD_EFORMAT;
    }
    out->type = (ifd_wire_type_t)m->type;
    rd_t r = {.p = body, .end = (const uint8_t *)body + h->length, .err = err, .errlen = errlen};
    /* The message name is the first component of every error path. */
    r.names[0] = m->desc->name;
    r.index[0] = -1;
    r.depth = 1;
    int rc;
    if (h->length > 0 && !body) {
        rc = IFD_EINVAL;
        seterr(err, errlen, "no body");
        goto fail;
    }
    rc = dec_struct(&r, m->desc, &out->u);
    if (rc < 0)
        goto fail;
    if (r.p != r.end) {
        rc = IFD_EFORMAT;
        seterr(err, errlen, "%s: %zu trailing bytes after the body", m->desc->name, rd_left(&r));
        goto fail;
    }
    return 0;

fail:
    free_struct(m->desc, &out->u);
    memset(out, 0, sizeof(*out));
    return rc;
}

int ifd_wire_decode(const void *p, size_t n, ifd_wire_msg_t *out, size_t *consumed, char *err,
                    size_t errlen)
{
    ifd_wire_header_t h;
    memset(out, 0, sizeof(*out));
    int rc = ifd_wire_decode_header(p, n, 0, &h, err, errlen);
    if (rc < 0)
        return rc;
    if (n - IFD_WIRE_HEADER_SIZE < h.length) {
        seterr(err, errlen, "%s frame truncated (%zu of %u body bytes)", ifd_wire_type_name(h.type),
               n - IFD_WIRE_HEADER_SIZE, h.length);
        return IFD_ETRUNC;
    }
    rc = ifd_wire_decode_body(&h, (const uint8_t *)p + IFD_WIRE_HEADER_SIZE, out, err, errlen);
    if (rc == 0 && consumed)
        *consumed = IFD_WIRE_HEADER_SIZE + (size_t)h.length;
    return rc;
}

void ifd_wire_msg_free(ifd_wire_msg_t *msg)
{
    if (!msg)
        return;
    const wmsg_t *m = msg_lookup((int)msg->type);
    if (m)
        free_struct(m->desc, &msg->u);
    ifd_wire_type_t t = msg->type;
    memset(msg, 0, sizeof(*msg));
    msg->type = t;
}

/* ---- streaming reader ------------------------------------------------------------- */

void ifd_wire_reader_init(ifd_wire_reader_t *r, uint32_t max_body)
{
    memset(r, 0, sizeof(*r));
    r->max_body = (max_body == 0 || max_body > IFD_WIRE_MAX_BODY) ? IFD_WIRE_MAX_BODY : max_body;
}

void ifd_wire_reader_close(ifd_wire_reader_t *r)
{
    ifd_buf_free(&r->buf);
    r->off = 0;
}

size_t ifd_wire_reader_pending(const ifd_wire_reader_t *r)
{
    return r->buf.len - r->off;
}

const char *ifd_wire_reader_error(const ifd_wire_reader_t *r)
{
    return r->errmsg;
}

/* Drops consumed bytes so the buffer holds at most one partial frame's worth. */
static void reader_compact(ifd_wire_reader_t *r)
{
    if (r->off > 0) {
        ifd_buf_consume(&r->buf, r->off);
        r->off = 0;
    }
}

/* Checks the header at the front as soon as it is complete. */
static int reader_check(ifd_wire_reader_t *r)
{
    if (r->err)
        return r->err;
    if (ifd_wire_reader_pending(r) < IFD_WIRE_HEADER_SIZE) {
        /* A wrong magic is visible before the whole header is in. */
        size_t n = ifd_wire_reader_pending(r);
        uint8_t want[4];
        put_be32(want, IFD_WIRE_MAGIC);
        if (memcmp(r->buf.data + r->off, want, n < 4 ? n : 4) != 0) {
            seterr(r->errmsg, sizeof(r->errmsg), "bad frame magic");
            return r->err = IFD_EFORMAT;
        }
        return 0;
    }
    ifd_wire_header_t h;
    int rc = ifd_wire_decode_header(r->buf.data + r->off, ifd_wire_reader_pending(r), r->max_body,
                                    &h, r->errmsg, sizeof(r->errmsg));
    if (rc < 0)
        r->err = rc;
    return rc;
}

int ifd_wire_reader_feed(ifd_wire_reader_t *r, const void *p, size_t n)
{
    if (r->err)
        return r->err;
    if (n == 0)
        return 0;
    reader_compact(r);
    int rc = ifd_buf_append(&r->buf, p, n);
    if (rc < 0)
        return rc;
    return reader_check(r);
}

void *ifd_wire_reader_prepare(ifd_wire_reader_t *r, size_t want, size_t *avail)
{
    reader_compact(r);
    if (want == 0)
        want = 1;
    if (ifd_buf_reserve(&r->buf, want) < 0)
        return NULL;
    /* ifd_buf keeps one byte for the NUL past len. */
    *avail = r->buf.cap - r->buf.len - 1;
    return r->buf.data + r->buf.len;
}

int ifd_wire_reader_commit(ifd_wire_reader_t *r, size_t n)
{
    if (r->err)
        return r->err;
    if (n == 0)
        return 0;
    IFD_ASSERT(r->buf.len + n < r->buf.cap);
    r->buf.len += n;
    r->buf.data[r->buf.len] = '\0';
    return reader_check(r);
}

int ifd_wire_reader_next(ifd_wire_reader_t *r, ifd_wire_frame_t *f)
{
    if (r->err)
        return r->err;
    size_t avail = ifd_wire_reader_pending(r);
    if (avail == 0) {
        ifd_buf_clear(&r->buf);
        r->off = 0;
        return 0;
    }
    int rc = reader_check(r);
    if (rc < 0)
        return rc;
    if (avail < IFD_WIRE_HEADER_SIZE)
        return 0;
    const uint8_t *p = (const uint8_t *)r->buf.data + r->off;
    rc = ifd_wire_decode_header(p, avail, r->max_body, &f->hdr, r->errmsg, sizeof(r->errmsg));
    if (rc < 0)
        return r->err = rc;
    if (avail - IFD_WIRE_HEADER_SIZE < f->hdr.length)
        return 0;
    f->body = p + IFD_WIRE_HEADER_SIZE;
    r->off += IFD_WIRE_HEADER_SIZE + (size_t)f->hdr.length;
    return 1;
}

int ifd_wire_reader_next_msg(ifd_wire_reader_t *r, ifd_wire_msg_t *msg)
{
    ifd_wire_frame_t f = {.body = NULL};
    int rc = ifd_wire_reader_next(r, &f);
    if (rc <= 0)
        return rc;
    r->errmsg[0] = '\0';
    rc = ifd_wire_decode_body(&f.hdr, f.body, msg, r->errmsg, sizeof(r->errmsg));
    return rc < 0 ? rc : 1;
}
