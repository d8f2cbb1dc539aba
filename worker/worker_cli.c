/*
 * worker_cli.c — inferd-worker's command line.
 *
 * Modes: --inspect FILE.gguf|DIR [--json]; offline generation
 * (--model PATH --prompt TEXT | --prompt-ids "ID ..."); --devices.
 * --serve --fd N: the engine loop for the router (serve.c).
 */
#include "worker_cli.h"

#include "backend.h"
#include "backend_factory.h"
#include "chat/chat_template.h"
#include "engine.h"
#include "error.h"
#include "generate.h"
#include "generate_spec.h"
#include "image_embd.h"
#include "inspect/inspect.h"
#include "kernels.h"
#include "kvpool/kvpool.h"
#include "kvprobe.h"
#include "log.h"
#include "model.h"
#include "modelfile/shape.h"
#include "serve.h"
#include "spec_draft.h"
#include "tokenizer/tokenizer.h"
#include "utf8.h"
#include "worker_model.h"
#ifdef IFD_HAVE_CUDA
#include "cuda_module.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ifd__usage(FILE *f)
{
    fprintf(f,
            "Usage: inferd-worker --inspect FILE.gguf|DIR [--json]\n"
            "       inferd-worker --model PATH --prompt TEXT [options]\n"
            "       inferd-worker --random-weights SHAPE.json --prompt-ids \"ID ...\" [options]\n"
            "       inferd-worker --serve --fd N [--model PATH] [--threads N]\n"
            "                     [--weights-dtype auto|f32] [--random-weights F]\n"
            "                     [--kv-cache-dir DIR --kv-cache-disk-bytes N]\n"
            "                     [--kv-cache-host-bytes N] [--kv-cache-pin-slots N]\n"
            "                     [--mmproj FILE] [--image-cache-mb N]\n"
            "                     [--vision-step-ms N] [--vision-step-flops F]\n"
            "                     [--max-logprobs N]\n"
            "                     [--draft-step-tokens N]\n"
            "       inferd-worker --kv-probe --backend cuda|cuda-f32 (--model PATH |\n"
            "                     --random-weights F --model TOKENIZER) [probe options]\n"
            "       inferd-worker --devices\n"
            "\n"
            "The inferd worker: runs a model for the inferd router (one process per GPU).\n"
            "\n"
            "  --inspect PATH        print a GGUF file's or Hugging Face directory's format,\n"
            "                        architecture, hyper-parameters, tokenizer summary and tensors\n"
            "  --json                machine-readable output (--inspect, generation)\n"
            "  --devices             list the compute devices this worker can use\n"
            "  --serve --fd N        serve the router on socket N (spawned by inferd); with\n"
            "                        --random-weights F the model is random weights in shape F\n"
            "                        and HELLO's model gives only the tokenizer\n"
            "    --mmproj FILE       the vision tower: llama.cpp's mmproj GGUF beside a GGUF\n"
            "                        model (overrides HELLO's; one that cannot load fails the\n"
            "                        start); without it a Gemma 3 directory's own tower, if any\n"
            "    --image-cache-mb N  the image embedding cache's bound (default 256)\n"
            "    --vision-step-ms N  an image encode's share of a serve-loop iteration, the\n"
            "                        pause a decode step sees (default 50; docs/vision.md)\n"
            "    --vision-step-flops F  a fixed FLOP budget per iteration instead (F >= 1)\n"
            "    --max-logprobs N    the router's max_logprobs (-1: the vocabulary): the pool\n"
            "                        sizing's warm-up grows the device sampler for N a row\n"
            "    --draft-step-tokens N  the draft model's tokens per engine step at most (its\n"
            "                        prompt catch-up; default: the step budget, HELLO's\n"
            "                        max_batched_tokens; docs/speculative.md)\n"
            "  --kv-probe            load the model onto the GPU, then print as JSON how many KV\n"
            "                        blocks fit (what inferd --gpus runs per GPU at start-up):\n"
            "    --gpu-memory-fraction F  of the device's total memory (default 0.90)\n"
            "    --kv-dtype f32|f16|bf16, --block-size N, --max-seqs N,\n"
            "    --max-batched-tokens N, --max-model-len N (default: the model's)\n"
            "                             the pool and engine settings it is sized for: it\n"
            "                             runs their largest steps and decode graphs first\n"
            "\n"
            "Offline generation:\n"
            "  --model PATH          GGUF model file\n"
            "  --random-weights F    instead of --model: random weights in the shape of the\n"
            "                        JSON file F (deploy/shapes/); needs --prompt-ids\n"
            "  --weights-seed S      seed of the random weights (default 0): the same seed\n"
            "                        gives the same weights on every backend\n"
            "  --backend B           cpu (default), cuda (device 0 of CUDA_VISIBLE_DEVICES)\n"
            "                        or cuda-f32 (exact mode: f32 weights and activations)\n"
            "  --prompt TEXT         prompt; wrapped in the model's chat template as a user\n"
            "                        message unless --raw\n"
            "  --prompt-ids \"ID ...\" token ids used exactly as given (no template, no BOS)\n"
            "  --system TEXT         system message (chat mode)\n"
            "  --chat-template NAME|FILE  a built-in template (%s) or a Jinja file\n"
            "                        instead of the model's own template\n"
            "  --raw                 tokenize the prompt as-is (plus BOS if the vocabulary asks)\n"
            "  -n, --n-predict N     tokens to generate (default 128)\n"
            "  --no-kv-cache         recompute the whole context at every token\n"
            "  --temperature T       0 = greedy (the default when not given)\n"
            "  --top-k K, --top-p P, --min-p P, --repeat-penalty R\n"
            "  --seed S              sampling seed (default 0)\n"
            "  --ignore-eos          do not stop at end-of-turn tokens\n"
            "  --threads N           CPU threads (default: all)\n"
            "  --weights-dtype D     auto: quantized weights stay quantized (8-bit\n"
            "                        activations); f32: dequantize everything to f32, the\n"
            "                        exact path (default auto)\n"
            "  --image-embd POS:F.npy  an image as its float32 input-embedding rows [len,\n"
            "                        n_embd] at prompt positions POS.. (Gemma 3's image mask;\n"
            "                        repeatable)\n"
            "  --dump-logits F.npy   float32 logits of every prompt position and generated\n"
            "                        step, shape [rows, vocab]\n"
            "  --block-size N        KV tokens per block (default 16)\n"
            "  --kv-dtype T          KV element type: f32 (the CPU's default), f16, bf16,\n"
            "                        q8_0, fp8 or the CPU-only q4_0 (docs/kvpool.md)\n"
            "  --prefill-chunk N     prompt tokens per forward (default 512)\n"
            "  --kv-local-pool       a model with sliding-window and global layers: the local\n"
            "                        layers' K/V in a pool that holds only their window\n"
            "  --spec ngram|draft    speculative decoding (docs/speculative.md): the prompt\n"
            "                        served by the engine, which verifies proposals (the same\n"
            "                        tokens, fewer forwards; not with --dump-logits,\n"
            "                        --no-kv-cache, --image-embd or --kv-local-pool)\n"
            "    --spec-tokens K     proposed tokens a step at most (1-16, default 4)\n"
            "    --spec-ngram-min N, --spec-ngram-max N  the n-gram proposer's n (1-16,\n"
            "                        defaults 1 and 4)\n"
            "    --draft-model PATH  --spec draft's model (GGUF; the model's tokenizer)\n"
            "\n"
            "  --log-level L         error | warn | info | debug (default: $INFERD_LOG or info)\n"
            "  -h, --help            this help\n"
            "  -V, --version         print the version\n",
            ifd_chat_family_names());
}

