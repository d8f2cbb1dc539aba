/*
 * oai_json.h — the JSON helpers of proto/'s OpenAI protocols, in one place
 * for the three files that speak them: openai.c (chat and completions),
 * openai_ext.c (their extra fields) and responses.c (/v1/responses).
 * Not a public interface: included only inside proto/.
 *
 * Reading a request: typed getters check one field and, when it is wrong,
 * fill the caller's ifd_oai_error_t the way openai.h describes (status 400,
 * type invalid_request_error, `param` the field's full path, a `code` and a
 * message in OpenAI's wording; 500 "out of memory" on allocation failure)
 * and return a negative IFD_E* code; 0 on success. What they keep is
 * copied into the request arena, so the JSON tree can be freed at once.
 *
 * Building a response: builders make jansson trees and count failed
 * insertions in an `int *bad` instead of checking every call (a NULL value
 * from a failed constructor counts too); ifd__oai_json_emit then dumps the
 * tree, or reports IFD_ENOMEM when anything went wrong, so no half-built
 * object is ever sent. Text may be any bytes: invalid UTF-8 becomes U+FFFD
 * (common/utf8.h), non-finite numbers ±9999.0 (vLLM's choice).
 *
 * Memory: json_t results are new references the caller owns (or hands to
 * ifd__oai_json_set / _add, which take them). Threading: reentrant.
 */
#ifndef IFD_OAI_JSON_H
#define IFD_OAI_JSON_H

#include "openai.h"

#include <jansson.h>

#include <stdbool.h>
#include <stdint.h>

/* Room for a parameter path such as "messages[3].tool_calls[0].function.name". */
#define IFD__OAI_JSON_PARAM_MAX 128

/* ---- reading a request --------------------------------------------------------------- */

/* Where a parse puts what it keeps (a) and what went wrong (err); both borrowed. */
typedef struct {
    ifd_arena_t *a;
    ifd_oai_error_t *err;
    /* /v1/responses' translation: the param of each input_image it turns
     * into a chat image part, in order (a JSON array of strings), so the
     * images' errors name the Responses input; NULL elsewhere */
    json_t *image_params;
} ifd__oai_json_ctx_t;

/* Fills a 400 invalid_request_error (code and param may be NULL: JSON
 * null); returns IFD_EINVAL. */
int ifd__oai_json_fail(ifd__oai_json_ctx_t *c, const char *code, const char *param, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));
/* Fills a 500 "out of memory"; returns IFD_ENOMEM. */
int ifd__oai_json_oom(ifd__oai_json_ctx_t *c);
/* j's type as OpenAI's messages name it: "an object", "a string", …, "null". */
const char *ifd__oai_json_type_name(const json_t *j);
/* "Invalid type for 'param': expected <want>, but got <j's type> instead." */
int ifd__oai_json_bad_type(ifd__oai_json_ctx_t *c, const char *param, const char *want,
                           const json_t *j);
/* "Missing required parameter: 'param'." */
int ifd__oai_json_missing(ifd__oai_json_ctx_t *c, const char *param);

/* The value of key in o, or NULL when absent or null (null means "not given"). */
json_t *ifd__oai_json_get(const json_t *o, const char *key);

/* A number in [lo, hi] (lo excluded with lo_open) into *out. */
int ifd__oai_json_number(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, double lo,
                         bool lo_open, double hi, float *out);
/* An integer (not a decimal) in [lo, hi] into *out. */
int ifd__oai_json_int(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, int64_t lo,
                      int64_t hi, int64_t *out);
int ifd__oai_json_bool(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, bool *out);
/* A count of logprobs (top_logprobs, logprobs, prompt_logprobs): an int in
 * [-1, INT32_MAX], -1 being vLLM's "the whole vocabulary"; 400 otherwise.
 * The cap (max_logprobs) is the router's. */
int ifd__oai_json_logprobs(ifd__oai_json_ctx_t *c, const json_t *j, const char *param,
                           int64_t *out);
