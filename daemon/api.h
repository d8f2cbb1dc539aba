/*
 * api.h — the HTTP API: the route table, authentication, and the endpoints
 * other than completions (GET /v1/models, /health, /metrics; POST
 * /tokenize, /detokenize; GET and DELETE /v1/responses/{id}; POST
 * /invocations, SageMaker's, which hands a body to chat or completions by
 * its shape). Paths are routed without the configured root_path (a reverse
 * proxy's prefix), and the handlers see them so. Completions (POST
 * /v1/chat/completions, /v1/completions and /v1/responses) live in gen.h and
 * share this context; both answer through reply.h, draw ids from ids.h and
 * reach the Responses store through respstore.h, so neither calls into the
 * other's internals.
 *
 * Every error is OpenAI's error object with the right status, decided
 * before any 200 is sent: 400 (with `param`), 401 (TCP without a right
 * Bearer key, when keys are configured), 404 (unknown route or model, or a
 * stored Response that is not the client's: ifd_api_identity), 405
 * (with Allow), 413/431/408 (http.c), 503 (+ Retry-After: queue full, no
 * worker, shutting down), 500.
 *
 * The context is plain data wired by main.c; every pointer in it is
 * borrowed and outlives the API, but the Responses store, which the API
 * makes and ifd_api_close frees. Threading: loop thread only (the
 * tokenizer and template are also read from uv threadpool threads, which
 * they allow).
 */
#ifndef IFD_DAEMON_API_H
#define IFD_DAEMON_API_H

#include "apikeys.h"
#include "chat/chat_template.h"
#include "config.h"
#include "gcache.h"
#include "http.h"
#include "kvpool/kvpool.h"
#include "memtrim.h"
#include "metrics.h"
#include "modelfile/model_config.h"
#include "proto/openai.h"
#include "respstore.h"
#include "router.h"
#include "supervisor.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct ifd_gen ifd_gen_t;

typedef struct {
    uv_loop_t *loop;
    const ifd_config_t *cfg; /* the running configuration (reloadable keys change) */
    const ifd_tokenizer_t *tok;
    const ifd_chat_template_t *tpl;
    ifd_router_t *router;
    ifd_sup_t *sup;
    ifd_kvpool_t *pool;
    ifd_kvpool_t *local_pool; /* the local layers' pool, or NULL */
    ifd_metrics_t *metrics;
    ifd_http_server_t *http;
    const char *model_id;   /* what clients send as "model" */
    const char *model_path; /* /v1/models "root" */
    const ifd_model_config_t *mcfg; /* /v1/models architecture and format; generation_config
                                     * sampling defaults (gen.c). NULL in tests: none */
    int64_t max_model_len;
    int32_t n_vocab;
    /* the workers' vision tower (READY.vision, the last worker ready: all
     * serve one model); tokens_per_image 0 until one is, or without one */
    ifd_wire_vision_t vision;
    int64_t created;   /* unix seconds at start */
    uint64_t start_ns; /* uv_hrtime at start */
    /* the API keys TCP clients must send (apikeys.h), NULL when none; owned
     * by main, which replaces it on reload */
    const ifd_apikeys_t *keys;
    bool draining;
    bool ready_once; /* every worker was ready at least once */

    /* generation requests */
    int64_t n_tokenizing;       /* admitted, being tokenized (they count in the queue) */
    int64_t n_running;          /* tokenized and being served */
    int64_t n_background;       /* background Responses admitted (responses_background_max) */
    ifd_gen_t *gens;            /* every live generation request */
    uint64_t rng;               /* default sampling seeds, never ids (ids.h); seeded by main */
    void (*on_idle)(void *ctx); /* called when the last generation request ends */
    void *idle_ctx;

    /* stored Responses (respstore.h: ifd_respstore_keep / _lookup): made at
     * the first one kept, freed by ifd_api_close; limits from cfg
     * responses_store_entries / _bytes */
    ifd_respstore_t *responses;
    /* compiled structured-output grammars by what requests ask (gcache.h:
     * thread-safe, used by the threadpool's jobs); made by main, freed by
     * ifd_api_close */
    ifd_gcache_t *grammars;

    /* gives freed memory back after large requests (memtrim.h); borrowed,
     * may be NULL (tests) */
    ifd_memtrim_t *trim;
} ifd_api_t;

/* Room for an identity from ifd_api_identity, NUL included. */
#define IFD_API_IDENTITY_MAX (4 + IFD_APIKEY_NAME_MAX + 1)

/*
 * The identity of the client that sent r, which owns what it stores (the
 * Responses store, respstore.h), into out (len bytes): on the Unix socket
 * "uid:N", the uid the kernel recorded at connect (SO_PEERCRED: a client
 * cannot forge it), "unix" if unknown; on TCP "key:NAME", the name of the
 * API key the request carries (apikeys.h), or "tcp" — one identity shared
 * by every TCP client — when no key is configured. 0 or IFD_ETOOBIG.
 */
int ifd_api_identity(const ifd_api_t *api, const ifd_http_request_t *r, char *out, size_t len);

/* The http handler: routes one request. */
void ifd_api_on_request(void *api, ifd_http_conn_t *c, const ifd_http_request_t *r);

/* The http handler's load_report (http.h): vLLM's ORCA header for format
 * "text" or "json" (any case) — "endpoint-load-metrics: TEXT
 * named_metrics.kv_cache_usage_perc=0.25, named_metrics.num_requests_waiting=0.0"
 * or "JSON {\"named_metrics\": {…}}" — sampled now; nothing for another
 * format. 0 or IFD_ENOMEM. */
int ifd_api_load_report(void *api, const char *format, ifd_buf_t *out);

/* The route table (pure, any thread). ifd_api_route_find: the index of the
 * route serving (path, method), HEAD served by GET routes, or -1;
 * *path_known says whether the path exists with some method (405 rather
 * than 404), *open whether it needs no API key. ifd_api_route_allow writes
 * the path's methods for an Allow header ("GET, HEAD, POST"; "" when none):
 * 0 or IFD_ETOOBIG. */
int ifd_api_route_find(const char *path, int method, bool *path_known, bool *open);
int ifd_api_route_allow(const char *path, char *buf, size_t len);

/* Frees what the API made for itself (the Responses store, the grammar
 * cache). After the loop stopped. */
void ifd_api_close(ifd_api_t *api);

#endif
