/*
 * test_proto_wire.c — the router↔worker frames (proto/wire.h): a round trip
 * of every message type, hand-made bad frames (wrong magic, version, type,
 * oversize length, truncation at every byte, wrong msgpack types, huge
 * array counts, trailing bytes), encoder-side refusals, the streaming
 * reader fed one byte at a time and in random pieces, and a fixed-seed
 * mutation fuzz of valid frames (every outcome must be a clean 0 or error).
 */
#include "testutil.h"

#include "error.h"
#include "proto/wire.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sample messages --------------------------------------------------------------- */

static int32_t g_tokens[300];
static int32_t g_stops[3] = {2, 0, 49152};
static const int32_t g_grammar[5] = {0x31524749, 7, -1, 0, INT32_MIN};
static ifd_wire_logit_bias_t g_bias[3] = {{7, 5.5f}, {0, -100.0f}, {12, -INFINITY}};
static ifd_wire_top_t g_top[3] = {{11, -0.25f}, {12, -1.5f}, {13, -INFINITY}};
static ifd_wire_token_t g_events[3];
static ifd_wire_plp_t g_plp[2];
static uint8_t g_pix[2][4 * 3 * 3]; /* two 4x3 RGB pictures */
static ifd_wire_image_t g_images[2];
static ifd_wire_count_t g_per_pos[2] = {{7}, {3}};
static ifd_wire_count_t g_draft_tier[IFD_WIRE_MAX_TIER_CTRS + 1];

static const ifd_wire_kv_geometry_t g_kv = {
    30, 3, 64, 1, 16, 123456789012ull, 0xfedcba9876543210ull};

/* One message of type t with every field set to something distinctive. */
static ifd_wire_msg_t sample(ifd_wire_type_t t)
{
    ifd_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = t;
    for (int i = 0; i < 300; i++)
        g_tokens[i] = i * 997 % 49152;
    g_tokens[7] = INT32_MAX;
    switch (t) {
    case IFD_WIRE_HELLO:
        m.u.hello = (ifd_wire_hello_t){.slot = 3,
                                       .model_path = "/models/smöl.gguf",
                                       .backend = "cuda",
                                       .device = -1,
                                       .kv_device = 1,
                                       .n_threads = 16,
                                       .max_seqs = 256,
                                       .max_batched_tokens = 8192,
                                       .prefill_cap = -1,
                                       .n_fds = 3,
                                       .n_local_fds = 1,
                                       .kv = g_kv,
                                       .size_pool = true,
                                       .gpu_memory_fraction = 0.875,
                                       .max_model_len = 131072,
                                       .spec = {3, 6, 0, 0},
                                       .draft_model_path = "/models/draft.gguf",
                                       .mmproj_path = "/models/mmproj.gguf"};
        break;
    case IFD_WIRE_POOL:
        m.u.pool = (ifd_wire_pool_t){.n_fds = 2, .n_local_fds = 1, .kv = g_kv};
        break;
    case IFD_WIRE_POOL_SIZE:
        m.u.pool_size = (ifd_wire_pool_size_t){.n_blocks = 1ull << 33,
                                               .usable_bytes = 3ull << 40,
                                               .block_bytes = 24576,
                                               .total_bytes = 150ull << 30,
                                               .free_bytes = 140ull << 30,
                                               .weight_bytes = 6ull << 30,
                                               .activation_bytes = 123456789,
                                               .graph_bytes = 98765,
                                               .margin_bytes = 64 << 20,
                                               .n_graphs = 70,
                                               .device = "NVIDIA H200 (sm_90, 139 GiB)"};
        break;
    case IFD_WIRE_ADD:
        m.u.add.id = UINT64_MAX - 1;
        m.u.add.tokens = g_tokens;
        m.u.add.n_tokens = 300;
        m.u.add.n_generated = 17;
        m.u.add.sampling = ifd_wire_default_sampling();
        m.u.add.sampling.temperature = 0.7f;
        m.u.add.sampling.top_k = 40;
        m.u.add.sampling.top_p = 0.9f;
        m.u.add.sampling.min_p = 0.05f;
        m.u.add.sampling.repetition_penalty = 1.1f;
        m.u.add.sampling.frequency_penalty = -0.5f;
        m.u.add.sampling.presence_penalty = 2.0f;
        m.u.add.sampling.logit_bias = g_bias;
        m.u.add.sampling.n_logit_bias = 3;
        m.u.add.sampling.n_logprobs = 5;
        m.u.add.sampling.logprobs_mode = 1;
        m.u.add.sampling.seed = UINT64_MAX;
        m.u.add.stop_ids = g_stops;
        m.u.add.n_stop_ids = 3;
        m.u.add.max_tokens = 4096;
        m.u.add.ignore_eos = true;
        m.u.add.priority = -3;
        m.u.add.use_cache = true;
        m.u.add.grammar = g_grammar; /* compiled words, version 8 */
        m.u.add.n_grammar = 5;
        m.u.add.min_tokens = 7;
        m.u.add.prompt_logprobs = 1 + 20;
        m.u.add.client = 0xfeedbeefu;
        m.u.add.allowed_ids = g_stops; /* allowed_token_ids, version 10 */
        m.u.add.n_allowed_ids = 3;
        m.u.add.lp_ids = g_stops + 1; /* logprob_token_ids, version 10 */
        m.u.add.n_lp_ids = 2;
        m.u.add.spec = (ifd_wire_spec_t){2, 16, 2, 16}; /* version 10 */
        for (size_t i = 0; i < sizeof g_pix; i++)
            g_pix[i / sizeof g_pix[0]][i % sizeof g_pix[0]] = (uint8_t)(i * 37);
        g_images[0] = (ifd_wire_image_t){.pos = 5, .n_tokens = 16, .hash_lo = 1, .hash_hi = UINT64_MAX,
                                         .width = 4, .height = 3, .pixels = g_pix[0],
                                         .n_pixels = sizeof g_pix[0]};
        g_images[1] = g_images[0];
        g_images[1].pos = 21; /* right after the first: adjacent images are fine */
        g_images[1].pixels = g_pix[1];
        m.u.add.images = g_images; /* version 12 */
        m.u.add.n_images = 2;
        break;
    case IFD_WIRE_CANCEL:
        m.u.cancel.id = 42;
        break;
    case IFD_WIRE_STATS_REQ:
        m.u.stats_req.seq = 1ull << 40;
        break;
    case IFD_WIRE_DRAIN:
    case IFD_WIRE_SHUTDOWN:
        break;
    case IFD_WIRE_LOG_LEVEL:
        m.u.log_level.level = 3;
        break;
    case IFD_WIRE_READY:
        m.u.ready = (ifd_wire_ready_t){.slot = 3,
                                       .pid = 4242,
                                       .model_name = "SmolLM2-135M-Instruct",
                                       .arch = "llama",
                                       .n_vocab = 49152,
                                       .n_ctx = 8192,
                                       .backend = "cpu",
                                       .device_name = "",
                                       .max_seqs = 64,
                                       .max_batched_tokens = 2048,
                                       .kv = g_kv,
                                       .vision = {.tokens_per_image = 256,
                                                  .boi_id = 255999,
                                                  .eoi_id = 256000,
                                                  .image_id = 262144,
                                                  .height = 896,
                                                  .width = 896,
                                                  .resample = 2,
                                                  .do_pan_and_scan = true,
                                                  .pas_min_crop_size = 256,
                                                  .pas_max_num_crops = 4,
                                                  .pas_min_ratio = 1.2}};
        break;
    case IFD_WIRE_TOKENS:
        g_events[0] = (ifd_wire_token_t){.id = 1, .token = 5};
        g_events[1] = (ifd_wire_token_t){.id = 2,
                                         .token = 49151,
                                         .has_logprob = true,
                                         .logprob = -0.125f,
                                         .top = g_top,
                                         .n_top = 3};
        g_events[2] = (ifd_wire_token_t){
            .id = UINT64_MAX, .token = 0, .has_logprob = true, .logprob = -INFINITY};
        m.u.tokens.step = 99;
        m.u.tokens.events = g_events;
        m.u.tokens.n_events = 3;
        break;
    case IFD_WIRE_FINISHED:
        m.u.finished = (ifd_wire_finished_t){.id = 9,
                                             .reason = IFD_WIRE_FINISH_CANCELLED,
                                             .stop_token = -1,
                                             .prompt_tokens = 100,
                                             .completion_tokens = 28,
                                             .cached_tokens = 96};
        break;
    case IFD_WIRE_ERROR:
        m.u.error = (ifd_wire_error_t){
            .id = 0, .code = IFD_ENOBLOCKS, .message = "no free KV blocks: \"pool\" 100% used"};
        break;
    case IFD_WIRE_STATS:
        m.u.stats = (ifd_wire_stats_t){
            .seq = 7,
            .running = 12,
            .waiting = 3,
            .kv_blocks_in_use = 1000,
            .kv_blocks_total = 4096,
            .steps = 1ull << 33,
            .prefill_tokens = 123456,
            .decode_tokens = 654321,
            .tokens_per_step = 14.75,
            .batch_occupancy = 0.1 + 1e-12,
            .prefix_query_tokens = 5000,
            .prefix_hit_tokens = 4000,
            .prefix_hit_rate = 0.8,
            .preemptions = 2,
            .forward_ns = 10000000000ull,
            .sampling_ns = 200000,
            .scheduling_ns = 300,
            .step_tokens = {{5, 0, 1ull << 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, UINT64_MAX}},
            .spec_drafts = 9,
            .spec_accepted_per_pos = g_per_pos,
            .n_spec_per_pos = 2,
            .draft_tier = g_draft_tier,
            .n_draft_tier = 25};
        for (uint32_t i = 0; i < IFD_WIRE_MAX_TIER_CTRS + 1; i++)
            g_draft_tier[i].n = i == 3 ? UINT64_MAX : (uint64_t)i * 1000;
        break;
    case IFD_WIRE_PROMPT_LOGPROBS:
        g_plp[0] = (ifd_wire_plp_t){
            .token = 49151, .logprob = -3.5f, .rank = 40000, .top = g_top, .n_top = 3};
        g_plp[1] = (ifd_wire_plp_t){.token = 0, .logprob = -INFINITY, .rank = 1};
        m.u.prompt_logprobs = (ifd_wire_prompt_logprobs_t){
            .id = UINT64_MAX, .pos = 17, .entries = g_plp, .n_entries = 2};
        break;
    }
    return m;
}

