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
 * No server-side state: `previous_response_id`, `conversation` and
 * `background: true` are refused with 400 naming them (the whole
 * conversation goes in `input`); `store: true` (OpenAI's default) is
 * accepted and the Response says "store": false, as vLLM answers when its
 * store is disabled. Refused as well: non-function tools, image/file/audio
 * inputs, `truncation: "auto"`, `reasoning` settings, `prompt` templates,
 * `max_tool_calls`, `n` > 1, and `include` values other than the logprobs.
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

/* Parses a POST /v1/responses body into *out (kind IFD_OAI_CHAT, n 1,
 * responses_echo set). Same contract as ifd_oai_parse_chat; a field that
 * is wrong in the translated request is reported under its Responses name
 * (input, max_output_tokens, text.format, tools). */
int ifd_responses_parse(ifd_arena_t *a, const char *body, size_t len, ifd_oai_request_t *out,
                        ifd_oai_error_t *err);

/* After ifd_oai_apply_sampling_defaults returned `set` for a request that
 * ifd_responses_parse filled: the Response's echoed temperature and top_p
 * become the values in force (the model's defaults, as vLLM's Response
 * reports its sampling parameters) instead of OpenAI's 1.0. A no-op without
 * responses_echo or when neither bit is set. 0, or IFD_ENOMEM (the echo is
 * then unchanged). */
int ifd_responses_echo_defaults(ifd_arena_t *a, ifd_oai_request_t *r, uint32_t set);

#endif
