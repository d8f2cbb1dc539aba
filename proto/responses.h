/*
 * responses.h — POST /v1/responses, OpenAI's Responses API, on top of the
 * chat-completions machinery.
 *
 * Parsing: a Responses body is translated into the chat request it means
 * and parsed by ifd_oai_parse_chat, so every sampling parameter shares one
 * validation: `input` (a string, or items: messages with text parts,
 * function_call, function_call_output) → messages; `instructions` → a
 * leading system message; `max_output_tokens` → max_completion_tokens;
 * `text.format` → response_format; function `tools` and `tool_choice` →
 * their chat shapes; `include: ["message.output_text.logprobs"]` and
 * `top_logprobs` → logprobs. vLLM's sampling extras (top_k, seed,
 * min_tokens, structured_outputs, …) pass through unchanged.
 *
 * Server-side state is the caller's (daemon/respstore.h), seen through
 * ifd_responses_store_t: with a store, `store` (default true, as OpenAI
 * and vLLM) marks the Response to be kept and `previous_response_id`
 * continues a kept one — its conversation (ifd_responses_conversation)
 * goes between this request's instructions and its input, the earlier
 * instructions are not carried over (OpenAI's rule); an unknown id is a 404
 * (code previous_response_not_found). Without a store `store` is accepted
 * and the Response says "store": false (vLLM without its store), and
 * `previous_response_id` is refused with 400. `background: true` (state
 * .background) needs the store and `store` not false (400 naming
 * background otherwise); the caller runs it detached.
 * `conversation` is always refused with 400 naming it. Refused as well:
 * non-function tools, image/file/audio inputs, `truncation: "auto"`,
 * `prompt` templates, `max_tool_calls`, `n` > 1, encrypted reasoning, and
 * `include` values other than the logprobs and reasoning.encrypted_content
 * (accepted: no reasoning items are produced).
 *
 * Reasoning: `reasoning` {effort, summary} is checked against OpenAI's
 * values and echoed; its effort goes to the chat template as the variable
 * `reasoning_effort` (vLLM's Responses behaviour; a template without it
 * ignores it) unless chat_template_kwargs sets that. `reasoning` input
 * items are replayed as vLLM does: their text (content parts, else
 * summary parts) becomes the `reasoning` and `reasoning_content` of the
 * assistant message they belong to — the one just before, or a new one
 * that the next assistant message item completes — which a template with a
 * place for it (Qwen3, DeepSeek-R1: reasoning_content) renders and another
 * drops.
 *
 * Answering: the request keeps kind IFD_OAI_CHAT (templates, tools and
 * tool-call parsing are chat's); the caller builds the answer with
 * openai.h's builders under meta kind IFD_OAI_RESPONSES and
 * meta.responses_echo = request.responses_echo: a Response object
 * ({id "resp_…", object "response", status completed | incomplete
 * (incomplete_details.reason "max_output_tokens"), output [message item
 * with output_text, function_call items], usage {input_tokens,
 * output_tokens, …}}) or the typed SSE events response.created,
 * response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta / .done,
 * response.content_part.done, response.function_call_arguments.delta /
 * .done, response.output_item.done, then response.completed or
 * response.incomplete — each as "event: TYPE" + "data: {…, type,
 * sequence_number}", no [DONE] (the shapes the openai SDK's
 * ResponseStreamManager accumulates).
 *
 * Memory and threading: as openai.h (the caller's arena; reentrant).
 */
#ifndef IFD_RESPONSES_H
#define IFD_RESPONSES_H

#include "openai.h"

/* What a Response repeats of its request and the store keeps, bounded as
 * OpenAI documents them (characters, i.e. code points): `metadata` at most
 * 16 pairs, keys up to 64 characters, values strings up to 512; `user` a
 * string up to 256 (OpenAI's reference gives `user` no bound, and 64 for
 * safety_identifier, which replaces it: 256 keeps every identifier a
 * client sends there and still bounds what is stored). Past a bound: 400
 * string_above_max_length or object_above_max_properties naming the field;
 * a metadata value that is not a string: 400 invalid_type. */
