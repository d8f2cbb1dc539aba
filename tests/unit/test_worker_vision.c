/*
 * test_worker_vision.c — the worker's half of the image path (issue 28,
 * worker/serve_vision.h) through a real `inferd-worker --serve` on a
 * socketpair, as the router drives it, with the committed tiny Gemma 3
 * (tests/data/tiny-gemma3-vision: tower 112 px, 16 tokens per image, ids
 * boi 509 / eoi 510 / image 511).
 *
 * The tiny model has no tokenizer and a serving worker needs one (its EOS
 * ids; the grammar vocabulary): the test serves a copy of the directory
 * (symlinks) with a written tokenizer.json naming the 512 ids — nothing in
 * the worker is special-cased for it.
 *
 *   oracle   READY.vision from the tower and preprocessor_config.json; the
 *            committed prompt (BOS, text, boi, 16 image tokens, eoi, text)
 *            with image0.png decoded and resized here (common/image, the
 *            router's half) in ADD.images: the first generated token is
 *            transformers' argmax and its top 20 logprobs are
 *            log_softmax(prompt_logits[-1]) within 1e-4 (test_vision bounds
 *            the logits by 1e-5 of the row's largest; these are ≤ 37)
 *   cache    the same picture again (no prefix cache) hits the embedding
 *            cache (the worker's debug log) and gives the same bits; a
 *            prompt with one picture twice encodes it once
 *   steps    a text request decoding while a new picture is encoded gets a
 *            token at every step, the image request enters the engine only
 *            after its encode's phases ran between those steps
 *   errors   pictures of the wrong width or height, a wrong token count, a
 *            position whose tokens are not the image id, prompt_logprobs, a request cancelled while
 *            its picture waits → ERROR / FINISHED for that request, and the
 *            worker keeps serving; DRAIN lets a waiting request finish; a model whose tower cannot
 * load serves text only and refuses pictures; --mmproj / HELLO.mmproj_path naming a file that is no
 * mmproj fails the start mmproj   the tiny tower as an mmproj GGUF (tiny_mmproj.h) serves the same
 * bits as the directory's, the special ids from the tokenizer, the normalization from its
 * clip.vision metadata
 *
 * Usage (CTest passes it): test_worker_vision PATH-TO-inferd-worker
 */
#include "testutil.h"

#include "error.h"
#include "fdpass.h"
#include "image/image.h"
#include "image/preprocess.h"
#include "kvpool/kvparams.h"
#include "kvpool/kvpool.h"
#include "modelfile/model_source.h"
#include "modelfile/safetensors.h"
#include "proto/wire.h"
#include "tiny_mmproj.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *worker_bin;
static char tiny_dir[4096];

#define SIDE     112
#define TOKENS   16
#define IMAGE_ID 511

/* ---- the served copy of the model ---------------------------------------------- */

/* dir: symlinks to the tiny model's files and a tokenizer.json of its 512
 * ids (t<i>, the specials as added tokens); vision_act: the tower's
 * hidden_act in a written config.json (NULL: the model's own config). */
static void make_model_dir(char *dir, size_t len, const char *vision_act)
{
    snprintf(dir, len, "/tmp/ifd-img-worker-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    static const char *const files[] = {"model.safetensors", "preprocessor_config.json",
                                        "generation_config.json", "config.json"};
    char src[8300], dst[8300];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(src, sizeof src, "%s/%s", tiny_dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        if (vision_act && strcmp(files[i], "config.json") == 0) {
            size_t n;
            char *cfg = ifd_test_read_file(src, &n);
            ck_assert_ptr_nonnull(cfg);
            char *at = strstr(cfg, "\"gelu_pytorch_tanh\"");
            ck_assert_ptr_nonnull(at);
            char *vc = strstr(cfg, "\"vision_config\"");
            ck_assert_ptr_nonnull(vc);
            char *va = strstr(vc, "\"gelu_pytorch_tanh\""); /* the tower's, after vision_config */
            ck_assert_ptr_nonnull(va);
            FILE *f = fopen(dst, "w");
            fprintf(f, "%.*s\"%s\"%s", (int)(va - cfg), cfg, vision_act,
                    va + strlen("\"gelu_pytorch_tanh\""));
            fclose(f);
            free(cfg);
            continue;
        }
        ck_assert_int_eq(symlink(src, dst), 0);
    }
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    FILE *f = fopen(dst, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"version\": \"1.0\", \"added_tokens\": [");
    static const char *const special[][2] = {{"0", "<pad>"},
                                             {"1", "<eos>"},
                                             {"2", "<bos>"},
                                             {"509", "<start_of_image>"},
                                             {"510", "<end_of_image>"},
                                             {"511", "<image_soft_token>"}};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        fprintf(f, "%s{\"id\": %s, \"content\": \"%s\", \"special\": true}", i ? ", " : "",
                special[i][0], special[i][1]);
    fprintf(f, "], \"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {");
    for (int i = 0; i < 512; i++)
        fprintf(f, "%s\"t%d\": %d", i ? ", " : "", i, i);
    fprintf(f, "}}}\n");
    fclose(f);
}