static const ifd_wire_type_t k_types[] = {
    IFD_WIRE_HELLO,           IFD_WIRE_ADD,      IFD_WIRE_CANCEL,    IFD_WIRE_STATS_REQ,
    IFD_WIRE_DRAIN,           IFD_WIRE_SHUTDOWN, IFD_WIRE_READY,     IFD_WIRE_TOKENS,
    IFD_WIRE_FINISHED,        IFD_WIRE_ERROR,    IFD_WIRE_STATS,     IFD_WIRE_LOG_LEVEL,
    IFD_WIRE_PROMPT_LOGPROBS, IFD_WIRE_POOL,     IFD_WIRE_POOL_SIZE,
};
#define N_TYPES (sizeof(k_types) / sizeof(k_types[0]))

static void encode_ok(const ifd_wire_msg_t *m, ifd_buf_t *b)
{
    int rc = ifd_wire_encode(b, m);
    ck_assert_msg(rc == 0, "encode %s: %s", ifd_wire_type_name(m->type), ifd_err_name(rc));
}

/* Encodes m, decodes it, and checks the re-encoding is byte-identical. */
static void round_trip(const ifd_wire_msg_t *m, ifd_wire_msg_t *out)
{
    ifd_buf_t a = IFD_BUF_INIT, b = IFD_BUF_INIT;
    char err[256] = "";
    encode_ok(m, &a);
    size_t used = 0;
    int rc = ifd_wire_decode(a.data, a.len, out, &used, err, sizeof(err));
    ck_assert_msg(rc == 0, "decode %s: %s %s", ifd_wire_type_name(m->type), ifd_err_name(rc), err);
    ck_assert_uint_eq(used, a.len);
    ck_assert_int_eq(out->type, m->type);
    encode_ok(out, &b);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert(memcmp(a.data, b.data, a.len) == 0);
    ifd_buf_free(&a);
    ifd_buf_free(&b);
}

/* ---- round trips ------------------------------------------------------------------------ */

/* Version 13: a token's and a prompt token's top logprobs past 20 (k =
 * 1000, ids past 2^16 where msgpack needs 5 bytes) survive the round trip,
 * and an event takes at most 48 + k * IFD_WIRE_TOP_BYTES encoded — the bound
 * worker/serve.c splits frames by. */
START_TEST(test_thousand_top_round_trip)
{
    enum { K = 1000 };
    ifd_wire_top_t *top = malloc(K * sizeof *top);
    ck_assert_ptr_nonnull(top);
    for (int i = 0; i < K; i++)
        top[i] = (ifd_wire_top_t){INT32_MAX - i, -(float)i * 0.001f - 1e-7f};
    ifd_wire_token_t ev = {.id = UINT64_MAX,
                           .token = INT32_MAX,
                           .has_logprob = true,
                           .logprob = -1.0f,
                           .top = top,
                           .n_top = K};
    ifd_wire_msg_t m = {.type = IFD_WIRE_TOKENS}, d;
    m.u.tokens = (ifd_wire_tokens_t){.step = UINT64_MAX, .events = &ev, .n_events = 1};
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.tokens.events[0].n_top, K);
    for (int i = 0; i < K; i++) {
        ck_assert_int_eq(d.u.tokens.events[0].top[i].token, top[i].token);
        ck_assert(d.u.tokens.events[0].top[i].logprob == top[i].logprob);
    }
    ifd_wire_msg_free(&d);
    ifd_buf_t b = IFD_BUF_INIT;
    encode_ok(&m, &b);
    ck_assert_uint_le(b.len, IFD_WIRE_HEADER_SIZE + 48 + (size_t)K * IFD_WIRE_TOP_BYTES);
    ifd_buf_free(&b);
    ifd_wire_plp_t ent[2] = {{.token = 3, .logprob = -2.0f, .rank = 7, .top = top, .n_top = K},
                             {.token = 4, .logprob = -3.0f, .rank = 1, .top = top, .n_top = 1}};
    m = (ifd_wire_msg_t){.type = IFD_WIRE_PROMPT_LOGPROBS};
    m.u.prompt_logprobs =
        (ifd_wire_prompt_logprobs_t){.id = 9, .pos = 1, .entries = ent, .n_entries = 2};
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.prompt_logprobs.entries[0].n_top, K);
    ck_assert_int_eq(d.u.prompt_logprobs.entries[0].top[K - 1].token, INT32_MAX - (K - 1));
    ifd_wire_msg_free(&d);
    free(top);
}
END_TEST

START_TEST(test_every_type_round_trips)
{
    for (size_t i = 0; i < N_TYPES; i++) {
        ifd_wire_msg_t m = sample(k_types[i]), d;
        round_trip(&m, &d);
        ck_assert_str_eq(ifd_wire_type_name(k_types[i]) ? ifd_wire_type_name(k_types[i]) : "",
                         ifd_wire_type_name(d.type));
        ifd_wire_msg_free(&d);
        ck_assert_int_eq(d.type, k_types[i]); /* free keeps the type */
    }
    ck_assert_int_eq(ifd_wire_type_dir(IFD_WIRE_ADD), IFD_WIRE_TO_WORKER);
    ck_assert_int_eq(ifd_wire_type_dir(IFD_WIRE_TOKENS), IFD_WIRE_TO_ROUTER);
    ck_assert_int_eq(ifd_wire_type_dir(0), 0);
    ck_assert_ptr_null(ifd_wire_type_name(1000));
    ck_assert_str_eq(ifd_wire_type_name(IFD_WIRE_STATS_REQ), "stats_req");
}
END_TEST

