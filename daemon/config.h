/*
 * config.h — the daemon's settings, defined once in a table: name, type,
 * default, whether SIGHUP may change it at run time, valid range, help.
 *
 * Sources, lowest precedence first: the table's defaults, a JSON config file
 * (--config FILE: one object whose keys are the table's names; an unknown
 * key or a wrong type is an error naming the key), then command-line flags
 * (--max-queue 64 or --max-queue=64; the flag is the key with '-' for '_';
 * a bool flag alone means true, --no-NAME false). `inferd --help` prints
 * the table, docs/configuration.md documents it.
 *
 * Reload (SIGHUP): ifd_config_reload re-reads the file and re-applies the
 * same flags into a fresh config; ifd_config_apply_reloadable then copies
 * only the reloadable keys into the running config and logs a warning for
 * every other key whose value changed (those need a restart).
 *
 * Types: STR (a string, "" = unset), INT (int64), BYTES (uint64; JSON number
 * or a string with a K/M/G/T suffix, powers of 1024), BOOL, SECS (double
 * seconds; a number or "250ms"/"2s"/"1m"), NUM (double, a plain number).
 *
 * Ownership: an ifd_config_t owns its strings (malloc'ed); free them with
 * ifd_config_free. Plain data otherwise.
 * Threading: not thread-safe; the loop thread owns the running config.
 */