static void remove_model_dir(const char *dir)
{
    static const char *const files[] = {"model.safetensors",      "preprocessor_config.json",
                                        "generation_config.json", "config.json",
                                        "tokenizer.json",         "worker.log"};
    char p[4200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* ---- a worker ------------------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int sock;
    ifd_wire_reader_t rd;
    ifd_kvpool_t *pool;
    char log[4200];
} wk_t;

/* Sends n frames in one write (they reach the worker's socket together). */
static void send_msgs(wk_t *w, const ifd_wire_msg_t *m, int n_msgs)
{
    ifd_buf_t b = IFD_BUF_INIT;
    for (int i = 0; i < n_msgs; i++)
        ck_assert_int_eq(ifd_wire_encode(&b, &m[i]), 0);
    const char *p = (const char *)b.data;
    size_t n = b.len;
    while (n) {
        ssize_t k = write(w->sock, p, n);
        ck_assert_int_gt(k, 0);
        p += k;
        n -= (size_t)k;
    }
    ifd_buf_free(&b);
}

static void send_msg(wk_t *w, const ifd_wire_msg_t *m)
{
    send_msgs(w, m, 1);
}

static int read_msg(wk_t *w, ifd_wire_msg_t *m)
{
    for (;;) {
        int rc = ifd_wire_reader_next_msg(&w->rd, m);
        if (rc != 0)
            return rc;
        char buf[65536];
        ssize_t n = read(w->sock, buf, sizeof buf);
        if (n <= 0)
            return IFD_ECLOSED;
        ck_assert_int_eq(ifd_wire_reader_feed(&w->rd, buf, (size_t)n), 0);
    }
}

/* A worker's settings beyond its model: --vision-step-flops (NULL: the
 * worker's default budget) and HELLO's max_batched_tokens and max_seqs (0:
 * the worker's defaults). */
typedef struct {
    const char *step_flops;
    uint32_t max_batched_tokens, max_seqs;
} wk_opts_t;

/* Starts a worker serving dir (HELLO's mmproj_path: mmproj) with its log in
 * dir/worker.log; the first frame it answers goes to *first (READY, or the
 * ERROR of a failed start). */
static void start_worker_with(wk_t *w, const char *dir, const char *mmproj, const wk_opts_t *o,
                              ifd_wire_msg_t *first)
{
    memset(w, 0, sizeof *w);
    char err[512];
    ifd_model_source_t *src = NULL;
    ck_assert_msg(ifd_model_source_open(&src, dir, err, sizeof err) == 0, "%s", err);
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(ifd_model_source_config(src));
    ifd_model_source_close(src);
    kp.n_blocks = 64;
    kp.n_workers = 2;
    kp.fingerprint = 0x28;
    kp.block_size = 16;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &w->pool), 0);
    snprintf(w->log, sizeof w->log, "%s/worker.log", dir);
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    w->pid = fork();
    if (w->pid == 0) {
        dup2(sv[1], 3);
        int lf = open(w->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (lf >= 0)
            dup2(lf, 2);
        if (o->step_flops)
            execl(worker_bin, worker_bin, "--serve", "--fd", "3", "--threads", "1",
                  "--vision-step-flops", o->step_flops, (char *)NULL);
        else
            execl(worker_bin, worker_bin, "--serve", "--fd", "3", "--threads", "1", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    w->sock = sv[0];
    ifd_wire_msg_t hello = {.type = IFD_WIRE_HELLO};
    ifd_wire_hello_t *h = &hello.u.hello;
    h->slot = 1;
    h->model_path = (char *)dir;
    h->mmproj_path = (char *)mmproj;
    h->backend = (char *)"cpu";
    h->device = -1;
    h->max_batched_tokens = o->max_batched_tokens;
    h->max_seqs = o->max_seqs;
    h->n_fds = 2;
    h->kv.n_layers = (uint32_t)kp.n_layers;
    h->kv.n_kv_heads = (uint32_t)kp.n_kv_heads;
    h->kv.head_dim = (uint32_t)kp.head_dim;
    h->kv.dtype = 0;
    h->kv.block_size = 16;
    h->kv.n_blocks = 64;
    h->kv.fingerprint = 0x28;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_wire_encode(&b, &hello), 0);
    int fds[2] = {ifd_kvpool_meta_fd(w->pool), ifd_kvpool_data_fd(w->pool, 0)};
    ck_assert_int_eq(ifd_fdpass_send(w->sock, b.data, b.len, fds, 2), 0);
    ifd_buf_free(&b);
    ifd_wire_reader_init(&w->rd, 0);
    ck_assert_int_eq(read_msg(w, first), 1);
}

static void start_worker(wk_t *w, const char *dir, const char *mmproj, ifd_wire_msg_t *first)
{
    const wk_opts_t o = {0};
    start_worker_with(w, dir, mmproj, &o, first);
}

/* SHUTDOWN (unless the worker ends by itself: a failed start, a DRAIN), its
 * exit status checked, and no block left held. */
static void stop_worker(wk_t *w, int want_status, bool shutdown)
{
    if (shutdown) {
        ifd_wire_msg_t sd = {.type = IFD_WIRE_SHUTDOWN};
        send_msg(w, &sd);
    }
    int status;
    ck_assert_int_eq(waitpid(w->pid, &status, 0), w->pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == want_status, "worker status %d",
                  status);
    ifd_kvpool_stats_t st;
    ck_assert_int_eq(ifd_kvpool_stats(w->pool, &st), 0);
    ck_assert_int_eq(st.in_use, 0);
    ifd_wire_reader_close(&w->rd);
    close(w->sock);
    ifd_kvpool_destroy(w->pool);
}

/* ---- requests ---------------------------------------------------------------------- */

/* What came back for one request. */
typedef struct {
    int n_tok;
    int32_t tok[64];
    uint64_t step[64];
    ifd_wire_top_t top[20]; /* the first token's (the requests ask for 20) */
    uint32_t n_top;
    bool finished, error;
    uint32_t reason;
    char message[256];
} res_t;

#define MAX_ID 16

/* Reads frames until every request of ids [1, n_ids] with want[id] set has
 * finished. */
static void collect(wk_t *w, res_t *res, const bool *want, int n_ids)
{
    for (;;) {
        bool all = true;
        for (int i = 1; i <= n_ids; i++)
            all = all && (!want[i] || res[i].finished);
        if (all)
            return;
        ifd_wire_msg_t m;
        ck_assert_int_eq(read_msg(w, &m), 1);
        if (m.type == IFD_WIRE_TOKENS) {
            for (uint32_t e = 0; e < m.u.tokens.n_events; e++) {
                const ifd_wire_token_t *ev = &m.u.tokens.events[e];
                ck_assert(ev->id >= 1 && ev->id <= MAX_ID);
                res_t *r = &res[ev->id];
                if (r->n_tok == 0) {
                    ck_assert_uint_le(ev->n_top, 20);
                    r->n_top = ev->n_top;
                    memcpy(r->top, ev->top, ev->n_top * sizeof *ev->top);
                }
                if (r->n_tok < 64) {
                    r->tok[r->n_tok] = ev->token;
                    r->step[r->n_tok] = m.u.tokens.step;
                }
                r->n_tok++;
            }
        } else if (m.type == IFD_WIRE_FINISHED) {
            ck_assert(m.u.finished.id >= 1 && m.u.finished.id <= MAX_ID);
            res[m.u.finished.id].finished = true;
            res[m.u.finished.id].reason = m.u.finished.reason;
        } else if (m.type == IFD_WIRE_ERROR) {
            ck_assert(m.u.error.id >= 1 && m.u.error.id <= MAX_ID);
            res[m.u.error.id].error = true;
            snprintf(res[m.u.error.id].message, sizeof res[0].message, "%s",
                     m.u.error.message ? m.u.error.message : "");
        } else {
            ck_abort_msg("unexpected %s frame", ifd_wire_type_name(m.type));
        }
        ifd_wire_msg_free(&m);
    }
}

static ifd_wire_msg_t add_msg(uint64_t id, const int32_t *ids, int n, const ifd_wire_image_t *img,
                              int n_img, uint32_t max_tokens, bool use_cache)
{
    ifd_wire_msg_t a = {.type = IFD_WIRE_ADD};
    a.u.add.id = id;
    a.u.add.tokens = ids;
    a.u.add.n_tokens = (uint32_t)n;
    a.u.add.sampling = ifd_wire_default_sampling();
    a.u.add.sampling.temperature = 0;
    a.u.add.sampling.n_logprobs = 20;
    a.u.add.max_tokens = max_tokens;
    a.u.add.ignore_eos = true;
    a.u.add.use_cache = use_cache;
    a.u.add.images = img;
    a.u.add.n_images = (uint32_t)n_img;
    return a;
}

static void send_add(wk_t *w, uint64_t id, const int32_t *ids, int n, const ifd_wire_image_t *img,
                     int n_img, uint32_t max_tokens, bool use_cache)
{
    const ifd_wire_msg_t a = add_msg(id, ids, n, img, n_img, max_tokens, use_cache);
    send_msg(w, &a);
}

/* The wire image of a SIDE² picture px whose TOKENS soft tokens start at pos. */
static ifd_wire_image_t wire_image(uint32_t pos, const uint8_t *px, uint64_t lo, uint64_t hi)
{
    return (ifd_wire_image_t){.pos = pos,
                              .n_tokens = TOKENS,
                              .hash_lo = lo,
                              .hash_hi = hi,
                              .width = SIDE,
                              .height = SIDE,
                              .pixels = px,
                              .n_pixels = 3 * SIDE * SIDE};
}

/* A 25-token prompt with one image's soft tokens at 5 .. 5 + TOKENS - 1. */
static void image_prompt(int32_t ids[25])
{
    for (int i = 0; i < 25; i++)
        ids[i] = i >= 5 && i < 5 + TOKENS ? IMAGE_ID : 40 + i;
}

/* image<i>.png as the router sends it: decoded, resized to 112². */
static uint8_t *picture(int i, const ifd_image_prep_t *prep)
{
    char p[4200], err[256];
    size_t len;
    snprintf(p, sizeof p, "%s/image%d.png", tiny_dir, i);
    void *bytes = ifd_test_read_file(p, &len);
    ck_assert_ptr_nonnull(bytes);
    ifd_image_t img;
    ifd_image_limits_t lim = ifd_image_default_limits();
    ck_assert_msg(ifd_image_decode(&img, bytes, len, &lim, err, sizeof err) == 0, "%s", err);
    free(bytes);
    const size_t n = ifd_image_prep_floats(prep, &img);
    ck_assert_uint_eq(n, 3 * SIDE * SIDE);
    uint8_t *px = malloc(n);
    ck_assert_int_eq(ifd_image_prep_resize(px, n, &img, prep), 0);
    ifd_image_free(&img);
    return px;
}

static ifd_image_prep_t read_prep(void)
{
    char p[4200], err[256];
    size_t len;
    snprintf(p, sizeof p, "%s/preprocessor_config.json", tiny_dir);
    char *json = ifd_test_read_file(p, &len);
    ck_assert_ptr_nonnull(json);
    ifd_image_prep_t prep;
    ck_assert_msg(ifd_image_prep_from_json(&prep, json, len, err, sizeof err) == 0, "%s", err);
    free(json);
    return prep;
}

static int count_in_file(const char *path, const char *needle)
{
    size_t len;
    char *s = ifd_test_read_file(path, &len);
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p++)
        n++;
    free(s);
    return n;
}