START_TEST(test_add_fields)
{
    ifd_wire_msg_t m = sample(IFD_WIRE_ADD), d;
    round_trip(&m, &d);
    const ifd_wire_add_t *a = &d.u.add;
    ck_assert_uint_eq(a->id, UINT64_MAX - 1);
    ck_assert_uint_eq(a->n_tokens, 300);
    ck_assert_ptr_ne(a->tokens, g_tokens);
    for (int i = 0; i < 300; i++)
        ck_assert_int_eq(a->tokens[i], g_tokens[i]);
    ck_assert_uint_eq(a->n_generated, 17);
    ck_assert(a->sampling.temperature == 0.7f);
    ck_assert_int_eq(a->sampling.top_k, 40);
    ck_assert(a->sampling.top_p == 0.9f && a->sampling.min_p == 0.05f);
    ck_assert(a->sampling.repetition_penalty == 1.1f);
    ck_assert(a->sampling.frequency_penalty == -0.5f && a->sampling.presence_penalty == 2.0f);
    ck_assert_uint_eq(a->sampling.n_logit_bias, 3);
    ck_assert_int_eq(a->sampling.logit_bias[0].id, 7);
    ck_assert(a->sampling.logit_bias[0].bias == 5.5f);
    ck_assert(a->sampling.logit_bias[1].bias == -100.0f);
    ck_assert(isinf(a->sampling.logit_bias[2].bias) && a->sampling.logit_bias[2].bias < 0);
    ck_assert_int_eq(a->sampling.n_logprobs, 5);
    ck_assert_uint_eq(a->sampling.logprobs_mode, 1);
    ck_assert_uint_eq(a->sampling.seed, UINT64_MAX);
    ck_assert_uint_eq(a->n_stop_ids, 3);
    ck_assert_int_eq(a->stop_ids[2], 49152);
    ck_assert_uint_eq(a->max_tokens, 4096);
    ck_assert(a->ignore_eos && a->use_cache);
    ck_assert_int_eq(a->priority, -3);
    ck_assert_uint_eq(a->n_grammar, 5);
    ck_assert_mem_eq(a->grammar, g_grammar, sizeof g_grammar);
    ck_assert_uint_eq(a->min_tokens, 7);
    ck_assert_uint_eq(a->prompt_logprobs, 21);
    ck_assert_uint_eq(a->client, 0xfeedbeefu);
    ck_assert_uint_eq(a->n_allowed_ids, 3);
    ck_assert_ptr_ne(a->allowed_ids, g_stops);
    ck_assert_mem_eq(a->allowed_ids, g_stops, sizeof g_stops);
    ck_assert_uint_eq(a->n_lp_ids, 2);
    ck_assert_int_eq(a->lp_ids[0], 0);
    ck_assert_int_eq(a->lp_ids[1], 49152);
    ck_assert_uint_eq(a->spec.method, 2);
    ck_assert_uint_eq(a->spec.num_tokens, 16);
    ck_assert_uint_eq(a->spec.ngram_min, 2);
    ck_assert_uint_eq(a->spec.ngram_max, 16);
    ck_assert_uint_eq(a->n_images, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(a->images[i].pos, 5 + 16 * (uint32_t)i);
        ck_assert_uint_eq(a->images[i].n_tokens, 16);
        ck_assert(a->images[i].hash_lo == 1 && a->images[i].hash_hi == UINT64_MAX);
        ck_assert(a->images[i].width == 4 && a->images[i].height == 3);
        ck_assert_uint_eq(a->images[i].n_pixels, sizeof g_pix[i]);
        ck_assert_ptr_ne(a->images[i].pixels, g_pix[i]);
        ck_assert_mem_eq(a->images[i].pixels, g_pix[i], sizeof g_pix[i]);
    }
    ifd_wire_msg_free(&d);
    ck_assert_ptr_null(d.u.add.tokens);
    ifd_wire_msg_free(&d); /* twice is harmless */
    ifd_wire_msg_free(NULL);

    /* Empty optional arrays decode as NULL + 0. */
    m.u.add.sampling.n_logit_bias = 0;
    m.u.add.sampling.logit_bias = NULL;
    m.u.add.n_stop_ids = 0;
    m.u.add.n_allowed_ids = 0;
    round_trip(&m, &d);
    ck_assert_ptr_null(d.u.add.stop_ids);
    ck_assert_ptr_null(d.u.add.allowed_ids);
    ck_assert_ptr_null(d.u.add.sampling.logit_bias);
    ifd_wire_msg_free(&d);
}
END_TEST

