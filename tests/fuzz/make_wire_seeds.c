/*
 * make_wire_seeds.c — writes the seed corpus of fuzz_wire: one stream per
 * message type (a piece-size byte, then the encoded frame), and one stream
 * holding every frame in a row. Run by hand when the protocol changes:
 * `make_wire_seeds tests/fuzz/corpus/wire` (target built on request only).
 */
#include "proto/wire.h"

#include <stdio.h>
#include <string.h>

static void ifd__write(const char *dir, const char *name, unsigned piece, const ifd_buf_t *b)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fputc((int)piece, f);
    fwrite(b->data, 1, b->len, f);
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    ifd_wire_msg_t m[14];
    memset(m, 0, sizeof m);
    int32_t toks[] = {1, 2, 3, 4};
    ifd_wire_logit_bias_t lb[] = {{5, -1.5f}};
    ifd_wire_top_t top[] = {{7, -0.5f}, {8, -1.0f}};
    ifd_wire_token_t ev[] = {{42, 7, true, -0.5f, top, 2}, {43, 9, false, 0, NULL, 0}};
    m[0].type = IFD_WIRE_HELLO;
    m[0].u.hello =
        (ifd_wire_hello_t){.slot = 3,
                           .model_path = (char *)"/models/m.gguf",
                           .backend = (char *)"cpu",
                           .device = -1,
                           .kv_device = 0,
                           .n_threads = 2,
                           .max_seqs = 8,
                           .max_batched_tokens = 512,
                           .prefill_cap = 0,
                           .n_fds = 3,
                           .n_local_fds = 1,
                           .kv = {30, 3, 64, 1, 16, 364, 0x1234},
                           .size_pool = true,
                           .gpu_memory_fraction = 0.9,
                           .max_model_len = 4096,
                           .spec = {3, 4, 1, 3},
                           .draft_model_path = (char *)"/m/draft.gguf"};
    m[1].type = IFD_WIRE_ADD;
    m[1].u.add.id = 42;
    m[1].u.add.tokens = toks;
    m[1].u.add.n_tokens = 4;
    m[1].u.add.n_generated = 1;
    m[1].u.add.sampling = ifd_wire_default_sampling();
    m[1].u.add.sampling.logit_bias = lb;
    m[1].u.add.sampling.n_logit_bias = 1;
    m[1].u.add.sampling.n_logprobs = 2;
    m[1].u.add.stop_ids = toks;
    m[1].u.add.n_stop_ids = 2;
    m[1].u.add.max_tokens = 16;
    m[1].u.add.use_cache = true;
    static const int32_t gw[] = {0x31524749, 2, 1, 1, 1, 0}; /* words, as a router sends */
    m[1].u.add.grammar = gw;
    m[1].u.add.n_grammar = 6;
    m[1].u.add.min_tokens = 2;
    m[1].u.add.client = 1000;
    m[1].u.add.allowed_ids = toks;
    m[1].u.add.n_allowed_ids = 3;
    m[1].u.add.lp_ids = toks + 1;
    m[1].u.add.n_lp_ids = 2;
    m[1].u.add.spec = (ifd_wire_spec_t){2, 4, 1, 3};
    m[2].type = IFD_WIRE_CANCEL;
    m[2].u.cancel.id = 42;
    m[3].type = IFD_WIRE_STATS_REQ;
    m[3].u.stats_req.seq = 9;
    m[4].type = IFD_WIRE_DRAIN;
    m[5].type = IFD_WIRE_SHUTDOWN;
    m[6].type = IFD_WIRE_LOG_LEVEL;
    m[6].u.log_level.level = 3;
    m[7].type = IFD_WIRE_READY;
    m[7].u.ready = (ifd_wire_ready_t){3,
                                      1234,
                                      (char *)"m",
                                      (char *)"llama",
                                      49152,
                                      8192,
                                      (char *)"cpu",
                                      (char *)"cpu (2 threads)",
                                      8,
                                      512,
                                      {30, 3, 64, 1, 16, 364, 0x1234},
                                      {16, 509, 510, 511, 112, 112, 2, false, 256, 4, 1.2}};
    m[8].type = IFD_WIRE_TOKENS;
    m[8].u.tokens.step = 5;
    m[8].u.tokens.events = ev;
    m[8].u.tokens.n_events = 2;
    m[9].type = IFD_WIRE_FINISHED;
    m[9].u.finished = (ifd_wire_finished_t){42, IFD_WIRE_FINISH_LENGTH, -1, 4, 16, 2};
    m[10].type = IFD_WIRE_ERROR;
    m[10].u.error.id = 42;
    m[10].u.error.code = -12;
    m[10].u.error.message = (char *)"out of memory";
    m[11].type = IFD_WIRE_STATS;
    m[11].u.stats.seq = 9;
    m[11].u.stats.running = 2;
    m[11].u.stats.kv_blocks_total = 364;
    static ifd_wire_count_t per_pos[2] = {{7}, {3}};
    m[11].u.stats.spec_drafts = 9;
    m[11].u.stats.spec_draft_tokens = 20;
    m[11].u.stats.spec_accepted_tokens = 10;
    m[11].u.stats.spec_accepted_per_pos = per_pos;
    m[11].u.stats.n_spec_per_pos = 2;
    static ifd_wire_count_t draft_tier[4] = {{1 << 20}, {12}, {0}, {48}};
    m[11].u.stats.draft_tier = draft_tier; /* version 15 */
    m[11].u.stats.n_draft_tier = 4;
    m[12].type = IFD_WIRE_POOL;
    m[12].u.pool = (ifd_wire_pool_t){2, 1, {30, 3, 64, 1, 16, 364, 0x1234}};
    m[13].type = IFD_WIRE_POOL_SIZE;
    m[13].u.pool_size = (ifd_wire_pool_size_t){364, 364 * 92160, 92160, 1 << 30, 900 << 20,
                                               270 << 20, 40 << 20, 8 << 20, 64 << 20, 6,
                                               (char *)"emulator"};
    ifd_buf_t all = IFD_BUF_INIT;
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        ifd_buf_t b = IFD_BUF_INIT;
        int rc = ifd_wire_encode(&b, &m[i]);
        if (rc) {
            fprintf(stderr, "%s: %d\n", ifd_wire_type_name((int)m[i].type), rc);
            return 1;
        }
        char name[64];
        snprintf(name, sizeof name, "%s", ifd_wire_type_name((int)m[i].type));
        ifd__write(argv[1], name, 0, &b);
        ifd_buf_append(&all, b.data, b.len);
        ifd_buf_free(&b);
    }
    ifd__write(argv[1], "all-in-pieces-of-7", 7, &all);
    ifd__write(argv[1], "all-at-once", 0, &all);
    ifd_buf_free(&all);
    return 0;
}