/* ---- the tests ---------------------------------------------------------------------- */

START_TEST(test_oracle_cache_steps_errors)
{
    char dir[64];
    make_model_dir(dir, sizeof dir, NULL);
    wk_t w;
    ifd_wire_msg_t ready;
    /* 400 kFLOP a step: the tiny tower's phases in 16- and 32-row pieces */
    const wk_opts_t o = {.step_flops = "400000"};
    start_worker_with(&w, dir, NULL, &o, &ready);
    ck_assert_int_eq(ready.type, IFD_WIRE_READY);
    const ifd_wire_vision_t *v = &ready.u.ready.vision;
    ck_assert_uint_eq(v->tokens_per_image, TOKENS);
    ck_assert_int_eq(v->boi_id, 509);
    ck_assert_int_eq(v->eoi_id, 510);
    ck_assert_int_eq(v->image_id, IMAGE_ID);
    ck_assert_uint_eq(v->width, SIDE);
    ck_assert_uint_eq(v->height, SIDE);
    ck_assert_uint_eq(v->resample, 2);
    ck_assert(!v->do_pan_and_scan);
    ifd_wire_msg_free(&ready);
    ifd_wire_msg_t ll = {.type = IFD_WIRE_LOG_LEVEL};
    ll.u.log_level.level = 3; /* debug: the cache's hits are logged */
    send_msg(&w, &ll);

    char p[4200], err[256];
    snprintf(p, sizeof p, "%s/refs.safetensors", tiny_dir);
    ifd_safetensors_t *st = NULL;
    ck_assert_msg(ifd_safetensors_open(&st, p, err, sizeof err) == 0, "%s", err);
    const ifd_st_tensor_t *ids_t = ifd_safetensors_find(st, "prompt_ids");
    const ifd_st_tensor_t *lg_t = ifd_safetensors_find(st, "prompt_logits");
    ck_assert(ids_t && lg_t && strcmp(lg_t->dtype, "F32") == 0);
    const int n = (int)ids_t->n_elems;
    int32_t ids[64];
    memcpy(ids, ids_t->data, (size_t)n * sizeof *ids);
    int pos = 0;
    while (pos < n && ids[pos] != IMAGE_ID)
        pos++;
    ck_assert_int_eq(pos, 5);
    /* log_softmax of the last row, in double */
    const float *last = (const float *)lg_t->data + (size_t)(n - 1) * 512;
    double mx = -INFINITY, sum = 0, ref_lp[512];
    int argmax = 0;
    for (int k = 0; k < 512; k++)
        if (last[k] > mx)
            mx = last[k], argmax = k;
    for (int k = 0; k < 512; k++)
        sum += exp(last[k] - mx);
    for (int k = 0; k < 512; k++)
        ref_lp[k] = last[k] - mx - log(sum);

    const ifd_image_prep_t prep = read_prep();
    uint8_t *px0 = picture(0, &prep), *px1 = picture(1, &prep);
    const ifd_wire_image_t img0 = wire_image((uint32_t)pos, px0, 0xa0, 0x28);
    res_t res[MAX_ID + 1];
    memset(res, 0, sizeof res);
    bool want[MAX_ID + 1] = {0};

    /* 1: the oracle */
    send_add(&w, 1, ids, n, &img0, 1, 1, true);
    want[1] = true;
    collect(&w, res, want, MAX_ID);
    ck_assert_msg(!res[1].error, "%s", res[1].message);
    ck_assert_uint_eq(res[1].reason, IFD_WIRE_FINISH_LENGTH);
    ck_assert_int_eq(res[1].n_tok, 1);
    ck_assert_int_eq(res[1].tok[0], argmax);
    ck_assert_uint_eq(res[1].n_top, 20);
    double worst = 0;
    for (uint32_t k = 0; k < 20; k++) {
        const ifd_wire_top_t *t = &res[1].top[k];
        ck_assert(t->token >= 0 && t->token < 512);
        worst = fmax(worst, fabs(t->logprob - ref_lp[t->token]));
    }
    for (int q = 0; q < 512; q++) { /* no id left out that transformers ranks above the 20th */
        bool in = false;
        for (uint32_t j = 0; j < 20; j++)
            in = in || res[1].top[j].token == q;
        ck_assert_msg(in || ref_lp[q] <= res[1].top[19].logprob + 1e-4,
                      "token %d (logprob %.6f) missing from the top 20", q, ref_lp[q]);
    }
    fprintf(stderr, "first token %d, top-20 logprobs max abs err %.3g\n", res[1].tok[0], worst);
    ck_assert_msg(worst <= 1e-4, "top-20 logprobs off by %.3g", worst);

    /* 2: the same picture, no prefix cache: the embedding cache, the same bits */
    send_add(&w, 2, ids, n, &img0, 1, 1, false);
    want[2] = true;
    collect(&w, res, want, MAX_ID);
    ck_assert_msg(!res[2].error, "%s", res[2].message);
    ck_assert_int_eq(res[2].tok[0], res[1].tok[0]);
    ck_assert(memcmp(res[2].top, res[1].top, sizeof res[1].top) == 0);
    ck_assert_int_eq(count_in_file(w.log, "cache hit"), 1);
    ck_assert_int_eq(count_in_file(w.log, "encoded in"), 1);

    /* 3 and 4: a text request decoding while a new picture is encoded */
    int32_t text[8] = {2, 17, 33, 108, 44, 250, 7, 9};
    ifd_wire_image_t img1 = img0;
    img1.pixels = px1;
    img1.hash_lo = 0xa1;
    const ifd_wire_msg_t both[2] = {add_msg(3, text, 8, NULL, 0, 60, true),
                                    add_msg(4, ids, n, &img1, 1, 2, true)};
    send_msgs(&w, both, 2); /* one write: the worker reads both before its next step */
    want[3] = want[4] = true;
    collect(&w, res, want, MAX_ID);
    ck_assert_msg(!res[4].error, "%s", res[4].message);
    ck_assert_int_eq(res[3].n_tok, 60);
    ck_assert_int_eq(res[4].n_tok, 2);
    for (int t = 1; t < 60; t++) /* one token per step: never stalled */
        ck_assert_uint_eq(res[3].step[t], res[3].step[t - 1] + 1);
    /* the patches uploaded with the ADD, then per step at most 400 kFLOP or
     * one 16-row piece: the patch embedding (1.2 MFLOP per 16 rows) and each
     * layer's q|k|v, attention and out + fc1 in 4 steps, fc2 in 2, the tail
     * (131 kFLOP) in 1: 33 steps */
    fprintf(stderr, "text request from step %llu, image request's first token at step %llu\n",
            (unsigned long long)res[3].step[0], (unsigned long long)res[4].step[0]);
    ck_assert_uint_ge(res[4].step[0], res[3].step[0] + 33);
    ck_assert_uint_le(res[4].step[0], res[3].step[59]); /* and it ran beside it */
    ck_assert_int_eq(count_in_file(w.log, "encoded in"), 2);

    /* 5-8: bad pictures, then 9: cancelled while its picture waits */
    ifd_wire_image_t bad = img0;
    bad.width = SIDE - 1;
    bad.n_pixels = 3 * (SIDE - 1) * SIDE;
    send_add(&w, 5, ids, n, &bad, 1, 1, true);
    bad = img0;
    bad.n_tokens = TOKENS - 1;
    send_add(&w, 6, ids, n, &bad, 1, 1, true);
    bad = img0;
    bad.pos = (uint32_t)pos - 1; /* starts at <start_of_image> */
    send_add(&w, 7, ids, n, &bad, 1, 1, true);
    bad = img0;
    bad.height = SIDE / 2;
    bad.n_pixels = 3 * SIDE * SIDE / 2;
    send_add(&w, 8, ids, n, &bad, 1, 1, true);
    img1.hash_lo = 0xa2; /* not cached: it waits for its encode */
    ifd_wire_msg_t plp = add_msg(11, ids, n, &img0, 1, 1, true);
    plp.u.add.prompt_logprobs = 1;
    send_msg(&w, &plp);
    want[11] = true;
    ifd_wire_msg_t add_cancel[2] = {add_msg(9, ids, n, &img1, 1, 30, true),
                                    {.type = IFD_WIRE_CANCEL}};
    add_cancel[1].u.cancel.id = 9;
    send_msgs(&w, add_cancel, 2); /* read together: the cancel finds it in the queue */
    for (int i = 5; i <= 9; i++)
        want[i] = true;
    collect(&w, res, want, MAX_ID);
    static const char *const why[] = {"is 111x112: the vision tower takes 112x112", "makes 16",
                                      "not the image token 511", "is 112x56"};
    for (int i = 5; i <= 8; i++) {
        ck_assert_msg(res[i].error && strstr(res[i].message, why[i - 5]), "request %d: '%s'", i,
                      res[i].message);
        ck_assert_uint_eq(res[i].reason, IFD_WIRE_FINISH_ERROR);
        ck_assert_int_eq(res[i].n_tok, 0);
    }
    ck_assert_msg(res[11].error && strstr(res[11].message, "prompt_logprobs with images"), "'%s'",
                  res[11].message);
    ck_assert_uint_eq(res[11].reason, IFD_WIRE_FINISH_ERROR);
    ck_assert_uint_eq(res[9].reason, IFD_WIRE_FINISH_CANCELLED);
    ck_assert(!res[9].error);
    ck_assert_int_eq(res[9].n_tok, 0);
    ck_assert_int_eq(count_in_file(w.log, "encoded in"), 2); /* its encode abandoned */
    /* still serving: 10, the oracle request again, the prefix cache's this time */
    send_add(&w, 10, ids, n, &img0, 1, 1, true);
    want[10] = true;
    collect(&w, res, want, MAX_ID);
    ck_assert_msg(!res[10].error, "%s", res[10].message);
    ck_assert_int_eq(res[10].tok[0], argmax);

    /* 13: one prompt with the same new picture twice: encoded once, the repeat from the
     * embedding cache (once per distinct image per request) */
    {
        enum { N2 = 5 + TOKENS + 2 + TOKENS + 1 };
        int32_t ids2[N2];
        for (int i = 0; i < N2; i++)
            ids2[i] = (i >= 5 && i < 5 + TOKENS) || (i >= 7 + TOKENS && i < 7 + 2 * TOKENS)
                          ? IMAGE_ID
                          : 40 + i;
        ifd_wire_image_t two[2] = {img1, img1};
        two[0].pos = 5;
        two[1].pos = 7 + TOKENS;
        two[0].hash_lo = two[1].hash_lo = 0xa4;
        const int enc0 = count_in_file(w.log, "encoded in"),
                  hit0 = count_in_file(w.log, "cache hit");
        send_add(&w, 13, ids2, N2, two, 2, 2, false);
        want[13] = true;
        collect(&w, res, want, MAX_ID);
        ck_assert_msg(!res[13].error, "%s", res[13].message);
        ck_assert_int_eq(res[13].n_tok, 2);
        ck_assert_int_eq(count_in_file(w.log, "encoded in"), enc0 + 1);
        ck_assert_int_eq(count_in_file(w.log, "cache hit"), hit0 + 1);
    }

    /* 12: DRAIN arriving with a request whose picture is still to encode: it
     * is served to the end, then the worker exits */
    img1.hash_lo = 0xa3;
    ifd_wire_msg_t add_drain[2] = {add_msg(12, ids, n, &img1, 1, 3, true),
                                   {.type = IFD_WIRE_DRAIN}};
    send_msgs(&w, add_drain, 2);
    want[12] = true;
    collect(&w, res, want, MAX_ID);
    ck_assert_msg(!res[12].error, "%s", res[12].message);
    ck_assert_uint_eq(res[12].reason, IFD_WIRE_FINISH_LENGTH);
    ck_assert_int_eq(res[12].n_tok, 3);
    stop_worker(&w, 0, false);
    ifd_safetensors_close(st);
    free(px0);
    free(px1);
    remove_model_dir(dir);
}
END_TEST

