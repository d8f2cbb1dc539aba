/*
 * openai_impl.h — request-parsing helpers shared by proto/openai.c (the
 * core fields) and proto/openai_ext.c (structured outputs, tools and the
 * vLLM/OpenAI extras that are refused). Not a public interface.
 *
 * Every helper fills c->err the way openai.h describes (status 400 or 500)
 * and returns a negative IFD_E* code; 0 on success. Strings come from c->a.
 */
#ifndef IFD_OPENAI_IMPL_H
#define IFD_OPENAI_IMPL_H

#include "openai.h"

#include <jansson.h>

/* Room for a parameter path such as "messages[3].tool_calls[0].function.name". */
#define IFD__OAI_PARAM_MAX 128

typedef struct {
    ifd_arena_t *a;
    ifd_oai_error_t *err;
} ifd__oai_pctx_t;

int ifd__oai_perr(ifd__oai_pctx_t *c, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int ifd__oai_oom(ifd__oai_pctx_t *c);
const char *ifd__oai_jtype(const json_t *j);
int ifd__oai_bad_type(ifd__oai_pctx_t *c, const char *param, const char *want, const json_t *j);
int ifd__oai_missing(ifd__oai_pctx_t *c, const char *param);
/* The value of key, or NULL when absent or null. */
json_t *ifd__oai_get(const json_t *o, const char *key);
int ifd__oai_p_number(ifd__oai_pctx_t *c, const json_t *j, const char *param, double lo,
                      bool lo_open, double hi, float *out);
int ifd__oai_p_int(ifd__oai_pctx_t *c, const json_t *j, const char *param, int64_t lo, int64_t hi,
                   int64_t *out);
int ifd__oai_p_bool(ifd__oai_pctx_t *c, const json_t *j, const char *param, bool *out);
int ifd__oai_p_string(ifd__oai_pctx_t *c, const json_t *j, const char *param, char **out,
                      size_t *len);

/* openai_ext.c: structured outputs (both endpoints), tools (chat), the
 * refused extras, priority. Runs after the core fields are parsed. */
int ifd__oai_parse_ext(ifd__oai_pctx_t *c, const json_t *o, ifd_oai_request_t *r);

/* openai_ext.c: a message's tool_calls / tool_call_id (chat). */
int ifd__oai_p_message_tools(ifd__oai_pctx_t *c, const json_t *m, size_t i, ifd_oai_message_t *dst);

/* ---- response building, shared with proto/responses.c ---------------------------- */

/* A JSON string of arbitrary bytes, invalid UTF-8 replaced (NULL on OOM). */
json_t *ifd__oai_jstr(const char *p, size_t n);
/* A JSON number; non-finite values become ±9999.0. */
json_t *ifd__oai_jreal(double v);
/* Builders count failed insertions in *bad instead of checking each call. */
void ifd__oai_oset(json_t *o, const char *key, json_t *v, int *bad);
void ifd__oai_aadd(json_t *a, json_t *v, int *bad);
/* The chat logprobs "content" array: [{token, logprob, bytes, top_logprobs}]. */
json_t *ifd__oai_logprob_items(const ifd_oai_logprob_t *lp, size_t n, int *bad);

/* proto/responses.c: the IFD_OAI_RESPONSES side of openai.h's builders,
 * called by them after their own argument checks. */
int ifd__resp_json(ifd_buf_t *out, const ifd_oai_meta_t *m, const ifd_oai_choice_t *c,
                   const ifd_oai_usage_t *usage);
int ifd__resp_stream_init(ifd_oai_stream_t *s, ifd_arena_t *a);
int ifd__resp_stream_start(ifd_oai_stream_t *s, ifd_buf_t *out);
int ifd__resp_stream_delta(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c);
int ifd__resp_stream_tool_calls(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c);
int ifd__resp_stream_finish(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c);
int ifd__resp_stream_end(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_usage_t *usage);
int ifd__resp_stream_fail(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_error_t *e);

#endif