START_TEST(test_other_fields)
{
    ifd_wire_msg_t m = sample(IFD_WIRE_TOKENS), d;
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.tokens.step, 99);
    ck_assert_uint_eq(d.u.tokens.n_events, 3);
    const ifd_wire_token_t *e = d.u.tokens.events;
    ck_assert(!e[0].has_logprob && e[0].n_top == 0 && e[0].top == NULL);
    ck_assert(e[1].has_logprob && e[1].logprob == -0.125f && e[1].n_top == 3);
    ck_assert_int_eq(e[1].top[1].token, 12);
    ck_assert(e[1].top[1].logprob == -1.5f);
    ck_assert(isinf(e[1].top[2].logprob));
    ck_assert_uint_eq(e[2].id, UINT64_MAX);
    ck_assert(isinf(e[2].logprob));
    ifd_wire_msg_free(&d);

    m = sample(IFD_WIRE_HELLO);
    round_trip(&m, &d);
    ck_assert_str_eq(d.u.hello.model_path, "/models/smöl.gguf");
    ck_assert_str_eq(d.u.hello.backend, "cuda");
    ck_assert_int_eq(d.u.hello.device, -1);
    ck_assert_uint_eq(d.u.hello.kv.n_blocks, 123456789012ull);
    ck_assert_uint_eq(d.u.hello.kv.fingerprint, 0xfedcba9876543210ull);
    ck_assert_uint_eq(d.u.hello.max_batched_tokens, 8192);
    ck_assert_int_eq(d.u.hello.prefill_cap, -1);
    ck_assert(d.u.hello.size_pool && d.u.hello.gpu_memory_fraction == 0.875);
    ck_assert_uint_eq(d.u.hello.max_model_len, 131072);
    ck_assert_str_eq(d.u.hello.draft_model_path, "/models/draft.gguf");
    ck_assert_str_eq(d.u.hello.mmproj_path, "/models/mmproj.gguf");
    ck_assert_uint_eq(d.u.hello.spec.method, 3);
    ck_assert_uint_eq(d.u.hello.n_fds, 3);
    ck_assert_uint_eq(d.u.hello.n_local_fds, 1);
    ifd_wire_msg_free(&d);
    /* the POOL step's fraction must be a share of the device */
    {
        ifd_buf_t hb = IFD_BUF_INIT;
        m.u.hello.gpu_memory_fraction = 0.0;
        ck_assert_int_eq(ifd_wire_encode(&hb, &m), IFD_EINVAL);
        m.u.hello.gpu_memory_fraction = 1.5;
        ck_assert_int_eq(ifd_wire_encode(&hb, &m), IFD_EINVAL);
        m.u.hello.size_pool = false; /* a plain HELLO does not read it */
        ck_assert_int_eq(ifd_wire_encode(&hb, &m), 0);
        ifd_buf_free(&hb);
    }

    m = sample(IFD_WIRE_POOL);
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.pool.n_fds, 2);
    ck_assert_uint_eq(d.u.pool.n_local_fds, 1);
    ck_assert_uint_eq(d.u.pool.kv.n_blocks, 123456789012ull);
    ck_assert_str_eq(ifd_wire_type_name(IFD_WIRE_POOL), "pool");
    ck_assert_int_eq(ifd_wire_type_dir(IFD_WIRE_POOL), IFD_WIRE_TO_WORKER);
    ifd_wire_msg_free(&d);

    m = sample(IFD_WIRE_POOL_SIZE);
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.pool_size.n_blocks, 1ull << 33);
    ck_assert_uint_eq(d.u.pool_size.usable_bytes, 3ull << 40);
    ck_assert_uint_eq(d.u.pool_size.margin_bytes, 64 << 20);
    ck_assert_uint_eq(d.u.pool_size.n_graphs, 70);
    ck_assert_str_eq(d.u.pool_size.device, "NVIDIA H200 (sm_90, 139 GiB)");
    ck_assert_str_eq(ifd_wire_type_name(IFD_WIRE_POOL_SIZE), "pool_size");
    ck_assert_int_eq(ifd_wire_type_dir(IFD_WIRE_POOL_SIZE), IFD_WIRE_TO_ROUTER);
    ifd_wire_msg_free(&d);

    m = sample(IFD_WIRE_READY);
    m.u.ready.arch = NULL; /* NULL strings go out as "" */
    round_trip(&m, &d);
    ck_assert_str_eq(d.u.ready.arch, "");
    ck_assert_str_eq(d.u.ready.device_name, "");
    ck_assert_str_eq(d.u.ready.model_name, "SmolLM2-135M-Instruct");
    ck_assert_uint_eq(d.u.ready.n_vocab, 49152);
    ck_assert_uint_eq(d.u.ready.vision.tokens_per_image, 256);
    ck_assert_int_eq(d.u.ready.vision.image_id, 262144);
    ck_assert(d.u.ready.vision.width == 896 && d.u.ready.vision.resample == 2);
    ck_assert(d.u.ready.vision.do_pan_and_scan && d.u.ready.vision.pas_min_ratio == 1.2);
    ck_assert_uint_eq(d.u.ready.vision.pas_max_num_crops, 4);
    ifd_wire_msg_free(&d);

    m = sample(IFD_WIRE_STATS);
    round_trip(&m, &d);
    ck_assert(d.u.stats.batch_occupancy == 0.1 + 1e-12); /* doubles stay doubles */
    ck_assert_uint_eq(d.u.stats.forward_ns, 10000000000ull);
    ck_assert_uint_eq(d.u.stats.running, 12);
    ck_assert_uint_eq(d.u.stats.n_spec_per_pos, 2);
    ck_assert_uint_eq(d.u.stats.spec_accepted_per_pos[1].n, 3);
    /* the draft pool's tier counters (version 15) */
    ck_assert_uint_eq(d.u.stats.n_draft_tier, 25);
    ck_assert_uint_eq(d.u.stats.draft_tier[3].n, UINT64_MAX);
    ck_assert_uint_eq(d.u.stats.draft_tier[24].n, 24000);
    ifd_wire_msg_free(&d);
    m.u.stats.n_draft_tier = 0; /* none: an empty array */
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.stats.n_draft_tier, 0);
    ifd_wire_msg_free(&d);
    m.u.stats.n_draft_tier = IFD_WIRE_MAX_TIER_CTRS; /* the bound passes, one more does not */
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.stats.n_draft_tier, IFD_WIRE_MAX_TIER_CTRS);
    ifd_wire_msg_free(&d);
    {
        ifd_buf_t big = IFD_BUF_INIT;
        m.u.stats.n_draft_tier = IFD_WIRE_MAX_TIER_CTRS + 1;
        ck_assert_int_eq(ifd_wire_encode(&big, &m), IFD_ETOOBIG);
        ck_assert_uint_eq(big.len, 0);
        ifd_buf_free(&big);
    }

    m = sample(IFD_WIRE_FINISHED);
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.finished.reason, IFD_WIRE_FINISH_CANCELLED);
    ck_assert_int_eq(d.u.finished.stop_token, -1);
    ck_assert_uint_eq(d.u.finished.cached_tokens, 96);
    ifd_wire_msg_free(&d);

    m = sample(IFD_WIRE_PROMPT_LOGPROBS);
    round_trip(&m, &d);
    ck_assert_uint_eq(d.u.prompt_logprobs.id, UINT64_MAX);
    ck_assert_uint_eq(d.u.prompt_logprobs.pos, 17);
    ck_assert_uint_eq(d.u.prompt_logprobs.n_entries, 2);
    ck_assert_int_eq(d.u.prompt_logprobs.entries[0].token, 49151);
    ck_assert_uint_eq(d.u.prompt_logprobs.entries[0].rank, 40000);
    ck_assert_uint_eq(d.u.prompt_logprobs.entries[0].n_top, 3);
    ck_assert_int_eq(d.u.prompt_logprobs.entries[0].top[2].token, 13);
    ck_assert(isinf(d.u.prompt_logprobs.entries[1].logprob));
    ck_assert_ptr_null(d.u.prompt_logprobs.entries[1].top);
    ck_assert_str_eq(ifd_wire_type_name(IFD_WIRE_PROMPT_LOGPROBS), "prompt_logprobs");
    ck_assert_int_eq(ifd_wire_type_dir(IFD_WIRE_PROMPT_LOGPROBS), IFD_WIRE_TO_ROUTER);
    ifd_wire_msg_free(&d);
    /* position 0 has no logprob, an empty frame says nothing; k <= IFD_WIRE_MAX_TOP */
    ifd_buf_t b = IFD_BUF_INIT;
    m.u.prompt_logprobs.pos = 0;
    ck_assert_int_lt(ifd_wire_encode(&b, &m), 0);
    m.u.prompt_logprobs.pos = 1;
    m.u.prompt_logprobs.n_entries = 0;
    ck_assert_int_lt(ifd_wire_encode(&b, &m), 0);
    m = sample(IFD_WIRE_ADD);
    m.u.add.prompt_logprobs = 2 + IFD_WIRE_MAX_TOP;
    ck_assert_int_lt(ifd_wire_encode(&b, &m), 0);
    ck_assert_uint_eq(b.len, 0);
    ifd_buf_free(&b);

    m = sample(IFD_WIRE_ERROR);
    round_trip(&m, &d);
    ck_assert_int_eq(d.u.error.code, IFD_ENOBLOCKS);
    ck_assert_str_eq(d.u.error.message, "no free KV blocks: \"pool\" 100% used");
    ifd_wire_msg_free(&d);
}
END_TEST

START_TEST(test_frame_layout)
{
    ifd_wire_msg_t m = sample(IFD_WIRE_DRAIN);
    ifd_buf_t b = IFD_BUF_INIT;
    encode_ok(&m, &b);
    /* "IFDW", the version, type 5, length 1, then msgpack [] */
    static const uint8_t want[] = {'I', 'F', 'D', 'W', 0, IFD_WIRE_VERSION, 0, 5, 0, 0, 0, 1, 0x90};
    ck_assert_uint_eq(b.len, sizeof(want));
    ck_assert(memcmp(b.data, want, sizeof(want)) == 0);

    m = sample(IFD_WIRE_CANCEL);
    ifd_buf_clear(&b);
    encode_ok(&m, &b);
    static const uint8_t cancel[] = {'I', 'F', 'D', 'W', 0, IFD_WIRE_VERSION, 0, 3,
                                     0,   0,   0,   2,   0x91, 42};
    ck_assert_uint_eq(b.len, sizeof(cancel));
    ck_assert(memcmp(b.data, cancel, sizeof(cancel)) == 0);

    /* Appending keeps what the buffer held. */
    encode_ok(&m, &b);
    ck_assert_uint_eq(b.len, 2 * sizeof(cancel));
    ifd_buf_free(&b);
}
END_TEST

/* ---- encoder refusals ---------------------------------------------------------------------- */