/* The engine refusing a request after its picture was encoded: a
 * max_batched_tokens (8) below the picture's 16 tokens (one picture is
 * prefilled in one step). The refusal names the cause, not "invalid
 * request"; the worker goes on serving. */
START_TEST(test_refusal_names_cause)
{
    char dir[64];
    make_model_dir(dir, sizeof dir, NULL);
    wk_t w;
    ifd_wire_msg_t ready;
    const wk_opts_t o = {.max_batched_tokens = 8, .max_seqs = 4};
    start_worker_with(&w, dir, NULL, &o, &ready);
    ck_assert_int_eq(ready.type, IFD_WIRE_READY);
    ifd_wire_msg_free(&ready);
    ifd_wire_msg_t ll = {.type = IFD_WIRE_LOG_LEVEL};
    ll.u.log_level.level = 3; /* debug: the encode is logged */
    send_msg(&w, &ll);
    const ifd_image_prep_t prep = read_prep();
    uint8_t *px = picture(0, &prep);
    int32_t ids[25];
    image_prompt(ids);
    const ifd_wire_image_t img = wire_image(5, px, 1, 0);
    res_t res[MAX_ID + 1];
    memset(res, 0, sizeof res);
    bool want[MAX_ID + 1] = {0};
    send_add(&w, 1, ids, 25, &img, 1, 1, true);
    send_add(&w, 2, ids, 5, NULL, 0, 3, true);
    want[1] = want[2] = true;
    collect(&w, res, want, MAX_ID);
    ck_assert_msg(res[1].error && strstr(res[1].message, "image 0 has 16 tokens, more than "
                                                         "max_batched_tokens (8)"),
                  "'%s'", res[1].message);
    ck_assert_uint_eq(res[1].reason, IFD_WIRE_FINISH_ERROR);
    ck_assert_int_eq(count_in_file(w.log, "encoded in"), 1); /* refused after its encode */
    ck_assert(!res[2].error);
    ck_assert_int_eq(res[2].n_tok, 3);
    stop_worker(&w, 0, true);
    free(px);
    remove_model_dir(dir);
}
END_TEST