/* A string, copied into c->a whole (NUL-terminated; *len its length).
 * Request bodies are parsed with JSON_ALLOW_NUL, as vLLM reads "\u0000":
 * a caller that passes len keeps every byte and must use the length; one
 * that passes NULL reads *out as a C string, so a string holding a NUL is
 * refused (400 invalid_value naming param) rather than cut short. */
int ifd__oai_json_string(ifd__oai_json_ctx_t *c, const json_t *j, const char *param, char **out,
                         size_t *len);
/* Whether j is the string lit, every byte of it (a NUL inside j never
 * matches: "text\u0000x" is not "text"). */
bool ifd__oai_json_is(const json_t *j, const char *lit);
/* Whether j is a string holding a NUL. */
bool ifd__oai_json_has_nul(const json_t *j);
/* The refusal of a NUL in param (400 invalid_value); returns IFD_EINVAL. */
int ifd__oai_json_nul(ifd__oai_json_ctx_t *c, const char *param);
/* Refuses (as above, naming param) a JSON value that holds a string with a
 * NUL anywhere inside (values and nested values; keys cannot hold one):
 * for what is read as C strings, such as JSON Schemas. 0 or IFD_EINVAL. */
int ifd__oai_json_no_nul(ifd__oai_json_ctx_t *c, const json_t *j, const char *param);

/* v as compact JSON text in arena a (NULL on OOM). Any value, not only
 * objects and arrays. */
char *ifd__oai_json_dump(ifd_arena_t *a, const json_t *v);

/* ---- building a response ------------------------------------------------------------- */

/* A JSON string of the bytes p[0..n), invalid UTF-8 replaced by U+FFFD
 * (NULL on OOM; "" when p is NULL or n is 0). */
json_t *ifd__oai_json_str(const char *p, size_t n);
/* A JSON number; -inf and +inf become -9999.0 and 9999.0 (JSON has no
 * infinities). */
json_t *ifd__oai_json_real(double v);
/* The 400s of an empty array and of one over max entries, naming param. */
int ifd__oai_json_empty_array(ifd__oai_json_ctx_t *c, const char *param);
int ifd__oai_json_array_too_long(ifd__oai_json_ctx_t *c, const char *param, size_t max, size_t got);
/* An array of token ids in [0, INT32_MAX] (at most max; empty only with
 * allow_empty) into *out (c->a) and *n_out; `base` names the array. */
int ifd__oai_json_token_array(ifd__oai_json_ctx_t *c, const json_t *j, const char *base, size_t max,
                              bool allow_empty, int32_t **out, size_t *n_out);

/* o[key] = v and a += v, taking v; a NULL o, a or v, or a failed insertion,
 * counts one in *bad. */
void ifd__oai_json_set(json_t *o, const char *key, json_t *v, int *bad);
void ifd__oai_json_add(json_t *a, json_t *v, int *bad);

/* Appends j (consumed, may be NULL) to out as compact JSON, wrapped as one
 * SSE event ("data: …\n\n") when sse. IFD_ENOMEM when j is NULL, bad is
 * nonzero or out cannot grow; out is then unchanged. */
int ifd__oai_json_emit(ifd_buf_t *out, json_t *j, int bad, bool sse);
/* The same as one named SSE event: "event: <event>\ndata: …\n\n" (the
 * Responses stream's typed events). */
int ifd__oai_json_emit_event(ifd_buf_t *out, const char *event, json_t *j, int bad);

/* ---- writing JSON text straight into a buffer ------------------------------------- */

/*
 * For the parts of a response that grow with the request (logprobs, prompt
 * logprobs, the non-streamed response around them) a tree costs ~10 times
 * the text it dumps (a 170 MB response once took 2 GB and 14 s): these
 * write the text directly, so memory is the output alone. The bytes are
 * those jansson dumps for the same values with the flags of
 * ifd__oai_json_emit (JSON_COMPACT | JSON_REAL_PRECISION(9)): strings
 * sanitized as ifd__oai_json_str (invalid UTF-8 → U+FFFD) and escaped as
 * jansson escapes them, numbers as jansson prints them, non-finite ones
 * ±9999.0 (NaN -9999.0) as ifd__oai_json_real. tests/unit/test_proto_openai.c
 * checks them against jansson.
 *
 * Errors are sticky: after the first failure every call does nothing, and
 * ifd__oai_w_end cuts the buffer back to where the writer began. The writer
 * borrows `out` from _begin to _end; it owns `tmp` (scratch, freed by _end).
 */