static int ifd__devices(void)
{
    printf("cpu: %s\n", ifd_cpu_isa_name());
#ifdef IFD_HAVE_CUDA
    int n;
    char err[1024];
    const ifd_cuda_module_t *cm = ifd_cuda_module_load(err, sizeof err);
    if (!cm || cm->device_count(&n, err, sizeof err) != 0) {
        printf("cuda: none (%s)\n", err);
    } else {
        for (int i = 0; i < n; i++) {
            char desc[256];
            cm->device_describe(i, desc, sizeof desc);
            printf("cuda:%d: %s\n", i, desc);
        }
    }
#else
    printf("cuda: not built (configure with -DINFERD_CUDA=ON)\n");
#endif
    return 0;
}

enum { IFD__MAX_IMAGE_EMBD = 16 };

typedef struct {
    const char *model;
    const char *shape; /* --random-weights */
    uint64_t weights_seed;
    const char *backend;
    const char *prompt;
    const char *prompt_ids;
    const char *system;
    const char *chat_template;
    const char *dump_logits;
    const char *image_embd[IFD__MAX_IMAGE_EMBD]; /* --image-embd POS:FILE.npy */
    int n_image_embd;
    bool raw, json, no_cache, ignore_eos;
    int threads;
    ifd_weights_dtype_t weights;
    ifd_generate_params_t gp;
    const char *kv_cache_dir;     /* --serve: the disk tier (kvpool/kvdisk.h), or NULL */
    uint64_t kv_cache_disk_bytes; /* its size bound */
    const char *mmproj;           /* --serve: the vision tower's mmproj GGUF, or NULL */
    uint64_t image_cache_mb;      /* --serve: the image embedding cache's bound; 0 default */
    uint64_t kv_cache_host_bytes; /* --serve: a GPU worker's host-RAM tier (kvhost.h); 0 off */
    int kv_copy_slots; /* --serve: the engine's copy_slots (0 default, < 0 none; engine.h) */
    uint32_t vision_step_ms;      /* --serve: an encode's time per iteration; 0 default */
    double vision_step_flops;     /* --serve: a fixed budget instead; 0 none */
    int64_t max_logprobs;         /* --serve: the router's max_logprobs; 0: 20 */
    int draft_step_tokens;        /* --serve: the draft's catch-up tokens a step; 0 default */
    ifd_generate_spec_params_t spec; /* generation's --spec (method 0: none, ifd_generate) */
    const char *draft_model;         /* --spec draft's --draft-model */
} ifd__gen_opts_t;

typedef struct {
    ifd_detok_t *detok;
} ifd__stream_t;

static int ifd__stream_token(void *ctx, int32_t token)
{
    ifd__stream_t *st = ctx;
    const char *text;
    size_t len;
    if (ifd_detok_push(st->detok, token, &text, &len) == 0 && len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

static int ifd__parse_ids(const char *s, ifd_tokens_t *out)
{
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s) {
            if (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') {
                s++;
                continue;
            }
            return IFD_EINVAL;
        }
        if (errno || v < 0 || v > INT32_MAX)
            return IFD_EINVAL;
        if (ifd_tokens_push(out, (ifd_token_t)v))
            return IFD_ENOMEM;
        s = end;
    }
    return out->n ? 0 : IFD_EINVAL;
}

/* Generation on a random-weight model: token ids in, token ids out (no
 * tokenizer, no stop tokens); with --json the timings too. */