START_TEST(test_encode_refuses_invalid)
{
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_buf_puts(&b, "keep"), 0);
    ifd_wire_msg_t m = sample(IFD_WIRE_ADD);
    m.u.add.n_generated = m.u.add.n_tokens;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_ADD);
    m.u.add.tokens = NULL;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_ADD);
    m.u.add.id = 0;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_ADD);
    m.u.add.max_tokens = 0;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_ADD);
    m.u.add.sampling.n_logprobs = (int32_t)IFD_WIRE_MAX_TOP + 1;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    /* images (version 12): pixel bytes = w × h × 3, inside the prompt, in order, not
     * overlapping, not empty */
    {
        static const struct {
            uint32_t pos, n_tokens, w, h, n_pixels;
        } bad[] = {
            {5, 16, 4, 3, 35},   /* a byte short */
            {5, 16, 5, 3, 36},   /* bytes of another size */
            {5, 0, 4, 3, 36},    /* no tokens */
            {10, 16, 4, 3, 36},  /* overlaps the second */
            {280, 4, 4, 3, 36},  /* past the prompt (300 tokens, 17 generated): 284 > 283 */
            {30, 16, 4, 3, 36},  /* after the second */
            {5, 16, 0, 0, 0},    /* empty picture */
            {5, 16, 4097, 1, 4097 * 3}, /* over IFD_WIRE_MAX_IMAGE_SIDE */
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            m = sample(IFD_WIRE_ADD);
            ifd_wire_image_t im[2] = {g_images[0], g_images[1]};
            im[0].pos = bad[i].pos;
            im[0].n_tokens = bad[i].n_tokens;
            im[0].width = bad[i].w;
            im[0].height = bad[i].h;
            im[0].n_pixels = bad[i].n_pixels;
            m.u.add.images = im;
            ck_assert_msg(ifd_wire_encode(&b, &m) == IFD_EINVAL, "bad image case %zu", i);
        }
        m = sample(IFD_WIRE_ADD);
        ifd_wire_image_t im = g_images[0];
        im.pos = 283 - 16; /* ends exactly at the prompt's end */
        m.u.add.images = &im;
        m.u.add.n_images = 1;
        ifd_buf_t ok = IFD_BUF_INIT;
        ck_assert_int_eq(ifd_wire_encode(&ok, &m), 0);
        ifd_buf_free(&ok);
        m.u.add.n_images = IFD_WIRE_MAX_IMAGES + 1;
        ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_ETOOBIG);
    }
    /* speculative decoding (version 10): method, k and n-gram bounds */
    m = sample(IFD_WIRE_ADD);
    m.u.add.spec.method = 4; /* 3: the draft model */
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_ADD);
    m.u.add.spec.num_tokens = IFD_WIRE_MAX_SPEC_TOKENS + 1;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_ADD);
    m.u.add.spec = (ifd_wire_spec_t){2, 4, 5, 2};
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_ADD);
    m.u.add.sampling.logprobs_mode = 2;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_ADD);
    m.u.add.n_stop_ids = IFD_WIRE_MAX_STOP_IDS + 1;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_ETOOBIG);
    m = sample(IFD_WIRE_TOKENS);
    g_events[1].n_top = IFD_WIRE_MAX_TOP + 1;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_ETOOBIG);
    m = sample(IFD_WIRE_TOKENS);
    m.u.tokens.n_events = 0;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_FINISHED);
    m.u.finished.reason = IFD_WIRE_FINISH_COUNT;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m = sample(IFD_WIRE_HELLO); /* KV dtypes 0..5 (f32 … q4_0, fp8), not 6 */
    m.u.hello.kv.dtype = 6;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    m.u.hello.kv.dtype = 5;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), 0);
    char *big = malloc(IFD_WIRE_MAX_STR + 2);
    memset(big, 'x', IFD_WIRE_MAX_STR + 1);
    big[IFD_WIRE_MAX_STR + 1] = '\0';
    m = sample(IFD_WIRE_ERROR);
    m.u.error.message = big;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_ETOOBIG);
    big[IFD_WIRE_MAX_STR] = '\0'; /* exactly the limit is fine */
    ck_assert_int_eq(ifd_wire_encode(&b, &m), 0);
    free(big);
    ck_assert_uint_gt(b.len, 4);
    b.len = 4;
    m.type = (ifd_wire_type_t)77;
    ck_assert_int_eq(ifd_wire_encode(&b, &m), IFD_EINVAL);
    ck_assert_uint_eq(b.len, 4);
    ck_assert(memcmp(b.data, "keep", 4) == 0);
    ifd_buf_free(&b);
}
END_TEST

/* ---- bad frames -------------------------------------------------------------------------------
 */

/* A frame with a valid header of type `type` around a hand-made body. */
static size_t frame(uint8_t *out, int type, const uint8_t *body, size_t n)
{
    const uint8_t hdr[12] = {'I',
                             'F',
                             'D',
                             'W',
                             0,
                             IFD_WIRE_VERSION,
                             (uint8_t)(type >> 8),
                             (uint8_t)type,
                             (uint8_t)(n >> 24),
                             (uint8_t)(n >> 16),
                             (uint8_t)(n >> 8),
                             (uint8_t)n};
    memcpy(out, hdr, 12);
    memcpy(out + 12, body, n);
    return 12 + n;
}

static int decode_bytes(const uint8_t *p, size_t n, char *err, size_t errlen)
{
    ifd_wire_msg_t m;
    int rc = ifd_wire_decode(p, n, &m, NULL, err, errlen);
    if (rc == 0)
        ifd_wire_msg_free(&m);
    else
        ck_assert_ptr_null(m.u.add.tokens); /* nothing left allocated or dangling */
    return rc;
}

/* Decodes a hand-made body and checks the code and a piece of the message.
 * `pad` zero bytes follow the body, so that array counts near the start are
 * not refused for want of bytes before the field under test is reached. */
static void expect_body(int line, int type, int rc_want, const char *substr, const uint8_t *body,
                        size_t n, size_t pad)
{
    uint8_t *b = calloc(1, n + pad + 1);
    memcpy(b, body, n);
    uint8_t *f = malloc(12 + n + pad);
    size_t len = frame(f, type, b, n + pad);
    char e[256] = "";
    int rc = decode_bytes(f, len, e, sizeof(e));
    ck_assert_msg(rc == rc_want, "line %d: got %s (%s)", line, ifd_err_name(rc), e);
    ck_assert_msg(strstr(e, substr) != NULL, "line %d: '%s' lacks '%s'", line, e, substr);
    free(b);
    free(f);
}

#define EXPECT_BODY(type, rc_want, substr, ...)                                                    \
    do {                                                                                           \
        static const uint8_t body_[] = {__VA_ARGS__};                                              \
        expect_body(__LINE__, type, rc_want, substr, body_, sizeof(body_), 0);                     \
    } while (0)

#define EXPECT_PADDED(type, rc_want, substr, ...)                                                  \
    do {                                                                                           \
        static const uint8_t body_[] = {__VA_ARGS__};                                              \
        expect_body(__LINE__, type, rc_want, substr, body_, sizeof(body_), 64);                    \
    } while (0)