/* A tower that cannot load (hidden_act relu): the worker warns, serves text
 * and refuses pictures; an explicit mmproj that is none fails the start. */
START_TEST(test_no_tower)
{
    char dir[64];
    make_model_dir(dir, sizeof dir, "relu");
    wk_t w;
    ifd_wire_msg_t ready;
    start_worker(&w, dir, NULL, &ready);
    ck_assert_int_eq(ready.type, IFD_WIRE_READY);
    ck_assert_uint_eq(ready.u.ready.vision.tokens_per_image, 0);
    ifd_wire_msg_free(&ready);
    ck_assert_int_eq(count_in_file(w.log, "vision tower is not served (text only)"), 1);
    const ifd_image_prep_t prep = read_prep();
    uint8_t *px = picture(0, &prep);
    int32_t ids[25];
    image_prompt(ids);
    const ifd_wire_image_t img = wire_image(5, px, 1, 0);
    res_t res[MAX_ID + 1];
    memset(res, 0, sizeof res);
    bool want[MAX_ID + 1] = {0};
    send_add(&w, 1, ids, 25, &img, 1, 1, true);
    send_add(&w, 2, ids, 5, NULL, 0, 3, true);
    want[1] = want[2] = true;
    collect(&w, res, want, MAX_ID);
    ck_assert_msg(res[1].error && strstr(res[1].message, "takes no images"), "'%s'",
                  res[1].message);
    ck_assert_uint_eq(res[1].reason, IFD_WIRE_FINISH_ERROR);
    ck_assert(!res[2].error);
    ck_assert_int_eq(res[2].n_tok, 3);
    stop_worker(&w, 0, true);

    /* HELLO.mmproj_path naming a file that is not an mmproj */
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    ifd_wire_msg_t first;
    start_worker(&w, dir, cfg, &first);
    ck_assert_int_eq(first.type, IFD_WIRE_ERROR);
    ck_assert_uint_eq(first.u.error.id, 0);
    ck_assert_msg(strstr(first.u.error.message, "--mmproj") &&
                      strstr(first.u.error.message, "config.json"),
                  "'%s'", first.u.error.message);
    ifd_wire_msg_free(&first);
    stop_worker(&w, 1, false);
    free(px);
    remove_model_dir(dir);
}
END_TEST