static int ifd__random_generate(const ifd__gen_opts_t *o, ifd_model_t *m)
{
    ifd_tokens_t prompt = {0};
    ifd_generate_result_t res = {0};
    int rc = 0;
    if (!o->prompt_ids || ifd__parse_ids(o->prompt_ids, &prompt) != 0) {
        fprintf(stderr, "inferd-worker: --random-weights needs --prompt-ids \"ID ...\"\n");
        rc = IFD_EINVAL;
        goto out;
    }
    for (size_t i = 0; i < prompt.n; i++)
        if ((uint32_t)prompt.ids[i] >= ifd_model_config(m)->n_vocab) {
            fprintf(stderr, "inferd-worker: --prompt-ids: id %d is outside the vocabulary\n",
                    prompt.ids[i]);
            rc = IFD_EINVAL;
            goto out;
        }
    ifd_generate_params_t gp = o->gp;
    gp.use_cache = !o->no_cache;
    gp.ignore_eos = true;
    if ((rc = ifd_generate(m, prompt.ids, (int)prompt.n, &gp, &res))) {
        fprintf(stderr, "inferd-worker: generation failed: %s\n", ifd_strerror(rc));
        goto out;
    }
    if (o->json) {
        json_t *j = json_object(), *gt = json_array();
        for (int i = 0; i < res.n_tokens; i++)
            json_array_append_new(gt, json_integer(res.tokens[i]));
        json_object_set_new(j, "tokens", gt);
        json_object_set_new(j, "backend", json_string(o->backend ? o->backend : "cpu"));
        if (res.kv_local_pool_blocks > 0) {
            json_object_set_new(j, "kv_local_pool_blocks", json_integer(res.kv_local_pool_blocks));
            json_object_set_new(j, "kv_local_released", json_integer(res.kv_local_released));
        }
        json_object_set_new(j, "ttft_ms", json_real(res.ttft_ms));
        json_object_set_new(j, "decode_tok_s",
                            json_real(res.decode_ms > 0 && res.n_tokens > 1
                                          ? (res.n_tokens - 1) / (res.decode_ms / 1e3)
                                          : 0));
        json_object_set_new(j, "total_ms", json_real(res.total_ms));
        json_dumpf(j, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(j);
    } else {
        for (int i = 0; i < res.n_tokens; i++)
            printf("%s%d", i ? " " : "", res.tokens[i]);
        fputc('\n', stdout);
    }
out:
    ifd_generate_result_free(&res);
    ifd_tokens_free(&prompt);
    return rc;
}

/* Offline generation's objects, made by its phases and freed together by
 * ifd__gen_run_free. */
typedef struct {
    ifd_backend_t *be;
    ifd_model_t *m;
    ifd_tokenizer_t *tok;
    ifd_chat_template_t *tpl;
    ifd_detok_t *detok;
    ifd_tokens_t prompt;
    const ifd_token_t *stop_ids; /* the tokenizer's or the template's */
    size_t n_stop;
    ifd_generate_result_t res;
    FILE *dump;
    ifd_model_t *draft; /* --spec draft's model */
    ifd_generate_spec_stats_t spec;
    char err[1024];
} ifd__gen_run_t;

/* Users before what they use: the detokenizer and the template before the
 * tokenizer, the tokenizer before the model (whose source it was read
 * from), the model before its backend. */
static void ifd__gen_run_free(ifd__gen_run_t *g)
{
    ifd_generate_result_free(&g->res);
    ifd_detok_destroy(g->detok);
    if (g->dump)
        fclose(g->dump);
    ifd_tokens_free(&g->prompt);
    ifd_chat_template_destroy(g->tpl);
    ifd_tokenizer_destroy(g->tok);
    ifd_model_destroy(g->draft);
    ifd_model_destroy(g->m);
    if (g->be)
        g->be->ops->destroy(g->be);
}

/* --spec draft's model onto g->be, its tokenizer checked against the
 * model's first (spec_draft.h). 0, or 1 with the reason on stderr. */
static int ifd__gen_load_draft(const ifd__gen_opts_t *o, ifd__gen_run_t *g)
{
    ifd_model_source_t *src = NULL;
    ifd_tokenizer_t *dtok = NULL;
    int rc = ifd_model_source_open(&src, o->draft_model, g->err, sizeof g->err);
    if (!rc)
        rc = ifd_tokenizer_create_source(&dtok, src, g->err, sizeof g->err);
    if (!rc)
        rc = ifd_spec_draft_check_tokenizers(g->tok, dtok, g->err, sizeof g->err);
    ifd_tokenizer_destroy(dtok);
    if (!rc) {
        rc = ifd_model_load_source(&g->draft, src, ifd_tokenizer_n_vocab(g->tok), g->be, g->err,
                                   sizeof g->err);
        src = NULL; /* the load took it */
    }
    ifd_model_source_close(src);
    if (rc) {
        fprintf(stderr, "inferd-worker: draft model %s: %s\n", o->draft_model,
                g->err[0] ? g->err : ifd_strerror(rc));
        return 1;
    }
    return 0;
}

/* The model file's tokenizer, then its weights onto g->be. 0, or 1 with the
 * reason on stderr. */
static int ifd__gen_load(const ifd__gen_opts_t *o, ifd__gen_run_t *g)
{
    int rc;
    /* the tokenizer before the weights: ids past its size are masked (model.h) */
    ifd_model_source_t *src = NULL;
    if ((rc = ifd_model_source_open(&src, o->model, g->err, sizeof g->err))) {
        fprintf(stderr, "inferd-worker: %s\n", g->err[0] ? g->err : ifd_strerror(rc));
        return 1;
    }
    if ((rc = ifd_tokenizer_create_source(&g->tok, src, g->err, sizeof g->err))) {
        ifd_model_source_close(src);
        fprintf(stderr, "inferd-worker: tokenizer: %s\n", g->err[0] ? g->err : ifd_strerror(rc));
        return 1;
    }
    if ((rc = ifd_model_load_source(&g->m, src, ifd_tokenizer_n_vocab(g->tok), g->be, g->err,
                                    sizeof g->err))) {
        fprintf(stderr, "inferd-worker: %s\n", g->err[0] ? g->err : ifd_strerror(rc));
        return 1;
    }
    g->n_stop = ifd_tokenizer_eog_ids(g->tok, &g->stop_ids);
    return o->draft_model ? ifd__gen_load_draft(o, g) : 0;
}

/* --prompt-ids: the ids as given, each inside the vocabulary. 0 or 2. */
static int ifd__gen_prompt_ids(const ifd__gen_opts_t *o, ifd__gen_run_t *g)
{
    if (ifd__parse_ids(o->prompt_ids, &g->prompt) != 0) {
        fprintf(stderr, "inferd-worker: --prompt-ids: expected token ids separated by "
                        "spaces\n");
        return 2;
    }
    for (size_t i = 0; i < g->prompt.n; i++) {
        if (g->prompt.ids[i] >= ifd_tokenizer_n_vocab(g->tok)) {
            fprintf(stderr, "inferd-worker: --prompt-ids: id %d is outside the vocabulary "
                            "(%d tokens)\n", g->prompt.ids[i], ifd_tokenizer_n_vocab(g->tok));
            return 2;
        }
    }
    return 0;
}

/* --prompt in chat mode: the system and user messages through the chat
 * template, whose stop ids then replace the tokenizer's. 0, 1 or 2. */
static int ifd__gen_prompt_chat(const ifd__gen_opts_t *o, ifd__gen_run_t *g)
{
    int rc;
    ifd_chat_params_t cp = ifd_chat_default_params();
    cp.name = o->chat_template;
    if ((rc = ifd_chat_template_create(&g->tpl, g->tok, &cp, g->err, sizeof g->err))) {
        fprintf(stderr, "inferd-worker: chat template: %s\n",
                g->err[0] ? g->err : ifd_strerror(rc));
        return 2;
    }
    ifd_chat_msg_t msgs[2];
    size_t n_msgs = 0;
    if (o->system)
        msgs[n_msgs++] = (ifd_chat_msg_t){"system", o->system};
    msgs[n_msgs++] = (ifd_chat_msg_t){"user", o->prompt};
    ifd_chat_prompt_t cpr;
    if ((rc = ifd_chat_render(g->tpl, msgs, n_msgs, true, &cpr))) {
        fprintf(stderr, "inferd-worker: chat template: %s\n", ifd_strerror(rc));
        return 1;
    }
    rc = ifd_chat_tokenize(g->tpl, g->tok, &cpr, &g->prompt);
    ifd_chat_prompt_free(&cpr);
    if (rc) {
        fprintf(stderr, "inferd-worker: tokenize: %s\n", ifd_strerror(rc));
        return 1;
    }
    g->n_stop = ifd_chat_template_stop_ids(g->tpl, &g->stop_ids);
    return 0;
}

/* The prompt's ids: as given (--prompt-ids), tokenized as-is (--raw) or
 * through the chat template. 0, or the exit status with the reason on
 * stderr. */
static int ifd__gen_prompt(const ifd__gen_opts_t *o, ifd__gen_run_t *g)
{
    int status;
    if (o->prompt_ids) {
        if ((status = ifd__gen_prompt_ids(o, g)))
            return status;
    } else if (o->raw) {
        int rc = ifd_tokenizer_encode(g->tok, o->prompt, strlen(o->prompt), IFD_TOK_ADD_SPECIAL,
                                      &g->prompt);
        if (rc) {
            fprintf(stderr, "inferd-worker: tokenize: %s\n", ifd_strerror(rc));
            return 1;
        }
    } else if ((status = ifd__gen_prompt_chat(o, g))) {
        return status;
    }
    if (g->prompt.n == 0) {
        fprintf(stderr, "inferd-worker: the prompt is empty\n");
        return 2;
    }
    return 0;
}

/* --json: one line with the prompt and generated ids, the text (made valid
 * UTF-8), the finish reason and the timings. 0 or 1. */
static int ifd__gen_print_json(const ifd__gen_opts_t *o, const ifd__gen_run_t *g)
{
    const ifd_generate_result_t *res = &g->res;
    const ifd_tokens_t *prompt = &g->prompt;
    char *text = NULL;
    size_t len = 0;
    if (ifd_tokenizer_decode(g->tok, res->tokens, (size_t)res->n_tokens, 0, &text, &len))
        return 1;
    json_t *j = json_object(), *pt = json_array(), *gt = json_array();
    for (size_t i = 0; i < prompt->n; i++)
        json_array_append_new(pt, json_integer(prompt->ids[i]));
    for (int i = 0; i < res->n_tokens; i++)
        json_array_append_new(gt, json_integer(res->tokens[i]));
    json_object_set_new(j, "prompt_tokens", pt);
    json_object_set_new(j, "tokens", gt);
    /* Token pieces may split or form invalid UTF-8 (byte-fallback and
     * random weights do); JSON strings must be valid. */
    char *clean = malloc(3 * len + 1);
    if (!clean) {
        json_decref(j);
        free(text);
        return 1;
    }
    json_object_set_new(j, "text", json_stringn(clean, ifd_utf8_sanitize(clean, text, len)));
    free(clean);
    json_object_set_new(j, "finish_reason", json_string(res->finish_reason));
    if (res->kv_local_pool_blocks > 0) {
        json_object_set_new(j, "kv_local_pool_blocks", json_integer(res->kv_local_pool_blocks));
        json_object_set_new(j, "kv_local_released", json_integer(res->kv_local_released));
    }
    json_object_set_new(j, "ttft_ms", json_real(res->ttft_ms));
    json_object_set_new(j, "prefill_tok_s",
                        json_real(res->prefill_ms > 0 ? prompt->n / (res->prefill_ms / 1e3) : 0));
    json_object_set_new(j, "decode_tok_s",
                        json_real(res->decode_ms > 0 && res->n_tokens > 1
                                      ? (res->n_tokens - 1) / (res->decode_ms / 1e3)
                                      : 0));
    json_object_set_new(j, "total_ms", json_real(res->total_ms));
    json_object_set_new(j, "weight_bytes", json_integer((json_int_t)ifd_model_weight_bytes(g->m)));
    json_object_set_new(j, "use_cache", json_boolean(!o->no_cache));
    if (o->spec.method) {
        json_t *sp = json_object();
        json_object_set_new(sp, "method",
                            json_string(o->spec.method == IFD_SPEC_DRAFT ? "draft" : "ngram"));
        json_object_set_new(sp, "drafts", json_integer((json_int_t)g->spec.drafts));
        json_object_set_new(sp, "draft_tokens", json_integer((json_int_t)g->spec.draft_tokens));
        json_object_set_new(sp, "accepted_tokens",
                            json_integer((json_int_t)g->spec.accepted_tokens));
        json_object_set_new(sp, "steps", json_integer((json_int_t)g->spec.steps));
        json_object_set_new(j, "speculative", sp);
    }
    int drc = json_dumpf(j, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
    fputc('\n', stdout);
    json_decref(j);
    free(text);
    if (drc) {
        fprintf(stderr, "inferd-worker: cannot write the JSON result\n");
        return 1;
    }
    return 0;
}

/* Generates from the prompt: streamed as text to stdout (the detokenizer
 * on the token callback) or, with --json, printed at the end. 0 or 1. */
static int ifd__gen_run(const ifd__gen_opts_t *o, ifd__gen_run_t *g)
{
    int rc;
    if (o->dump_logits && !(g->dump = fopen(o->dump_logits, "wb"))) {
        fprintf(stderr, "inferd-worker: %s: %s\n", o->dump_logits, strerror(errno));
        return 1;
    }
    ifd__stream_t st = {0};
    ifd_generate_params_t gp = o->gp;
    gp.use_cache = !o->no_cache;
    gp.ignore_eos = o->ignore_eos;
    gp.stop_ids = (const int32_t *)g->stop_ids;
    gp.n_stop_ids = g->n_stop;
    gp.dump_logits = g->dump;
    ifd_image_embd_t ie = {0};
    if (o->n_image_embd) {
        char err[512] = "";
        if ((rc = ifd_image_embd_load(&ie, o->image_embd, o->n_image_embd, (int)g->prompt.n,
                                      (int)ifd_model_config(g->m)->n_embd, err, sizeof err))) {
            fprintf(stderr, "inferd-worker: %s\n", err[0] ? err : ifd_strerror(rc));
            return 1;
        }
        gp.kv_last = ie.kv_last;
        gp.embd = ie.embd;
    }
    if (!o->json) {
        if ((rc = ifd_detok_create(&g->detok, g->tok, 0)))
            return 1;
        st.detok = g->detok;
        gp.on_token = ifd__stream_token;
        gp.cb_ctx = &st;
    }
    if (o->spec.method) {
        ifd_generate_spec_params_t sp = o->spec;
        sp.draft = g->draft;
        rc = ifd_generate_spec(g->m, g->prompt.ids, (int)g->prompt.n, &gp, &sp, &g->res,
                               &g->spec);
    } else {
        rc = ifd_generate(g->m, g->prompt.ids, (int)g->prompt.n, &gp, &g->res);
    }
    ifd_image_embd_free(&ie);
    if (rc) {
        fprintf(stderr, "inferd-worker: generation failed: %s\n", ifd_strerror(rc));
        return 1;
    }
    if (o->json)
        return ifd__gen_print_json(o, g);
    const char *text;
    size_t len;
    if (ifd_detok_flush(g->detok, &text, &len) == 0 && len)
        fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    return 0;
}

/* Offline generation (--model or --random-weights): the backend, the
 * model, the prompt, then the tokens. Returns the exit status. */
static int ifd__generate_main(ifd__gen_opts_t *o)
{
    ifd__gen_run_t g;
    memset(&g, 0, sizeof g);
    int status = 1, rc;
    if ((rc = ifd_backend_factory_create(&g.be, o->backend, o->threads, o->weights, g.err,
                                         sizeof g.err))) {
        fprintf(stderr, "inferd-worker: %s\n", g.err);
        goto out;
    }
    if (o->shape) {
        ifd_model_config_t cfg;
        if ((rc = ifd_shape_load(&cfg, o->shape, g.err, sizeof g.err)) ||
            (rc = ifd_model_load_random(&g.m, &cfg, o->weights_seed, g.be, g.err,
                                        sizeof g.err))) {
            fprintf(stderr, "inferd-worker: %s\n", g.err[0] ? g.err : ifd_strerror(rc));
            goto out;
        }
        status = ifd__random_generate(o, g.m) ? 1 : 0;
        goto out;
    }
    if (!(status = ifd__gen_load(o, &g)) && !(status = ifd__gen_prompt(o, &g)))
        status = ifd__gen_run(o, &g);
out:
    ifd__gen_run_free(&g);
    return status;
}

/* --kv-probe: the model on the GPU, the warm-up of kvprobe.h (the engine's
 * largest steps and its decode graphs, measured), then the KV blocks that
 * fit in fraction * total - used - margin (kvsize.h). One JSON line on
 * stdout either way ({"ok": false, "error": ...} on failure, exit status 1),
 * so the daemon can report the reason in one line. */
typedef struct {
    double fraction;
    const char *kv_dtype;
    int block_size;
    int max_seqs;
    int max_batched_tokens;
    int max_model_len; /* 0: the model's context */
} ifd__probe_opts_t;

static int ifd__kv_probe(const ifd__gen_opts_t *o, const ifd__probe_opts_t *po)
{
    char err[1024] = "";
    ifd_backend_t *be = NULL;
    ifd_model_t *m = NULL;
    ifd_tokenizer_t *tok = NULL;
    json_t *j = json_object();
    int rc, status = 1;
    const char *bname = o->backend ? o->backend : "cpu";
    ifd_kv_dtype_t kvd;
    if (strcmp(bname, "cuda") != 0 && strcmp(bname, "cuda-f32") != 0) {
        snprintf(err, sizeof err, "--kv-probe sizes a GPU's pool: it needs --backend cuda or "
                                  "cuda-f32, not '%s'", bname);
        goto out;
    }
    if (ifd_kv_dtype_parse(po->kv_dtype, &kvd) != 0) {
        snprintf(err, sizeof err, "--kv-dtype '%s': expected f32, f16, bf16, q8_0 or fp8",
                 po->kv_dtype);
        goto out;
    }
    if (ifd_kv_dtype_quantized(kvd) && !ifd_kv_dtype_gpu(kvd)) {
        snprintf(err, sizeof err,
                 "--kv-dtype %s is CPU only: a GPU's KV is f32, f16, bf16, q8_0 or fp8",
                 po->kv_dtype);
        goto out;
    }
    if (!o->model) {
        snprintf(err, sizeof err, "--kv-probe needs --model (with --random-weights: the "
                                  "tokenizer's model)");
        goto out;
    }
    if (ifd_backend_factory_gpu_check(err, sizeof err))
        goto out;
    if ((rc = ifd_backend_factory_create(&be, bname, 0, IFD_WEIGHTS_AUTO, err, sizeof err)))
        goto out;
    ifd_worker_model_opts_t mo = {o->model, o->shape, o->weights_seed};
    if ((rc = ifd_worker_model_load(&mo, be, &m, &tok, err, sizeof err)))
        goto out;
    ifd_kvprobe_size_t sz = {0};
    char desc[128] = "";
    const ifd_kvprobe_params_t wp = {.max_batched_tokens = po->max_batched_tokens,
                                     .max_seqs = po->max_seqs,
                                     .max_ctx = po->max_model_len,
                                     .block_size = po->block_size,
                                     .kv_dtype = kvd,
                                     /* as the POOL step: requests may speculate */
                                     .spec_rows = IFD_ENGINE_SPEC_ROWS};
    rc = ifd_backend_factory_gpu_size(be, m, NULL, &wp, po->fraction, &sz, desc, sizeof desc, err,
                                      sizeof err);
    if (desc[0])
        json_object_set_new(j, "device", json_string(desc));
    if (rc && rc != IFD_ENOMEM)
        goto out; /* a warm-up step failed */
    const struct {
        const char *key;
        uint64_t v;
    } u64s[] = {
        {"total_bytes", sz.total_bytes},
        {"free_bytes", sz.free_bytes},
        {"free_before_warmup_bytes", sz.warm.free_before},
        {"weight_bytes", sz.weight_bytes},
        {"activation_bytes", sz.warm.activation_bytes},
        {"graph_bytes", sz.warm.graph_bytes},
        {"kv_scratch_bytes", sz.warm.kv_scratch_bytes},
        {"margin_bytes", sz.margin_bytes},
        {"block_bytes", sz.block_bytes},
        {"usable_bytes", sz.usable_bytes},
    };
    for (size_t i = 0; i < sizeof u64s / sizeof u64s[0]; i++)
        json_object_set_new(j, u64s[i].key, json_integer((json_int_t)u64s[i].v));
    json_object_set_new(j, "n_graphs", json_integer(sz.warm.n_graphs));
    json_object_set_new(j, "warmup_steps",
                        json_integer(sz.warm.prefill_steps + sz.warm.decode_steps));
    json_object_set_new(j, "max_batched_tokens", json_integer(po->max_batched_tokens));
    json_object_set_new(j, "n_blocks", json_integer((json_int_t)sz.n_blocks));
    if (rc)
        goto out; /* no block fits: err says why */
    status = 0;
out:
    json_object_set_new(j, "ok", json_boolean(status == 0));
    if (status)
        json_object_set_new(j, "error", json_string(err[0] ? err : "failed"));
    json_dumpf(j, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
    fputc('\n', stdout);
    fflush(stdout);
    json_decref(j);
    ifd_tokenizer_destroy(tok);
    ifd_model_destroy(m);
    if (be)
        be->ops->destroy(be);
    return status;
}

static bool ifd__parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return false;
    *out = (float)v;
    return true;
}

static bool ifd__parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* getopt_long's codes of the long options that have no short one. */
enum {
    OPT_JSON = 256,
    OPT_DEVICES,
    OPT_LOG_LEVEL,
    OPT_MODEL,
    OPT_PROMPT,
    OPT_PROMPT_IDS,
    OPT_SYSTEM,
    OPT_TEMPLATE,
    OPT_RAW,
    OPT_NO_CACHE,
    OPT_TEMP,
    OPT_TOP_K,
    OPT_TOP_P,
    OPT_MIN_P,
    OPT_REPEAT,
    OPT_SEED,
    OPT_IGNORE_EOS,
    OPT_THREADS,
    OPT_DUMP,
    OPT_IMAGE_EMBD,
    OPT_MMPROJ,
    OPT_IMAGE_CACHE_MB,
    OPT_VISION_STEP_MS,
    OPT_VISION_STEP_FLOPS,
    OPT_MAX_LOGPROBS,
    OPT_WEIGHTS,
    OPT_SERVE,
    OPT_FD,
    OPT_RANDOM,
    OPT_WSEED,
    OPT_BACKEND,
    OPT_KV_PROBE,
    OPT_GPU_FRACTION,
    OPT_KV_DTYPE,
    OPT_BLOCK_SIZE,
    OPT_MAX_SEQS,
    OPT_MAX_BATCHED,
    OPT_PREFILL_CHUNK,
    OPT_KV_LOCAL,
    OPT_MAX_MODEL_LEN,
    OPT_KV_CACHE_DIR,
    OPT_KV_CACHE_DISK,
    OPT_KV_CACHE_HOST,
    OPT_DRAFT_STEP,
    OPT_KV_CACHE_PIN_SLOTS,
    OPT_SPEC,
    OPT_SPEC_TOKENS,
    OPT_SPEC_NGRAM_MIN,
    OPT_SPEC_NGRAM_MAX,
    OPT_DRAFT_MODEL,
};

/* The parsed command line: the mode flags and each mode's options. */
typedef struct {
    ifd__gen_opts_t go;   /* generation's; --serve and --kv-probe take the model from it */
    ifd__probe_opts_t po; /* --kv-probe's */
    const char *inspect;  /* --inspect's path */
    int serve_fd;         /* --fd: -1 until given */
    bool json, devices, serve, probe;
} ifd__cli_t;

/* Not an exit status: the option was taken, parsing goes on. */
#define IFD__CLI_NEXT (-1)

/* The sampling options and the seeds (the sampler's and the random
 * weights'). IFD__CLI_NEXT or 2. */
static int ifd__parse_sampling_opt(ifd__cli_t *cli, int c, const char *arg)
{
    ifd__gen_opts_t *go = &cli->go;
    long lv;
    float f;
    switch (c) {
    case OPT_TEMP:
    case OPT_TOP_P:
    case OPT_MIN_P:
    case OPT_REPEAT:
        if (!ifd__parse_float(arg, &f)) {
            fprintf(stderr, "inferd-worker: '%s' is not a number\n", arg);
            return 2;
        }
        if (c == OPT_TEMP)
            go->gp.sampling.temperature = f;
        else if (c == OPT_TOP_P)
            go->gp.sampling.top_p = f;
        else if (c == OPT_MIN_P)
            go->gp.sampling.min_p = f;
        else
            go->gp.sampling.repetition_penalty = f;
        break;
    case OPT_TOP_K:
        if (!ifd__parse_int(arg, 0, INT32_MAX, &lv)) {
            fprintf(stderr, "inferd-worker: bad --top-k '%s'\n", arg);
            return 2;
        }
        go->gp.sampling.top_k = (int32_t)lv;
        break;
    default: { /* OPT_SEED, OPT_WSEED */
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (errno || end == arg || *end) {
            fprintf(stderr, "inferd-worker: bad seed '%s'\n", arg);
            return 2;
        }
        if (c == OPT_SEED)
            go->gp.sampling.seed = v;
        else
            go->weights_seed = v;
        break;
    }
    }
    return IFD__CLI_NEXT;
}

/* The options that take a count: the pool's and engine's sizes (--kv-probe)
 * and generation's block size and prefill chunk. IFD__CLI_NEXT or 2. */
static int ifd__parse_count_opt(ifd__cli_t *cli, int c, const char *arg)
{
    long lv;
    if (!ifd__parse_int(arg, 1, c == OPT_MAX_MODEL_LEN ? 1 << 22 : 1 << 20, &lv)) {
        fprintf(stderr, "inferd-worker: bad count '%s'\n", arg);
        return 2;
    }
    if (c == OPT_BLOCK_SIZE)
        cli->po.block_size = cli->go.gp.block_size = (int)lv; /* the probe's and generation's */
    else if (c == OPT_PREFILL_CHUNK)
        cli->go.gp.prefill_chunk = (int)lv;
    else if (c == OPT_MAX_SEQS)
        cli->po.max_seqs = (int)lv;
    else if (c == OPT_MAX_BATCHED)
        cli->po.max_batched_tokens = (int)lv;
    else
        cli->po.max_model_len = (int)lv;
    return IFD__CLI_NEXT;
}

/* The options with an argument to check: IFD__CLI_NEXT, or 2 after saying
 * what is wrong with it. */
static int ifd__parse_value_opt(ifd__cli_t *cli, int c, const char *arg)
{
    long lv;
    float f;
    ifd_log_level_t l;
    switch (c) {
    case OPT_LOG_LEVEL:
        if (ifd_log_parse_level(arg, &l) != 0) {
            fprintf(stderr, "inferd-worker: bad --log-level '%s'\n", arg);
            return 2;
        }
        ifd_log_set_level(l);
        return IFD__CLI_NEXT;
    case 'n':
        if (!ifd__parse_int(arg, 1, 1 << 20, &lv)) {
            fprintf(stderr, "inferd-worker: -n wants a count >= 1, not '%s'\n", arg);
            return 2;
        }
        cli->go.gp.n_predict = (int)lv;
        return IFD__CLI_NEXT;
    case OPT_GPU_FRACTION:
        if (!ifd__parse_float(arg, &f) || !(f > 0.0f && f <= 1.0f)) {
            fprintf(stderr, "inferd-worker: --gpu-memory-fraction wants a number in (0, 1], "
                            "not '%s'\n", arg);
            return 2;
        }
        cli->po.fraction = f;
        return IFD__CLI_NEXT;
    case OPT_THREADS:
        if (!ifd__parse_int(arg, 1, 1024, &lv)) {
            fprintf(stderr, "inferd-worker: bad --threads '%s'\n", arg);
            return 2;
        }
        cli->go.threads = (int)lv;
        return IFD__CLI_NEXT;
    case OPT_WEIGHTS:
        if (ifd_weights_dtype_parse(arg, &cli->go.weights) != 0) {
            fprintf(stderr, "inferd-worker: --weights-dtype '%s': expected auto or f32\n", arg);
            return 2;
        }
        return IFD__CLI_NEXT;
    case OPT_FD:
        if (!ifd__parse_int(arg, 0, 1 << 20, &lv)) {
            fprintf(stderr, "inferd-worker: bad --fd '%s'\n", arg);
            return 2;
        }
        cli->serve_fd = (int)lv;
        return IFD__CLI_NEXT;
    case OPT_BLOCK_SIZE:
    case OPT_MAX_SEQS:
    case OPT_MAX_BATCHED:
    case OPT_PREFILL_CHUNK:
    case OPT_MAX_MODEL_LEN:
        return ifd__parse_count_opt(cli, c, arg);
    default:
        return ifd__parse_sampling_opt(cli, c, arg);
    }
}

/* One option from getopt_long: IFD__CLI_NEXT, or the exit status to return
 * now (0 after --help or --version, 2 on a usage error). */
static int ifd__parse_opt(ifd__cli_t *cli, int c, const char *arg)
{
    ifd__gen_opts_t *go = &cli->go;
    switch (c) {
    case 'i':
        cli->inspect = arg;
        break;
    case OPT_JSON:
        cli->json = true;
        break;
    case OPT_DEVICES:
        cli->devices = true;
        break;
    case OPT_SERVE:
        cli->serve = true;
        break;
    case OPT_KV_PROBE:
        cli->probe = true;
        break;
    case OPT_MODEL:
        go->model = arg;
        break;
    case OPT_PROMPT:
        go->prompt = arg;
        break;
    case OPT_PROMPT_IDS:
        go->prompt_ids = arg;
        break;
    case OPT_SYSTEM:
        go->system = arg;
        break;
    case OPT_TEMPLATE:
        go->chat_template = arg;
        break;
    case OPT_RAW:
        go->raw = true;
        break;
    case OPT_NO_CACHE:
        go->no_cache = true;
        break;
    case OPT_RANDOM:
        go->shape = arg;
        break;
    case OPT_BACKEND:
        go->backend = arg;
        break;
    case OPT_KV_DTYPE: {
        ifd_kv_dtype_t t;
        if (ifd_kv_dtype_parse(arg, &t) != 0) {
            fprintf(stderr, "inferd-worker: --kv-dtype '%s': expected f32, f16, bf16, q8_0, "
                            "q4_0 or fp8\n", arg);
            return 2;
        }
        cli->po.kv_dtype = arg;
        go->gp.kv_dtype = (int)t; /* generation's KV too */
        break;
    }
    case OPT_KV_LOCAL:
        go->gp.local_pool = true;
        break;
    case OPT_KV_CACHE_DIR:
        go->kv_cache_dir = arg;
        break;
    case OPT_KV_CACHE_DISK: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (errno || end == arg || *end || v == 0) {
            fprintf(stderr, "inferd-worker: bad --kv-cache-disk-bytes '%s' (bytes, > 0)\n", arg);
            return 2;
        }
        go->kv_cache_disk_bytes = v;
        break;
    }
    case OPT_KV_CACHE_HOST: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (errno || end == arg || *end) {
            fprintf(stderr, "inferd-worker: bad --kv-cache-host-bytes '%s' (bytes)\n", arg);
            return 2;
        }
        go->kv_cache_host_bytes = v;
        break;
    }
    case OPT_KV_CACHE_PIN_SLOTS: {
        char *end;
        errno = 0;
        long v = strtol(arg, &end, 10);
        if (errno || end == arg || *end || v < 0 || v > IFD_ENGINE_COPY_SLOTS_MAX) {
            fprintf(stderr,
                    "inferd-worker: bad --kv-cache-pin-slots '%s' (0 to %d; 0: synchronous copies)\n",
                    arg, IFD_ENGINE_COPY_SLOTS_MAX);
            return 2;
        }
        go->kv_copy_slots = v ? (int)v : -1;
        break;
    }
    case OPT_MMPROJ:
        go->mmproj = arg;
        break;
    case OPT_IMAGE_CACHE_MB: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (errno || end == arg || *end || v == 0 || v > (1ull << 30)) {
            fprintf(stderr, "inferd-worker: bad --image-cache-mb '%s' (MiB, 1 to 2^30)\n", arg);
            return 2;
        }
        go->image_cache_mb = v;
        break;
    }
    case OPT_VISION_STEP_MS: {
        char *end;
        errno = 0;
        unsigned long v = strtoul(arg, &end, 10);
        if (errno || end == arg || *end || v == 0 || v > 60000) {
            fprintf(stderr, "inferd-worker: bad --vision-step-ms '%s' (1 to 60000)\n", arg);
            return 2;
        }
        go->vision_step_ms = (uint32_t)v;
        break;
    }
    case OPT_MAX_LOGPROBS: {
        char *end;
        errno = 0;
        long long v = strtoll(arg, &end, 10);
        if (errno || end == arg || *end || v < -1 || v > INT32_MAX) {
            fprintf(stderr, "inferd-worker: bad --max-logprobs '%s' (-1 to 2^31-1)\n", arg);
            return 2;
        }
        go->max_logprobs = v;
        break;
    }
    case OPT_DRAFT_STEP: {
        long v;
        if (!ifd__parse_int(arg, 1, 1 << 20, &v)) {
            fprintf(stderr, "inferd-worker: bad --draft-step-tokens '%s' (1 to 1048576)\n", arg);
            return 2;
        }
        go->draft_step_tokens = (int)v;
        break;
    }
    case OPT_VISION_STEP_FLOPS: {
        char *end;
        errno = 0;
        double v = strtod(arg, &end);
        if (errno || end == arg || *end || !(v >= 1 && v <= 1e18)) {
            fprintf(stderr, "inferd-worker: bad --vision-step-flops '%s' (1 to 1e18)\n", arg);
            return 2;
        }
        go->vision_step_flops = v;
        break;
    }
    case OPT_IGNORE_EOS:
        go->ignore_eos = true;
        break;
    case OPT_SPEC:
        if (strcmp(arg, "ngram") && strcmp(arg, "draft")) {
            fprintf(stderr, "inferd-worker: --spec '%s': expected ngram or draft\n", arg);
            return 2;
        }
        go->spec.method = !strcmp(arg, "draft") ? IFD_SPEC_DRAFT : IFD_SPEC_NGRAM;
        break;
    case OPT_SPEC_TOKENS:
    case OPT_SPEC_NGRAM_MIN:
    case OPT_SPEC_NGRAM_MAX: {
        long v;
        if (!ifd__parse_int(arg, 1, IFD_SPEC_MAX_TOKENS, &v)) {
            fprintf(stderr, "inferd-worker: bad --%s '%s' (1 to %d)\n",
                    c == OPT_SPEC_TOKENS ? "spec-tokens"
                    : c == OPT_SPEC_NGRAM_MIN ? "spec-ngram-min"
                                              : "spec-ngram-max",
                    arg, IFD_SPEC_MAX_TOKENS);
            return 2;
        }
        *(c == OPT_SPEC_TOKENS      ? &go->spec.num_tokens
          : c == OPT_SPEC_NGRAM_MIN ? &go->spec.ngram_min
                                    : &go->spec.ngram_max) = (int)v;
        break;
    }
    case OPT_DRAFT_MODEL:
        go->draft_model = arg;
        break;
    case OPT_DUMP:
        go->dump_logits = arg;
        break;
    case OPT_IMAGE_EMBD:
        if (go->n_image_embd == IFD__MAX_IMAGE_EMBD) {
            fprintf(stderr, "inferd-worker: at most %d --image-embd\n", IFD__MAX_IMAGE_EMBD);
            return 2;
        }
        go->image_embd[go->n_image_embd++] = arg;
        break;
    case OPT_LOG_LEVEL:
    case 'n':
    case OPT_TEMP:
    case OPT_TOP_P:
    case OPT_MIN_P:
    case OPT_REPEAT:
    case OPT_TOP_K:
    case OPT_SEED:
    case OPT_WSEED:
    case OPT_GPU_FRACTION:
    case OPT_BLOCK_SIZE:
    case OPT_MAX_SEQS:
    case OPT_MAX_BATCHED:
    case OPT_PREFILL_CHUNK:
    case OPT_MAX_MODEL_LEN:
    case OPT_THREADS:
    case OPT_WEIGHTS:
    case OPT_FD:
        return ifd__parse_value_opt(cli, c, arg);
    case 'h':
        ifd__usage(stdout);
        return 0;
    case 'V':
        printf("inferd-worker %s\n", IFD_VERSION);
        return 0;
    default:
        ifd__usage(stderr);
        return 2;
    }
    return IFD__CLI_NEXT;
}