START_TEST(test_bad_headers)
{
    ifd_wire_msg_t m = sample(IFD_WIRE_CANCEL);
    ifd_buf_t b = IFD_BUF_INIT;
    encode_ok(&m, &b);
    uint8_t f[64];
    memcpy(f, b.data, b.len);
    char err[256];
    ifd_wire_header_t h;

    f[0] = 'X';
    ck_assert_int_eq(decode_bytes(f, b.len, err, sizeof(err)), IFD_EFORMAT);
    ck_assert(strstr(err, "magic"));
    memcpy(f, b.data, b.len);
    f[5] = IFD_WIRE_VERSION + 1;
    ck_assert_int_eq(decode_bytes(f, b.len, err, sizeof(err)), IFD_EVERSION);
    char want_ver[32];
    snprintf(want_ver, sizeof want_ver, "version %d", IFD_WIRE_VERSION + 1);
    ck_assert(strstr(err, want_ver));
    memcpy(f, b.data, b.len);
    f[7] = 0;
    ck_assert_int_eq(decode_bytes(f, b.len, err, sizeof(err)), IFD_EFORMAT);
    ck_assert(strstr(err, "unknown message type 0"));
    memcpy(f, b.data, b.len);
    f[7] = 64;
    ck_assert_int_eq(decode_bytes(f, b.len, err, sizeof(err)), IFD_EFORMAT);

    /* A length beyond the cap fails on the header alone. */
    memcpy(f, b.data, b.len);
    f[8] = 0x02, f[9] = 0, f[10] = 0, f[11] = 1; /* 32 MiB + 1 */
    ck_assert_int_eq(ifd_wire_decode_header(f, 12, 0, &h, err, sizeof(err)), IFD_ETOOBIG);
    ck_assert(strstr(err, "cap"));
    f[8] = 0xff, f[9] = 0xff, f[10] = 0xff, f[11] = 0xff;
    ck_assert_int_eq(decode_bytes(f, b.len, err, sizeof(err)), IFD_ETOOBIG);
    /* A smaller cap of the caller's. */
    memcpy(f, b.data, b.len);
    ck_assert_int_eq(ifd_wire_decode_header(f, b.len, 1, &h, err, sizeof(err)), IFD_ETOOBIG);
    ck_assert_int_eq(ifd_wire_decode_header(f, b.len, 2, &h, err, sizeof(err)), 0);
    ck_assert_uint_eq(h.length, 2);
    ck_assert_uint_eq(h.type, IFD_WIRE_CANCEL);
    ck_assert_uint_eq(h.version, IFD_WIRE_VERSION);
    /* err may be NULL */
    ck_assert_int_eq(ifd_wire_decode_header(f, 3, 0, &h, NULL, 0), IFD_ETRUNC);
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_truncated_at_every_byte)
{
    for (size_t t = 0; t < N_TYPES; t++) {
        ifd_wire_msg_t m = sample(k_types[t]);
        ifd_buf_t b = IFD_BUF_INIT;
        encode_ok(&m, &b);
        /* Each prefix in its own exact-size allocation, so ASan sees any overread. */
        for (size_t k = 0; k < b.len; k++) {
            uint8_t *p = malloc(k ? k : 1);
            memcpy(p, b.data, k);
            char err[256] = "";
            int rc = decode_bytes(p, k, err, sizeof(err));
            ck_assert_msg(rc == IFD_ETRUNC, "%s cut at %zu: %s %s", ifd_wire_type_name(k_types[t]),
                          k, ifd_err_name(rc), err);
            free(p);
        }
        /* The body cut short with a header that agrees: the msgpack itself ends early. */
        for (size_t k = IFD_WIRE_HEADER_SIZE; k < b.len; k++) {
            uint8_t *p = malloc(k);
            memcpy(p, b.data, k);
            uint32_t blen = (uint32_t)(k - IFD_WIRE_HEADER_SIZE);
            p[8] = (uint8_t)(blen >> 24), p[9] = (uint8_t)(blen >> 16);
            p[10] = (uint8_t)(blen >> 8), p[11] = (uint8_t)blen;
            char err[256] = "";
            int rc = decode_bytes(p, k, err, sizeof(err));
            ck_assert_msg(rc == IFD_ETRUNC, "%s body cut at %zu: %s %s",
                          ifd_wire_type_name(k_types[t]), k, ifd_err_name(rc), err);
            ck_assert(err[0] != '\0');
            free(p);
        }
        ifd_buf_free(&b);
    }
}
END_TEST

START_TEST(test_wrong_msgpack_types)
{
    /* Body is a map, not an array. */
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ETYPE, "cancel: expected array, got map", 0x81, 0x01, 0x02);
    /* Field count off. */
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_EFORMAT, "2 fields, expected 1", 0x92, 0x01, 0x02);
    EXPECT_BODY(IFD_WIRE_DRAIN, IFD_EFORMAT, "1 fields, expected 0", 0x91, 0x00);
    /* A string where an integer goes. */
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ETYPE, "cancel.id: expected int, got str", 0x91, 0xa1, 'x');
    /* Negative for an unsigned field; nil; float; bool. */
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ERANGE, "cancel.id: negative", 0x91, 0xff);
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ETYPE, "got nil", 0x91, 0xc0);
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ETYPE, "got float", 0x91, 0xca, 0, 0, 0, 0);
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ETYPE, "got bool", 0x91, 0xc3);
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ETYPE, "invalid byte 0xc1", 0x91, 0xc1);
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ETYPE, "got bin", 0x91, 0xc4, 0x01, 0x00);
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_ETYPE, "got ext", 0x91, 0xd4, 0x01, 0x00);
    /* Trailing bytes after the array. */
    EXPECT_BODY(IFD_WIRE_CANCEL, IFD_EFORMAT, "trailing", 0x91, 0x01, 0x00);
    /* Wide encodings of small values are fine. */
    EXPECT_BODY(IFD_WIRE_CANCEL, 0, "", 0x91, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1);
    EXPECT_BODY(IFD_WIRE_CANCEL, 0, "", 0xdc, 0x00, 0x01, 0xd3, 0, 0, 0, 0, 0, 0, 0, 1);
    /* A log level past debug (3). */
    EXPECT_BODY(IFD_WIRE_LOG_LEVEL, IFD_ERANGE, "log_level.level: 4 above 3", 0x91, 0x04);
    EXPECT_BODY(IFD_WIRE_LOG_LEVEL, 0, "", 0x91, 0x00);
    /* An enum out of range; a u32 above 2^32; an i32 out of range. */
    EXPECT_BODY(IFD_WIRE_FINISHED, IFD_ERANGE, "finished.reason: 4 above 3", 0x96, 0x01, 0x04, 0xff,
                0x00, 0x00, 0x00);
    EXPECT_BODY(IFD_WIRE_FINISHED, IFD_ERANGE, "finished.prompt_tokens", 0x96, 0x01, 0x00, 0xff,
                0xcf, 0, 0, 0, 1, 0, 0, 0, 0, 0x00, 0x00);
    EXPECT_BODY(IFD_WIRE_FINISHED, IFD_ERANGE, "finished.stop_token: 2147483648", 0x96, 0x01, 0x00,
                0xce, 0x80, 0, 0, 0, 0x00, 0x00, 0x00);
    EXPECT_BODY(IFD_WIRE_FINISHED, IFD_ERANGE, "-2147483649 does not fit", 0x96, 0x01, 0x00, 0xd3,
                0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00);
    /* Strings: NUL inside, wrong type, over the limit (claimed, not present). */
    EXPECT_BODY(IFD_WIRE_ERROR, IFD_EFORMAT, "error.message: string holds a NUL", 0x93, 0x00, 0x00,
                0xa3, 'a', 0, 'b');
    EXPECT_BODY(IFD_WIRE_ERROR, IFD_ETYPE, "error.message: expected str, got int", 0x93, 0x00, 0x00,
                0x05);
    EXPECT_BODY(IFD_WIRE_ERROR, IFD_ETOOBIG, "error.message: string of 4097 bytes", 0x93, 0x00,
                0x00, 0xda, 0x10, 0x01);
    EXPECT_BODY(IFD_WIRE_ERROR, IFD_ETRUNC, "error.message: truncated", 0x93, 0x00, 0x00, 0xdb,
                0x00, 0x00, 0x01, 0x00, 'x');
    /* A float field given an int: floats must be floats. */
    EXPECT_PADDED(IFD_WIRE_STATS, IFD_ETYPE, "stats.tokens_per_step: expected float", 0xdc, 0x00,
                  0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0x01);
    /* Cross-field checks run after decoding. */
    EXPECT_BODY(IFD_WIRE_TOKENS, IFD_EFORMAT, "tokens: no events", 0x92, 0x01, 0x90);
    EXPECT_BODY(IFD_WIRE_TOKENS, IFD_EFORMAT, "top logprobs without has_logprob", 0x92, 0x01, 0x91,
                0x95, 0x01, 0x02, 0xc2, 0xca, 0, 0, 0, 0, 0x91, 0x92, 0x03, 0xca, 0, 0, 0, 0);
}
END_TEST

