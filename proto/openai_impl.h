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

#endif