/* Generation's --spec options together: 0, or 2 after saying what is wrong. */
static int ifd__check_spec(const ifd__gen_opts_t *go)
{
    const ifd_generate_spec_params_t *sp = &go->spec;
    if (!sp->method) {
        if (sp->num_tokens || sp->ngram_min || sp->ngram_max || go->draft_model) {
            fprintf(stderr, "inferd-worker: --spec-tokens, --spec-ngram-min/max and "
                            "--draft-model need --spec\n");
            return 2;
        }
        return 0;
    }
    if ((sp->method == IFD_SPEC_DRAFT) != (go->draft_model != NULL)) {
        fprintf(stderr, "inferd-worker: --spec draft and --draft-model PATH go together\n");
        return 2;
    }
    const int lo = sp->ngram_min ? sp->ngram_min : 1, hi = sp->ngram_max ? sp->ngram_max : 4;
    if (lo > hi) {
        fprintf(stderr, "inferd-worker: --spec-ngram-min %d is above --spec-ngram-max %d\n", lo,
                hi);
        return 2;
    }
    if (go->shape || go->no_cache || go->dump_logits || go->n_image_embd || go->gp.local_pool) {
        fprintf(stderr, "inferd-worker: --spec needs --model and the KV cache, and takes no "
                        "--dump-logits, --image-embd or --kv-local-pool\n");
        return 2;
    }
    return 0;
}