typedef struct {
    ifd_buf_t *out;
    size_t start; /* out->len at ifd__oai_w_begin */
    size_t limit; /* bytes it may add; 0: no limit */
    int rc;       /* 0, IFD_ENOMEM, or IFD_ETOOBIG once more than `limit` were written */
    ifd_buf_t tmp;
} ifd__oai_w_t;

void ifd__oai_w_begin(ifd__oai_w_t *w, ifd_buf_t *out, size_t limit);
/* 0, or the first error (out then back to its length at _begin). */
int ifd__oai_w_end(ifd__oai_w_t *w);
/* Text as it is (already JSON). */
void ifd__oai_w_raw(ifd__oai_w_t *w, const char *p, size_t n);
#define IFD__OAI_W_LIT(w, lit) ifd__oai_w_raw((w), (lit), sizeof(lit) - 1)
/* A JSON string of the bytes p[0..n) (p may be NULL when n is 0). */
void ifd__oai_w_str(ifd__oai_w_t *w, const char *p, size_t n);
void ifd__oai_w_cstr(ifd__oai_w_t *w, const char *s);
void ifd__oai_w_real(ifd__oai_w_t *w, double v);
void ifd__oai_w_int(ifd__oai_w_t *w, int64_t v);
/* j (consumed; NULL or a nonzero bad fails the writer) dumped as above;
 * with embed, without its outer braces or brackets (JSON_EMBED). */
void ifd__oai_w_json(ifd__oai_w_t *w, json_t *j, int bad, bool embed);

/* The logprobs shapes, written (the tree forms cost too much for n choices
 * of thousands of tokens). Chat: {"content":[{token, logprob, bytes,
 * top_logprobs}], "refusal": null}. Completions: {tokens, token_logprobs,
 * top_logprobs: [{token: logprob}] (logprobs 0: the token's own, as
 * vLLM), text_offset} with offsets counted in
 * characters from `offset`, after the prompt's columns when `prefix` is not
 * NULL (its offsets count from 0, so offset must then be 0). */
void ifd__oai_w_chat_logprobs(ifd__oai_w_t *w, const ifd_oai_logprob_t *lp, size_t n);
void ifd__oai_w_completion_logprobs(ifd__oai_w_t *w, const ifd_oai_lp_prefix_t *prefix,
                                    const ifd_oai_logprob_t *lp, size_t n, uint64_t offset);
/* The items of each completions column for lp[0..n), after `sep` (","
 * or ""), offsets from *chars (advanced past them): the columns of an
 * ifd_oai_lp_prefix_t, and of the choice's own tokens. */
void ifd__oai_w_completion_column(ifd__oai_w_t *w, int column, const ifd_oai_logprob_t *lp,
                                  size_t n, uint64_t *chars);
/* vLLM's prompt_logprobs: [null, {"<id>": {logprob, rank, decoded_token}}, …]
 * over v[0..n), each row the token first then at most `top` alternatives;
 * an id listed twice appears once, at its first place with its last value
 * (what a JSON object built key by key keeps). */
void ifd__oai_w_prompt_logprobs(ifd__oai_w_t *w, const ifd_oai_prompt_logprob_t *v, size_t n,
                                uint32_t top);

/* OpenAI's error object {message, type, param, code} for e (message
 * sanitized: it may echo raw input). */
json_t *ifd__oai_json_error(const ifd_oai_error_t *e, int *bad);
/* The chat logprobs "content" array: [{token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}] (Responses use it too). */
json_t *ifd__oai_json_logprob_items(const ifd_oai_logprob_t *lp, size_t n, int *bad);

#endif
