/*
 * openai_ext.h — the request fields beyond plain sampling, for openai.c's
 * parsers: structured outputs (both endpoints), tools and tool_choice
 * (chat), vLLM's extras, and the OpenAI/vLLM parameters that are refused.
 * Not a public interface: included only by proto/openai.c.
 *
 * Both functions fill c->err as oai_json.h describes and return a negative
 * IFD_E* code, 0 on success; what they keep goes into c->a. Reentrant.
 */
#ifndef IFD_OPENAI_EXT_H
#define IFD_OPENAI_EXT_H

#include "oai_json.h"
#include "openai.h"

#include <jansson.h>

/* The extra fields of body o into r; runs after the core fields (r->kind,
 * stream, max_tokens, messages … are set). */
int ifd__oai_ext_parse(ifd__oai_json_ctx_t *c, const json_t *o, ifd_oai_request_t *r);

/* Message i's tool_calls (assistant only; kept as compact JSON) and
 * tool_call_id (chat), into dst, whose role is set. */
int ifd__oai_ext_message_tools(ifd__oai_json_ctx_t *c, const json_t *m, size_t i,
                               ifd_oai_message_t *dst);

#endif