/* Runs the mode the command line picked, in order of precedence:
 * --devices, --serve, --kv-probe, --inspect, generation. */
static int ifd__run_mode(ifd__cli_t *cli)
{
    ifd__gen_opts_t *go = &cli->go;
    if (cli->devices)
        return ifd__devices();
    if (cli->serve) {
        if (cli->serve_fd < 0) {
            fprintf(stderr, "inferd-worker: --serve needs --fd N (the router's socket)\n");
            return 2;
        }
        ifd_serve_opts_t so = {cli->serve_fd,      go->model,        go->threads,
                               go->weights,        go->shape,        go->weights_seed,
                               go->kv_cache_dir,   go->kv_cache_disk_bytes,
                               go->mmproj,         go->image_cache_mb << 20,
                               go->kv_cache_host_bytes, go->vision_step_ms,
                               go->vision_step_flops, go->max_logprobs,
                               go->draft_step_tokens, go->kv_copy_slots};
        return ifd_worker_serve(&so);
    }
    if (cli->probe)
        return ifd__kv_probe(go, &cli->po);
    if (cli->inspect)
        return ifd_inspect_file(stdout, stderr, cli->inspect, cli->json) == 0 ? 0 : 1;
    if (go->model && go->shape) {
        fprintf(stderr, "inferd-worker: --model and --random-weights exclude each other\n");
        return 2;
    }
    if (go->model || go->shape) {
        if (!go->prompt == !go->prompt_ids) {
            fprintf(stderr, "inferd-worker: --model needs exactly one of --prompt or "
                            "--prompt-ids\n");
            return 2;
        }
        int prc = ifd_sampling_params_check(&go->gp.sampling, IFD_SAMPLER_MAX_VOCAB);
        if (prc) {
            fprintf(stderr, "inferd-worker: invalid sampling parameters: %s\n",
                    ifd_strerror(prc));
            return 2;
        }
        if ((prc = ifd__check_spec(go)))
            return prc;
        go->json = cli->json;
        return ifd__generate_main(go);
    }
    ifd__usage(stderr);
    return 2;
}

