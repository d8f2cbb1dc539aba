/*
 * api.h — the client's view of the daemon's OpenAI-compatible API: request
 * bodies for /v1/chat/completions and /v1/completions built from plain
 * parameters, and a reader that turns a response body (an SSE stream of
 * chunks, or one JSON object) into text deltas, a finish reason, usage and
 * errors, whichever arrives.
 *
 * The reader sees every content-bearing chunk (a chunk whose "choices" is
 * not empty), which is where the load generator takes its timestamps,
 * exactly as vLLM's benchmark does. Text of choice 0 only is delivered
 * (the CLI asks for n = 1). A chunk with an "error" key (an error after the
 * 200 was sent) is recorded and ends the stream.
 *
 * Ownership: bodies are returned as malloc'ed strings (free()). A reader is
 * embedded by its caller (_init/_close); the strings it hands to callbacks
 * live only during the call. Threading: one thread per reader.
 */
#ifndef IFD_CLIENT_API_H
#define IFD_CLIENT_API_H

#include "http.h"
#include "proto/sse.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sampling and request options; "unset" fields are left out of the JSON so
 * the daemon's defaults apply. */
typedef struct {
    const char *model;  /* NULL: the daemon's one model */
    int64_t max_tokens; /* < 0: unset */
    double temperature; /* < 0: unset */
    double top_p;       /* < 0: unset */
    bool has_seed;
    int64_t seed;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool ignore_eos;    /* sent only when true */
    int use_cache;      /* -1 unset, 0 false, 1 true */
} ifd_cli_api_params_t;

/* Everything unset, stream true, include_usage true. */
ifd_cli_api_params_t ifd_cli_api_default_params(void);

/* POST /v1/chat/completions body: the params plus `messages` (a JSON array
 * of {role, content}; borrowed). NULL when out of memory. */
char *ifd_cli_api_chat_body(const ifd_cli_api_params_t *p, json_t *messages);

/* A chat image part {"type": "image_url", "image_url": {"url": "data:…"}}
 * holding the file at path (at most 64 MiB; its type sniffed from the
 * bytes: JPEG, PNG, WebP, GIF), or NULL with the reason in err ("FILE: not
 * an image …", a read error). The daemon decodes it (docs/api.md). */
json_t *ifd_cli_api_image_part(const char *path, char *err, size_t errlen);

/* A user message: {"role": "user", "content": text} or, with images (a
 * JSON array of image parts, borrowed; NULL or empty: none), the parts
 * then {"type": "text", "text": text}. NULL: out of memory or invalid UTF-8. */
json_t *ifd_cli_api_user_message(const char *text, const json_t *images);

/* POST /v1/completions body with a text prompt, or with token ids
 * (tokens != NULL: n_tokens ids sent as given, no template). */
char *ifd_cli_api_completion_body(const ifd_cli_api_params_t *p, const char *prompt,
                                  const int32_t *tokens, size_t n_tokens);

typedef struct {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens; /* prompt_tokens_details.cached_tokens; 0 when absent */
} ifd_cli_api_usage_t;

/* Text of choice 0 ("delta.content", "message.content" or "text"). A
 * negative return stops the reader with that error. */
typedef int (*ifd_cli_api_text_cb)(void *ud, const char *text, size_t len);
/* A chunk with a non-empty "choices" array arrived; has_text says whether
 * it carried any text of choice 0. */
typedef void (*ifd_cli_api_chunk_cb)(void *ud, bool has_text);

typedef struct {
    /* results, read-only for the caller */
    bool done;              /* [DONE] seen (stream) or the object parsed */
    char finish_reason[32]; /* "" until a choice finished */
    bool has_usage;
    ifd_cli_api_usage_t usage;
    char error[512];  /* an error object's message; "" if none */
    char id[80];      /* the response id */
    size_t n_chunks;  /* content-bearing chunks */
    json_t *response; /* non-stream: the whole object (owned; keep_response) */
    /* settings */
    bool keep_response;
    ifd_cli_api_text_cb text_cb;
    ifd_cli_api_chunk_cb chunk_cb;
    void *ud;
    /* private */
    int mode; /* 0 undecided, 1 SSE, 2 one JSON body */
    ifd_sse_parser_t sse;
    ifd_buf_t raw;
} ifd_cli_api_reader_t;

/* Sets up a reader with optional callbacks. Never fails. */
void ifd_cli_api_reader_init(ifd_cli_api_reader_t *r, ifd_cli_api_text_cb text,
                             ifd_cli_api_chunk_cb chunk, void *ud);
void ifd_cli_api_reader_close(ifd_cli_api_reader_t *r);

/*
 * Feeds body bytes. `sse` says the body is an event stream (from the
 * Content-Type); otherwise the bytes are collected for _finish. Returns 0,
 * IFD_EFORMAT (an event that is not JSON), IFD_ETOOBIG, IFD_ENOMEM, or a
 * callback's error.
 */
int ifd_cli_api_reader_feed(ifd_cli_api_reader_t *r, bool sse, const char *data, size_t len);

/* After the body ended: parses a collected JSON body (delivering its text
 * and usage through the same callbacks). 0 or IFD_EFORMAT. */
int ifd_cli_api_reader_finish(ifd_cli_api_reader_t *r);

/*
 * The message of an error response body: error.message of an OpenAI error
 * object, a plain {"error": "…"}, or the body's first line. Writes into
 * out (always NUL-terminated).
 */
void ifd_cli_api_error_message(const char *body, size_t len, char *out, size_t n);

#endif