#define IFD_RESPONSES_MAX_METADATA       16
#define IFD_RESPONSES_MAX_METADATA_KEY   64
#define IFD_RESPONSES_MAX_METADATA_VALUE 512
#define IFD_RESPONSES_MAX_USER           256

/* Parses a POST /v1/responses body into *out (kind IFD_OAI_CHAT, n 1,
 * responses_echo set). Same contract as ifd_oai_parse_chat; a field that
 * is wrong in the translated request is reported under its Responses name
 * (input, max_output_tokens, text.format, tools). */
int ifd_responses_parse(ifd_arena_t *a, const char *body, size_t len, ifd_oai_request_t *out,
                        ifd_oai_error_t *err);

/* The server's store as the parser sees it. */
typedef struct {
    bool enabled; /* responses are kept: `store` is honoured */
    /* previous_response_id → that response's conversation (a JSON array of
     * chat messages), NULL when it is not kept. Called during the parse only;
     * the text needs to live until the parse returns. */
    const char *(*conversation)(void *ctx, const char *id);
    void *ctx;
} ifd_responses_store_t;

/* What the parse decided about server-side state. */
typedef struct {
    bool store;                       /* keep the Response once answered */
    bool background;                  /* run detached, polled by id (store is then true) */
    const char *previous_response_id; /* in the arena; NULL when none */
} ifd_responses_state_t;

/* ifd_responses_parse against a store (NULL: none, as ifd_responses_parse);
 * *st filled on success. Besides the parse errors: 404
 * previous_response_not_found (IFD_EINVAL). */
int ifd_responses_parse_stored(ifd_arena_t *a, const char *body, size_t len,
                               const ifd_responses_store_t *store, ifd_oai_request_t *out,
                               ifd_responses_state_t *st, ifd_oai_error_t *err);

/* The conversation to keep with a stored Response: the chat messages of
 * rq (as ifd_responses_parse_stored made them) without its instructions'
 * system message, then `answer` as an assistant message (content: its
 * text, null when it is only tool calls; tool_calls with their call ids,
 * which function_call_output items of a continuation refer to). Appends
 * the JSON array to out. 0 or IFD_ENOMEM. */
int ifd_responses_conversation(ifd_buf_t *out, const ifd_oai_request_t *rq,
                               const ifd_oai_choice_t *answer);

/* The Response object a finished stream s ended with (what its
 * response.completed / response.incomplete event carried), as JSON
 * appended to out: what a stored streamed Response is kept as. 0,
 * IFD_EINVAL (s is not a Responses stream), IFD_ENOMEM. */
int ifd_responses_stream_snapshot(const ifd_oai_stream_t *s, const ifd_oai_usage_t *usage,
                                  ifd_buf_t *out);

/* A Response that has no output (yet): status "queued", "in_progress",
 * "cancelled" or "failed" (then with e's code and message as its error;
 * e NULL: error null), output [], usage null, and the request's echo
 * (m->responses_echo) — what a background Response is polled as before it
 * ends, or kept as when it did not complete. Appended to out as JSON. 0 or
 * IFD_ENOMEM. */
int ifd_responses_status_json(ifd_buf_t *out, const ifd_oai_meta_t *m, const char *status,
                              const ifd_oai_error_t *e);

/* After ifd_oai_apply_sampling_defaults returned `set` for a request that
 * ifd_responses_parse filled: the Response's echoed temperature and top_p
 * become the values in force (the model's defaults, as vLLM's Response
 * reports its sampling parameters) instead of OpenAI's 1.0. A no-op without
 * responses_echo or when neither bit is set. 0, or IFD_ENOMEM (the echo is
 * then unchanged). */
int ifd_responses_echo_defaults(ifd_arena_t *a, ifd_oai_request_t *r, uint32_t set);

#endif