#ifndef IFD_DAEMON_CONFIG_H
#define IFD_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* X(name, type, default, reloadable, arg, min, max, help) */
#define IFD_CONFIG_KEYS(X)                                                                     \
    X(model, STR, "", 0, "PATH", 0, 0, "GGUF file or Hugging Face directory to serve (required)") \
    X(model_name, STR, "", 0, "ID",  0, 0,                                                     \
      "model id clients send and /v1/models lists; default: the file name without .gguf")     \
    X(chat_template, STR, "", 0, "NAME|FILE", 0, 0,                                            \
      "chat template: a family (chatml, llama3, gemma, llama2, mistral, phi3) or a Jinja file; " \
      "default: the model's own")                                                              \
    X(max_model_len, INT, "0", 0, "N", 0, 1 << 22,                                             \
      "context length (prompt + completion) limit; 0: the model's, capped by the KV pool")     \
    X(workers, INT, "1", 0, "N", 0, 64, "CPU worker processes")                                \
    X(gpus, STR, "", 0, "LIST", 0, 0,                                                          \
      "GPU ids, e.g. 0,1: one CUDA worker per GPU instead of CPU workers")                     \
    X(gpu_memory_fraction, NUM, "0.90", 0, "F", 0.01, 1,                                       \
      "share of each GPU's memory inferd may use; the KV pool gets what is left after the "    \
      "weights and activations")                                                               \
    X(gpu_dtype, STR, "bf16", 0, "TYPE", 0, 0,                                                 \
      "GPU workers' compute: bf16 (bf16 weights and GEMM inputs) or f32 (the exact, slower "   \
      "mode)")                                                                                 \
    X(random_weights, STR, "", 0, "SHAPE.json", 0, 0,                                          \
      "serve random weights in this shape (deploy/shapes/) instead of the model's; the model " \
      "then gives only the tokenizer and chat template")                                      \
    X(weights_seed, INT, "0", 0, "N", 0, 9e18, "seed of random_weights")                       \
    X(threads, INT, "0", 0, "N", 0, 1024, "CPU threads per worker; 0: cores / workers")        \
    X(worker_binary, STR, "", 0, "PATH", 0, 0,                                                 \
      "the inferd-worker program; default: next to inferd, else $PATH")                        \
    X(kv_budget, BYTES, "1G", 0, "BYTES", 1 << 20, 0, "KV cache memory per device")            \
    X(kv_dtype, STR, "f16", 0, "TYPE", 0, 0,                                                   \
      "KV cache element type: f32, f16, bf16, q8_0, fp8 or q4_0 (CPU)")                        \
    X(kv_cache_dir, STR, "", 0, "DIR", 0, 0,                                                  \
      "directory of the KV cache's disk tier: published prefix blocks kept as files, read "   \
      "back instead of recomputed, across restarts; default none (off)")                      \
    X(kv_cache_disk_bytes, BYTES, "10G", 0, "BYTES", 1 << 20, 0,                              \
      "size bound of kv_cache_dir's files (least recently used deleted beyond)")              \
    X(kv_cache_host_bytes, BYTES, "0", 0, "BYTES", 0, 0,                                      \
      "GPU workers' host-RAM tier of the KV cache, per worker: published prefix blocks "      \
      "copied to host memory, copied back instead of recomputed; 0: off")                     \
    X(kv_cache_pin_slots, INT, "32", 0, "N", 0, 64,                                            \
      "GPU workers' pinned host buffers, one block each, of the tiers' asynchronous copies: "  \
      "block copies in flight at most (64: the CUDA backend's fences); 0: synchronous copies") \
    X(weights_dtype, STR, "auto", 0, "TYPE", 0, 0,                                             \
      "CPU workers' weights: auto (quantized types stay quantized, 8-bit activations) or f32 " \
      "(all dequantized to f32: the exact, slower path)")                                      \
    X(block_size, INT, "16", 0, "N", 1, 256, "tokens per KV block")                            \
    X(max_seqs, INT, "0", 0, "N", 0, 65536,                                                    \
      "sequences a worker runs at once; 0: the worker's default")                              \
    X(max_batched_tokens, INT, "0", 0, "N", 0, 1 << 20,                                        \
      "tokens in one engine step; 0: the worker's default")                                    \
    X(prefill_cap, STR, "auto", 0, "CAP", 0, 0,                                                \
      "prefill tokens per engine step while sequences decode: auto (adaptive, keeps the "      \
      "inter-token latency steady), off (only max_batched_tokens limits) or a number")         \
    X(spec, STR, "off", 0, "METHOD", 0, 0,                                                     \
      "speculative decoding for requests that do not choose: off, ngram (proposals from the "  \
      "request's own prompt and output) or draft (draft_model's; docs/speculative.md)")        \
    X(draft_model, STR, "", 0, "PATH", 0, 0,                                                   \
      "a smaller model with the same tokenizer proposing tokens (spec draft, or requests "     \
      "asking for it); with gpus its KV is device memory the POOL step counts")               \
    X(draft_step_tokens, INT, "0", 0, "N", 0, 1 << 20,                                         \
      "draft_model tokens fed per engine step at most (its prompt catch-up's share of a "     \
      "step); 0: max_batched_tokens (the model's budget)")                                    \
    X(mmproj, STR, "", 0, "PATH", 0, 0,                                                        \
      "llama.cpp's mmproj GGUF: the vision tower beside a GGUF model (docs/vision.md); a "     \
      "Gemma 3 directory brings its own")                                                      \
    X(image_cache_mb, INT, "256", 0, "MIB", 1, 1 << 20,                                        \
      "each worker's cache of image embeddings by the image's hash (MiB)")                    \
    X(vision_step_ms, INT, "50", 0, "MS", 1, 60000,                                            \
      "an image encode's time per worker step: the pause decoding sees (docs/vision.md)")     \
    X(spec_tokens, INT, "8", 0, "K", 1, 16, "tokens proposed per step at most (spec)")         \
    X(spec_ngram_min, INT, "1", 0, "N", 1, 16, "shortest suffix the ngram proposer matches")   \
    X(spec_ngram_max, INT, "4", 0, "N", 1, 16, "longest suffix the ngram proposer matches")    \
    X(prefix_cache, BOOL, "true", 1, NULL, 0, 0,                                               \
      "reuse cached prompt prefixes (requests may still opt out with use_cache)")              \
    X(generation_config, BOOL, "true", 1, NULL, 0, 0,                                          \
      "use a Hugging Face model's generation_config.json sampling defaults (temperature, "     \
      "top_p, top_k, min_p, repetition_penalty) for requests that do not set them")            \
    X(max_queue, INT, "256", 1, "N", 0, 1 << 20,                                               \
      "sequences waiting for a worker (and requests being tokenized) before new requests "     \
      "get 503")                                                                               \
    X(template_timeout, SECS, "2", 1, "SECS", 0.01, 600,                                       \
      "time one request's chat template may render (400 beyond)")                              \
    X(template_vars_override, BOOL, "false", 1, NULL, 0, 0,                                    \
      "let chat_template_kwargs set bos_token, eos_token, date_string, …")                     \
    X(grammar_timeout, SECS, "2", 1, "SECS", 0.01, 600,                                        \
      "time one request's structured-output grammar may take to convert and compile (400)")    \
    X(grammar_cache_bytes, BYTES, "64M", 0, "BYTES", 0, 0,                                     \
      "compiled grammars kept for repeated schemas")                                           \
    X(responses_store_entries, INT, "1000", 1, "N", 0, 1 << 20,                                \
      "Responses kept in memory for GET /v1/responses/{id} and previous_response_id (the "     \
      "least recently used of the client holding the most evicted); 0: none (a request's "     \
      "store is then ignored)")                                                                \
    X(responses_store_bytes, BYTES, "64M", 1, "BYTES", 0, 0,                                   \
      "memory the stored Responses may use at most (the least recently used of the client "    \
      "holding the most evicted)")                                                             \
    X(responses_background_max, INT, "16", 1, "N", 0, 65536,                                   \
      "background Responses (\"background\": true) running at once, each polled by id; 429 "    \
      "beyond; 0: background refused (400)")                                                   \
    X(socket, STR, "", 0, "PATH", 0, 0,                                                        \
      "Unix socket; default /run/inferd/inferd.sock as root, else "                            \
      "$XDG_RUNTIME_DIR/inferd.sock")                                                          \
    X(socket_mode, STR, "0660", 0, "MODE", 0, 0, "permissions of the Unix socket (octal)")     \
    X(listen, STR, "", 0, "HOST:PORT", 0, 0,                                                   \
      "also listen on TCP (off by default; a non-loopback address needs an API key)")          \
    X(api_key, STR, "", 1, "KEY", 0, 0,                                                        \
      "API key TCP clients must send as a Bearer token (one key, named default)")              \
    X(api_key_file, STR, "", 1, "FILE", 0, 0,                                                  \
      "file of API keys, one per line: NAME KEY, or a bare KEY named by its line number; # "   \
      "comments")                                                                              \
    X(allowed_origins, STR, "", 1, "LIST", 0, 0,                                               \
      "browser origins allowed to call the API (CORS), comma-separated scheme://host[:port], "  \
      "or * for any; default none: no CORS headers, preflights refused")                       \
    X(root_path, STR, "", 1, "PREFIX", 0, 0,                                                   \
      "path prefix a reverse proxy adds (e.g. /inferd): stripped from request paths that "     \
      "start with it (uvicorn's root_path); paths without it are served as they are")          \
    X(max_connections, INT, "1024", 1, "N", 1, 1 << 20, "open client connections at most")     \
    X(max_header_bytes, BYTES, "16K", 1, "BYTES", 1024, 1 << 20,                               \
      "request line and headers at most (431 beyond)")                                         \
    X(max_body_bytes, BYTES, "4M", 1, "BYTES", 1024, 1 << 30, "request body at most (413)")    \
    X(output_buffer_bytes, BYTES, "4M", 1, "BYTES", 65536, 1 << 30,                            \
      "unsent response bytes per connection before a slow reader is dropped")                  \
    X(max_response_bytes, BYTES, "64M", 1, "BYTES", 65536, 0,                                  \
      "a non-streamed response's body at most: a request whose answer would be larger is "    \
      "refused with 400 (streams are not bounded by it)")                                      \
    X(max_image_bytes, BYTES, "20M", 1, "BYTES", 1024, 1 << 30,                                \
      "an image's bytes at most (a data URL's decoded size, a fetched URL's body; 400 "       \
      "beyond)")                                                                               \
    X(allow_image_urls, STR, "", 0, "HOST[,HOST...]", 0, 0,                                    \
      "hosts whose http(s) image URLs are fetched: names, *.domain suffixes, IP literals "    \
      "([IPv6]); default none (image URLs other than data: get 400; docs/security.md)")       \
    X(image_url_timeout, SECS, "10", 1, "SECS", 0.01, 600,                                     \
      "time a request's image URL fetches may take together, connects included (400)")        \
    X(image_url_max_redirects, INT, "3", 1, "N", 0, 20,                                        \
      "redirects an image URL's fetch follows, each hop checked like the first URL "           \
      "(allow_image_urls, the address guard, no https to http); 0: none (400)")                \
    X(max_image_pixels, INT, "40000000", 1, "N", 1, 1 << 30,                                   \
      "an image's width x height at most, read from its header before decoding (400 beyond)") \
    X(limit_images_per_prompt, INT, "0", 1, "N", 0, 64,                                        \
      "images one request may carry (vLLM's --limit-mm-per-prompt; 400 beyond); 0: as many "   \
      "as one worker frame holds at the model's picture size (12 for Gemma 3's 896x896)")      \
    X(max_logprobs, INT, "20", 1, "N", -1, 2147483647,                                         \
      "logprobs a request may ask for at most (top_logprobs, completions logprobs, "           \
      "prompt_logprobs; 400 beyond, and beyond the vocabulary): vLLM's --max-logprobs; -1: "   \
      "the model's vocabulary")                                                                \
    X(header_timeout, SECS, "10", 1, "SECS", 0.01, 3600,                                       \
      "time to receive a request's headers (408 beyond)")                                      \
    X(body_timeout, SECS, "30", 1, "SECS", 0.01, 3600, "time to receive a request's body")     \
    X(keepalive_timeout, SECS, "60", 1, "SECS", 0.01, 86400,                                   \
      "idle time before a keep-alive connection is closed")                                    \
    X(shutdown_grace, SECS, "30", 1, "SECS", 0, 86400,                                         \
      "on SIGTERM, time in-flight requests get to finish")                                     \
    X(worker_ping_interval, SECS, "5", 1, "SECS", 0.05, 3600, "liveness ping period")          \
    X(worker_timeout, SECS, "30", 1, "SECS", 0.1, 3600,                                        \
      "a worker that does not answer a ping this long is killed and replaced")                 \
    X(worker_start_timeout, SECS, "300", 1, "SECS", 1, 86400,                                  \
      "time a worker gets to load the model and report ready")                                 \
    X(restart_backoff, SECS, "0.5", 1, "SECS", 0, 3600,                                        \
      "delay before restarting a crashed worker (doubles per crash in a row)")                 \
    X(restart_backoff_max, SECS, "30", 1, "SECS", 0, 86400, "longest restart delay")           \
    X(crash_loop_limit, INT, "5", 1, "N", 1, 1000,                                             \
      "crashes within crash_loop_window that make a crash loop (see crash_loop_backoff)")      \
    X(crash_loop_window, SECS, "60", 1, "SECS", 1, 86400, "see crash_loop_limit")              \
    X(crash_loop_backoff, SECS, "60", 1, "SECS", 0.1, 86400,                                   \
      "a worker in a crash loop is tried again after this (doubles per loop in a row)")        \
    X(crash_loop_backoff_max, SECS, "900", 1, "SECS", 0.1, 86400,                              \
      "longest delay before trying a crash-looping worker again")                              \
    X(route_slack, INT, "4", 1, "N", 0, 1 << 20,                                               \
      "a worker holding the prompt's prefix is preferred unless it runs this many more "       \
      "sequences than the least-loaded one")                                                   \
    X(log_level, STR, "info", 1, "LEVEL", 0, 0, "error, warn, info or debug")                  \
    X(log_file, STR, "", 1, "FILE", 0, 0,                                                      \
      "append logs to FILE (reopened on SIGHUP); default stderr")