START_TEST(test_huge_array_counts)
{
    /* tokens claims 2^32-1 elements: refused on the count, nothing allocated. */
    EXPECT_PADDED(IFD_WIRE_ADD, IFD_ETOOBIG, "add.tokens: 4294967295 elements, limit 4194304", 0xdc, 0x00, 0x11,
                  0x01, 0xdd, 0xff, 0xff, 0xff, 0xff);
    /* Within the limit but more than the bytes left. */
    EXPECT_PADDED(IFD_WIRE_ADD, IFD_ETRUNC, "add.tokens: 65535 elements but 66 bytes left", 0xdc, 0x00, 0x11,
                  0x01, 0xdc, 0xff, 0xff, 0x01, 0x02);
    /* The top-level array itself. */
    EXPECT_BODY(IFD_WIRE_ADD, IFD_ETRUNC, "4294967295 elements", 0xdd, 0xff, 0xff, 0xff, 0xff);
    /* Events: an array of structs. */
    EXPECT_BODY(IFD_WIRE_TOKENS, IFD_ETOOBIG, "tokens.events: 65537 elements, limit 65536", 0x92,
                0x01, 0xdd, 0x00, 0x01, 0x00, 0x01);
    EXPECT_BODY(IFD_WIRE_TOKENS, IFD_ETRUNC, "tokens.events: 60000 elements", 0x92, 0x01, 0xdc,
                0xea, 0x60, 0x95);
    /* A token id that does not fit int32 inside the array names its index. */
    EXPECT_PADDED(IFD_WIRE_ADD, IFD_ERANGE, "add.tokens[1]", 0xdc, 0x00, 0x11, 0x01, 0x92, 0x05, 0xce, 0x80,
                  0x00, 0x00, 0x00);
    /* A nested path: the second logit_bias entry's bias is a string. */
    EXPECT_BODY(IFD_WIRE_ADD, IFD_ETYPE, "add.sampling.logit_bias[1].bias: expected float, got str",
                0xdc, 0x00, 0x11, 0x01, 0x91, 0x05, 0x00, 0x9b, 0xca, 0x3f, 0x80, 0, 0, 0x00, 0xca, 0x3f, 0x80,
                0, 0, 0xca, 0, 0, 0, 0, 0xca, 0x3f, 0x80, 0, 0, 0xca, 0, 0, 0, 0, 0xca, 0, 0, 0, 0,
                0x92, 0x92, 0x01, 0xca, 0, 0, 0, 0, 0x92, 0x02, 0xa1, 'x');
    /* A bin (an image's pixels) claiming more bytes than the body holds, and a str in its place. */
    EXPECT_BODY(IFD_WIRE_ERROR, IFD_ETYPE, "error.message: expected str, got bin", 0x93, 0x00, 0x00,
                0xc4, 0x01, 'x');
    /* Top logprobs are capped at a vocabulary (2^20). */
    EXPECT_BODY(IFD_WIRE_TOKENS, IFD_ETOOBIG,
                "tokens.events[0].top: 1048577 elements, limit 1048576", 0x92, 0x01, 0x91, 0x95,
                0x01, 0x02, 0xc3, 0xca, 0, 0, 0, 0, 0xdd, 0x00, 0x10, 0x00, 0x01);
}
END_TEST

/* ---- streaming reader ---------------------------------------------------------------------------
 */

/* All sample frames back to back. */
static void all_frames(ifd_buf_t *b)
{
    for (size_t i = 0; i < N_TYPES; i++) {
        ifd_wire_msg_t m = sample(k_types[i]);
        encode_ok(&m, b);
    }
}

static void check_same(const ifd_wire_msg_t *got, ifd_wire_type_t t)
{
    ifd_wire_msg_t want = sample(t);
    ifd_buf_t a = IFD_BUF_INIT, b = IFD_BUF_INIT;
    encode_ok(&want, &a);
    encode_ok(got, &b);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert(memcmp(a.data, b.data, a.len) == 0);
    ifd_buf_free(&a);
    ifd_buf_free(&b);
}

START_TEST(test_reader_byte_by_byte)
{
    ifd_buf_t all = IFD_BUF_INIT;
    all_frames(&all);
    ifd_wire_reader_t r;
    ifd_wire_reader_init(&r, 0);
    size_t got = 0;
    for (size_t i = 0; i < all.len; i++) {
        ck_assert_int_eq(ifd_wire_reader_feed(&r, all.data + i, 1), 0);
        ifd_wire_msg_t m;
        int rc;
        while ((rc = ifd_wire_reader_next_msg(&r, &m)) == 1) {
            ck_assert_uint_lt(got, N_TYPES);
            check_same(&m, k_types[got]);
            ifd_wire_msg_free(&m);
            got++;
        }
        ck_assert_int_eq(rc, 0);
    }
    ck_assert_uint_eq(got, N_TYPES);
    ck_assert_uint_eq(ifd_wire_reader_pending(&r), 0);
    ifd_wire_reader_close(&r);
    ifd_buf_free(&all);
}
END_TEST

START_TEST(test_reader_random_pieces_zero_copy)
{
    ifd_buf_t all = IFD_BUF_INIT;
    for (int rep = 0; rep < 3; rep++)
        all_frames(&all);
    uint64_t seed = 12345;
    ifd_wire_reader_t r;
    ifd_wire_reader_init(&r, 0);
    size_t got = 0, i = 0;
    while (i < all.len) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t want = 1 + (seed >> 33) % 700;
        if (want > all.len - i)
            want = all.len - i;
        size_t avail = 0;
        void *dst = ifd_wire_reader_prepare(&r, want, &avail);
        ck_assert_ptr_nonnull(dst);
        ck_assert_uint_ge(avail, want);
        memcpy(dst, all.data + i, want); /* what read(2) would do */
        ck_assert_int_eq(ifd_wire_reader_commit(&r, want), 0);
        i += want;
        ifd_wire_frame_t f;
        int rc;
        while ((rc = ifd_wire_reader_next(&r, &f)) == 1) {
            ifd_wire_msg_t m;
            ck_assert_int_eq(ifd_wire_decode_body(&f.hdr, f.body, &m, NULL, 0), 0);
            check_same(&m, k_types[got % N_TYPES]);
            ifd_wire_msg_free(&m);
            got++;
        }
        ck_assert_int_eq(rc, 0);
    }
    ck_assert_uint_eq(got, 3 * N_TYPES);
    ifd_wire_reader_close(&r);
    ifd_buf_free(&all);
}
END_TEST

