/*
 * responses_impl.h — the IFD_OAI_RESPONSES side of openai.h's response
 * builders: openai.c checks the arguments and the stream state, then hands
 * a Responses answer over to these (proto/responses.c), which build the
 * Response object and its typed SSE events (responses.h describes them).
 * Not a public interface: included only by proto/openai.c and
 * proto/responses.c.
 *
 * Each returns what the openai.h builder of the same name returns once its
 * arguments passed: 0 or IFD_ENOMEM. The stream's typed-event state
 * (s->resp) lives in the arena given to ifd__resp_stream_init and is freed
 * with it. A stream belongs to one thread at a time.
 */
#ifndef IFD_RESPONSES_IMPL_H
#define IFD_RESPONSES_IMPL_H

#include "openai.h"

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