/* The first token's top 20 of the committed prompt with image0.png through
 * worker w (request id), its logprobs by token in lp[512] (NAN elsewhere). */
static int oracle_request(wk_t *w, uint64_t id, double *lp)
{
    char p[4200], err[256];
    snprintf(p, sizeof p, "%s/refs.safetensors", tiny_dir);
    ifd_safetensors_t *st = NULL;
    ck_assert_msg(ifd_safetensors_open(&st, p, err, sizeof err) == 0, "%s", err);
    const ifd_st_tensor_t *ids_t = ifd_safetensors_find(st, "prompt_ids");
    ck_assert_ptr_nonnull(ids_t);
    const ifd_image_prep_t prep = read_prep();
    uint8_t *px = picture(0, &prep);
    const ifd_wire_image_t img = wire_image(5, px, 0xa0, 0);
    res_t res[MAX_ID + 1];
    memset(res, 0, sizeof res);
    bool want[MAX_ID + 1] = {0};
    send_add(w, id, ids_t->data, (int)ids_t->n_elems, &img, 1, 1, false);
    want[id] = true;
    collect(w, res, want, MAX_ID);
    ck_assert_msg(!res[id].error, "%s", res[id].message);
    ck_assert_uint_eq(res[id].n_top, 20);
    for (int k = 0; k < 512; k++)
        lp[k] = NAN;
    for (uint32_t k = 0; k < 20; k++)
        lp[res[id].top[k].token] = res[id].top[k].logprob;
    free(px);
    ifd_safetensors_close(st);
    return res[id].tok[0];
}