typedef enum {
    IFD_CFG_STR = 0,
    IFD_CFG_INT,
    IFD_CFG_BYTES,
    IFD_CFG_BOOL,
    IFD_CFG_SECS,
    IFD_CFG_NUM,
} ifd_cfg_type_t;

#define IFD__CFG_CTYPE_STR   char *
#define IFD__CFG_CTYPE_INT   int64_t
#define IFD__CFG_CTYPE_BYTES uint64_t
#define IFD__CFG_CTYPE_BOOL  bool
#define IFD__CFG_CTYPE_SECS  double
#define IFD__CFG_CTYPE_NUM   double

typedef struct {
#define IFD__CFG_FIELD(name, type, def, reload, arg, lo, hi, help) IFD__CFG_CTYPE_##type name;
    IFD_CONFIG_KEYS(IFD__CFG_FIELD)
#undef IFD__CFG_FIELD
} ifd_config_t;

/* What the command line asked for besides settings. */
typedef struct {
    bool help;
    bool version;
    bool print_config; /* --print-config: print the effective config as JSON, exit */
    char *inspect;     /* --inspect PATH: print the model's summary (common/inspect/inspect.h), exit;
                        * NULL when absent; owned */
    bool json;         /* --json: --inspect prints JSON (only with --inspect) */
    char *config_file; /* --config FILE, or NULL; owned */
    int argc;          /* the settings flags, kept for reloads */
    char **argv;       /* owned copies */
} ifd_config_cli_t;