int ifd_worker_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"inspect", required_argument, NULL, 'i'},
        {"json", no_argument, NULL, OPT_JSON},
        {"devices", no_argument, NULL, OPT_DEVICES},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"model", required_argument, NULL, OPT_MODEL},
        {"prompt", required_argument, NULL, OPT_PROMPT},
        {"prompt-ids", required_argument, NULL, OPT_PROMPT_IDS},
        {"system", required_argument, NULL, OPT_SYSTEM},
        {"chat-template", required_argument, NULL, OPT_TEMPLATE},
        {"raw", no_argument, NULL, OPT_RAW},
        {"n-predict", required_argument, NULL, 'n'},
        {"no-kv-cache", no_argument, NULL, OPT_NO_CACHE},
        {"temperature", required_argument, NULL, OPT_TEMP},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"top-p", required_argument, NULL, OPT_TOP_P},
        {"min-p", required_argument, NULL, OPT_MIN_P},
        {"repeat-penalty", required_argument, NULL, OPT_REPEAT},
        {"seed", required_argument, NULL, OPT_SEED},
        {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"dump-logits", required_argument, NULL, OPT_DUMP},
        {"image-embd", required_argument, NULL, OPT_IMAGE_EMBD},
        {"weights-dtype", required_argument, NULL, OPT_WEIGHTS},
        {"serve", no_argument, NULL, OPT_SERVE},
        {"fd", required_argument, NULL, OPT_FD},
        {"random-weights", required_argument, NULL, OPT_RANDOM},
        {"weights-seed", required_argument, NULL, OPT_WSEED},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"kv-probe", no_argument, NULL, OPT_KV_PROBE},
        {"gpu-memory-fraction", required_argument, NULL, OPT_GPU_FRACTION},
        {"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
        {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
        {"max-seqs", required_argument, NULL, OPT_MAX_SEQS},
        {"max-batched-tokens", required_argument, NULL, OPT_MAX_BATCHED},
        {"prefill-chunk", required_argument, NULL, OPT_PREFILL_CHUNK},
        {"kv-local-pool", no_argument, NULL, OPT_KV_LOCAL},
        {"kv-cache-dir", required_argument, NULL, OPT_KV_CACHE_DIR},
        {"mmproj", required_argument, NULL, OPT_MMPROJ},
        {"image-cache-mb", required_argument, NULL, OPT_IMAGE_CACHE_MB},
        {"vision-step-ms", required_argument, NULL, OPT_VISION_STEP_MS},
        {"vision-step-flops", required_argument, NULL, OPT_VISION_STEP_FLOPS},
        {"max-logprobs", required_argument, NULL, OPT_MAX_LOGPROBS},
        {"kv-cache-disk-bytes", required_argument, NULL, OPT_KV_CACHE_DISK},
        {"kv-cache-host-bytes", required_argument, NULL, OPT_KV_CACHE_HOST},
        {"draft-step-tokens", required_argument, NULL, OPT_DRAFT_STEP},
        {"kv-cache-pin-slots", required_argument, NULL, OPT_KV_CACHE_PIN_SLOTS},
        {"spec", required_argument, NULL, OPT_SPEC},
        {"spec-tokens", required_argument, NULL, OPT_SPEC_TOKENS},
        {"spec-ngram-min", required_argument, NULL, OPT_SPEC_NGRAM_MIN},
        {"spec-ngram-max", required_argument, NULL, OPT_SPEC_NGRAM_MAX},
        {"draft-model", required_argument, NULL, OPT_DRAFT_MODEL},
        {"max-model-len", required_argument, NULL, OPT_MAX_MODEL_LEN},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const ifd_engine_params_t edef = ifd_engine_default_params();
    ifd__cli_t cli;
    memset(&cli, 0, sizeof cli);
    cli.serve_fd = -1;
    cli.po = (ifd__probe_opts_t){0.90, "f16", IFD_KVPOOL_DEFAULT_BLOCK_SIZE, edef.max_seqs,
                                 edef.max_batched_tokens, 0};
    cli.go.gp = ifd_generate_default_params();
    int c;
    optind = 1;
    ifd_log_set_tag("inferd-worker");
    while ((c = getopt_long(argc, argv, "hVn:", opts, NULL)) != -1) {
        int status = ifd__parse_opt(&cli, c, optarg);
        if (status != IFD__CLI_NEXT)
            return status;
    }
    if (optind < argc) {
        fprintf(stderr, "inferd-worker: unexpected argument '%s'\n", argv[optind]);
        ifd__usage(stderr);
        return 2;
    }
    return ifd__run_mode(&cli);
}