/* --mmproj (HELLO.mmproj_path): the tiny tower written as llama.cpp's
 * mmproj serves the oracle prompt with the directory's tower's bits, its
 * special ids from the tokenizer (an mmproj has none); its
 * clip.vision.image_mean / image_std are the worker's normalization (a
 * mean of 0.25 changes the result). */
START_TEST(test_mmproj)
{
    char dir[64];
    make_model_dir(dir, sizeof dir, NULL);
    char mm[4200], mm2[4200];
    snprintf(mm, sizeof mm, "%s/mmproj.gguf", dir);
    snprintf(mm2, sizeof mm2, "%s/mmproj-mean.gguf", dir);
    const float gemma[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    const float shifted[6] = {0.25f, 0.25f, 0.25f, 0.5f, 0.5f, 0.5f};
    ifd_test_write_tiny_mmproj(tiny_dir, mm, 2, "gemma3", false, gemma);
    ifd_test_write_tiny_mmproj(tiny_dir, mm2, 2, "gemma3", false, shifted);
    double lp_dir[512], lp_mm[512], lp_mean[512];
    wk_t w;
    ifd_wire_msg_t ready;
    start_worker(&w, dir, NULL, &ready);
    ifd_wire_msg_free(&ready);
    const int t_dir = oracle_request(&w, 1, lp_dir);
    stop_worker(&w, 0, true);

    start_worker(&w, dir, mm, &ready);
    ck_assert_int_eq(ready.type, IFD_WIRE_READY);
    const ifd_wire_vision_t *v = &ready.u.ready.vision;
    ck_assert_uint_eq(v->tokens_per_image, TOKENS);
    ck_assert_int_eq(v->boi_id, 509); /* the tokenizer's, not Gemma3Config's 255999 */
    ck_assert_int_eq(v->eoi_id, 510);
    ck_assert_int_eq(v->image_id, IMAGE_ID);
    ck_assert_uint_eq(v->width, SIDE);
    ifd_wire_msg_free(&ready);
    ck_assert_int_eq(oracle_request(&w, 1, lp_mm), t_dir);
    for (int k = 0; k < 512; k++)
        ck_assert_msg(isnan(lp_dir[k]) ? isnan(lp_mm[k]) : lp_mm[k] == lp_dir[k], "token %d", k);
    ck_assert_int_eq(count_in_file(w.log, "mmproj.gguf: 16 tokens per 112x112 picture"), 1);
    stop_worker(&w, 0, true);

    start_worker(&w, dir, mm2, &ready);
    ifd_wire_msg_free(&ready);
    oracle_request(&w, 1, lp_mean);
    double d = 0;
    for (int k = 0; k < 512; k++)
        if (!isnan(lp_dir[k]) && !isnan(lp_mean[k]))
            d = fmax(d, fabs(lp_dir[k] - lp_mean[k]));
    ck_assert_msg(d > 1e-3, "a mean of 0.25 changed the logprobs by %.3g only", d);
    stop_worker(&w, 0, true);
    unlink(mm);
    unlink(mm2);
    remove_model_dir(dir);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_worker_vision INFERD-WORKER\n");
        return 2;
    }
    worker_bin = argv[1];
    const char *root = getenv("INFERD_SOURCE_DIR");
    snprintf(tiny_dir, sizeof tiny_dir, "%s/tests/data/tiny-gemma3-vision", root ? root : ".");
    struct stat sb;
    if (stat(tiny_dir, &sb) != 0)
        ifd_test_skip("%s is missing", tiny_dir);
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("worker_vision");
    ifd_test_case(s, "serve", 120,
                  IFD_TESTS(test_oracle_cache_steps_errors, test_refusal_names_cause, test_no_tower,
                            test_mmproj));
    return ifd_test_run(s);
}