/* Frees the strings; c may be re-initialised afterwards. */
void ifd_config_free(ifd_config_t *c);

/*
 * Builds the configuration from argv: defaults, then --config FILE, then
 * the flags; validates ranges. On success *c is set (free with
 * ifd_config_free) and *cli describes the rest (free with
 * ifd_config_cli_free). Returns 0, or IFD_EINVAL with a one-line reason in
 * err (unknown flag or key, bad value, value out of range, file unreadable
 * or not JSON).
 */
int ifd_config_from_args(ifd_config_t *c, ifd_config_cli_t *cli, int argc, char **argv,
                         char *err, size_t errlen);
void ifd_config_cli_free(ifd_config_cli_t *cli);

/* Re-reads cli's file and flags into *out (for SIGHUP). Same errors. */
int ifd_config_reload(ifd_config_t *out, const ifd_config_cli_t *cli, char *err, size_t errlen);

/* Copies the reloadable keys of `next` into `cur`, logs each change, and
 * warns about non-reloadable keys that differ. Returns the number of keys
 * changed, or IFD_ENOMEM. */
int ifd_config_apply_reloadable(ifd_config_t *cur, const ifd_config_t *next);

/* Writes --help (usage line + every key). */
void ifd_config_usage(FILE *f);

/* Writes the configuration as one JSON object (api keys shown as "***"). */
int ifd_config_print_json(const ifd_config_t *c, FILE *f);

#endif