START_TEST(test_reader_errors)
{
    ifd_wire_reader_t r;
    ifd_wire_msg_t m;

    /* A wrong magic is refused from its first byte, and stays refused. */
    ifd_wire_reader_init(&r, 0);
    ck_assert_int_eq(ifd_wire_reader_feed(&r, "G", 1), IFD_EFORMAT);
    ck_assert_int_eq(ifd_wire_reader_next_msg(&r, &m), IFD_EFORMAT);
    ck_assert_int_eq(ifd_wire_reader_feed(&r, "IFDW", 4), IFD_EFORMAT);
    ck_assert(strstr(ifd_wire_reader_error(&r), "magic"));
    ifd_wire_reader_close(&r);

    /* An oversized frame is refused on its header, before any body arrives. */
    ifd_wire_reader_init(&r, 1024);
    static const uint8_t big[12] = {'I', 'F', 'D', 'W', 0, IFD_WIRE_VERSION, 0, 2,
                                    0, 0, 0x04, 0x01};
    ck_assert_int_eq(ifd_wire_reader_feed(&r, big, 11), 0);
    ck_assert_int_eq(ifd_wire_reader_feed(&r, big + 11, 1), IFD_ETOOBIG);
    ck_assert_int_eq(ifd_wire_reader_next_msg(&r, &m), IFD_ETOOBIG);
    ck_assert(strstr(ifd_wire_reader_error(&r), "1025 bytes exceeds the cap of 1024"));
    ifd_wire_reader_close(&r);

    /* A wrong version likewise. */
    ifd_wire_reader_init(&r, 0);
    static const uint8_t v9[12] = {'I', 'F', 'D', 'W', 0, IFD_WIRE_VERSION + 1, 0, 2, 0, 0, 0, 1};
    ck_assert_int_eq(ifd_wire_reader_feed(&r, v9, 12), IFD_EVERSION);
    ifd_wire_reader_close(&r);

    /* A body that does not decode is reported but framing goes on. */
    ifd_wire_reader_init(&r, 0);
    uint8_t f[64];
    static const uint8_t bad_body[] = {0x91, 0xa1, 'x'};
    size_t n = frame(f, IFD_WIRE_CANCEL, bad_body, sizeof(bad_body));
    ck_assert_int_eq(ifd_wire_reader_feed(&r, f, n), 0);
    ifd_wire_msg_t good = sample(IFD_WIRE_CANCEL);
    ifd_buf_t b = IFD_BUF_INIT;
    encode_ok(&good, &b);
    ck_assert_int_eq(ifd_wire_reader_feed(&r, b.data, b.len), 0);
    ck_assert_int_eq(ifd_wire_reader_next_msg(&r, &m), IFD_ETYPE);
    ck_assert(strstr(ifd_wire_reader_error(&r), "cancel.id"));
    ck_assert_int_eq(ifd_wire_reader_next_msg(&r, &m), 1);
    ck_assert_uint_eq(m.u.cancel.id, 42);
    ck_assert_str_eq(ifd_wire_reader_error(&r), "");
    ck_assert_int_eq(ifd_wire_reader_next_msg(&r, &m), 0);
    ifd_wire_reader_close(&r);
    ifd_buf_free(&b);
}
END_TEST

/* ---- fuzz
 * -------------------------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random mutations of valid frames: every decode must end in 0 or a clean
 * error, and whatever decodes must encode again and decode to the same. */
START_TEST(test_fuzz_mutations)
{
    const char *env = getenv("INFERD_FUZZ_ITERS");
    long iters = env ? atol(env) : 4000;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    size_t ok = 0, failed = 0;
    for (size_t t = 0; t < N_TYPES; t++) {
        ifd_wire_msg_t m = sample(k_types[t]);
        ifd_buf_t b = IFD_BUF_INIT;
        encode_ok(&m, &b);
        for (long it = 0; it < iters; it++) {
            size_t cap = b.len + 16;
            uint8_t *p = malloc(cap);
            size_t n = b.len;
            memcpy(p, b.data, n);
            int edits = 1 + (int)(rng_next(&s) % 4);
            for (int e = 0; e < edits; e++) {
                uint64_t r = rng_next(&s);
                size_t at = (size_t)(r >> 8) % n;
                switch (r % 6) {
                case 0: /* bit flip */
                    p[at] ^= (uint8_t)(1u << ((r >> 40) % 8));
                    break;
                case 1: /* interesting byte */ {
                    static const uint8_t k[] = {0x00, 0xff, 0xc0, 0xc1, 0xdd, 0xdc, 0xdb,
                                                0xcf, 0x7f, 0x80, 0x9f, 0xca, 0xcb, 0xd3};
                    p[at] = k[(r >> 40) % sizeof(k)];
                    break;
                }
                case 2: /* random byte in the body (keeps the header valid) */
                    if (n > IFD_WIRE_HEADER_SIZE)
                        p[IFD_WIRE_HEADER_SIZE + (r >> 8) % (n - IFD_WIRE_HEADER_SIZE)] =
                            (uint8_t)(r >> 48);
                    break;
                case 3: /* truncate, fixing the length so the body is what's short */
                    if (n > IFD_WIRE_HEADER_SIZE + 1) {
                        n = IFD_WIRE_HEADER_SIZE + (r >> 8) % (n - IFD_WIRE_HEADER_SIZE);
                        uint32_t bl = (uint32_t)(n - IFD_WIRE_HEADER_SIZE);
                        p[8] = (uint8_t)(bl >> 24), p[9] = (uint8_t)(bl >> 16);
                        p[10] = (uint8_t)(bl >> 8), p[11] = (uint8_t)bl;
                    }
                    break;
                case 4: /* insert a byte, fixing the length */
                    if (n < cap && at >= IFD_WIRE_HEADER_SIZE) {
                        memmove(p + at + 1, p + at, n - at);
                        p[at] = (uint8_t)(r >> 48);
                        n++;
                        uint32_t bl = (uint32_t)(n - IFD_WIRE_HEADER_SIZE);
                        p[8] = (uint8_t)(bl >> 24), p[9] = (uint8_t)(bl >> 16);
                        p[10] = (uint8_t)(bl >> 8), p[11] = (uint8_t)bl;
                    }
                    break;
                default: /* the type byte: decode the body as another message */
                    p[7] = (uint8_t)k_types[(r >> 8) % N_TYPES];
                    break;
                }
            }
            /* Exact-size copy so ASan catches any read past the end. */
            uint8_t *q = malloc(n ? n : 1);
            memcpy(q, p, n);
            free(p);
            ifd_wire_msg_t d;
            char err[256];
            int rc = ifd_wire_decode(q, n, &d, NULL, err, sizeof(err));
            if (rc == 0) {
                ok++;
                ifd_buf_t re = IFD_BUF_INIT;
                ck_assert_int_eq(ifd_wire_encode(&re, &d), 0);
                ifd_wire_msg_t d2;
                ck_assert_int_eq(ifd_wire_decode(re.data, re.len, &d2, NULL, NULL, 0), 0);
                ifd_buf_t re2 = IFD_BUF_INIT;
                ck_assert_int_eq(ifd_wire_encode(&re2, &d2), 0);
                ck_assert(re.len == re2.len && memcmp(re.data, re2.data, re.len) == 0);
                ifd_buf_free(&re);
                ifd_buf_free(&re2);
                ifd_wire_msg_free(&d2);
                ifd_wire_msg_free(&d);
            } else {
                failed++;
                ck_assert_msg(rc <= -10000 && rc > -10100, "odd code %d", rc);
                ck_assert(err[0] != '\0');
            }
            free(q);
        }
        ifd_buf_free(&b);
    }
    ck_assert_uint_gt(failed, 0);
    fprintf(stderr, "fuzz: %zu decoded, %zu refused\n", ok, failed);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proto_wire");
    TCase *tc = tcase_create("wire");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_every_type_round_trips);
    tcase_add_test(tc, test_thousand_top_round_trip);
    tcase_add_test(tc, test_add_fields);
    tcase_add_test(tc, test_other_fields);
    tcase_add_test(tc, test_frame_layout);
    tcase_add_test(tc, test_encode_refuses_invalid);
    tcase_add_test(tc, test_bad_headers);
    tcase_add_test(tc, test_truncated_at_every_byte);
    tcase_add_test(tc, test_wrong_msgpack_types);
    tcase_add_test(tc, test_huge_array_counts);
    tcase_add_test(tc, test_reader_byte_by_byte);
    tcase_add_test(tc, test_reader_random_pieces_zero_copy);
    tcase_add_test(tc, test_reader_errors);
    tcase_add_test(tc, test_fuzz_mutations);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
